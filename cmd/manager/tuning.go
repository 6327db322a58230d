package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/vsphere"
)

// maxConcurrentReconciles is how many pools are reconciled at once, so that one pool's
// pass never holds another pool's back; a pool is never reconciled twice at once.
var maxConcurrentReconciles = flag.Int("max-concurrent-reconciles", 4, "How many GPUPoolProfiles are reconciled at the same time.")

// maxConcurrentStarts bounds the vSphere task starts a pool asks vCenter for at once:
// in a switch of a large pool, GPU freed -> task is the time a power-on waits for its
// turn among the pool's (docs/performance.md). Each start waits for vCenter's answer
// (the task queued), not for the task's end.
var maxConcurrentStarts = flag.Int("max-concurrent-starts", execute.MaxConcurrentStarts,
	"How many vSphere task starts (power-ons, suspends, power-offs, reconfigures) a pool asks vCenter for at the same time; a waiting suspend, power-off or reconfigure goes before the waiting power-ons, and a host's power-ons still go one after the other, in the plan's order. At least 1.")

// startsLimitError says what is wrong with --max-concurrent-starts, or nil.
func startsLimitError(n int) error {
	if n < 1 {
		return fmt.Errorf("--max-concurrent-starts %d: at least 1 (default %d)", n, execute.MaxConcurrentStarts)
	}
	return nil
}

// statusWriteInterval is how long a pass may leave the changes of a pool's status that
// can be observed again (task ids, tasks ended, steps begun, words) unwritten: at 64
// hosts each write is the API server's work on a 300-430 KB object
// (controllers/statusdefer.go, docs/performance.md).
var statusWriteInterval = flag.Duration("status-write-interval", controllers.DefaultStatusInterval,
	"How long a pass may leave unwritten the changes of a pool's status that can be observed again (a task's id, a task ended, a step begun, messages); intents, failures, a condition's status or reason and transitions are written at once. 0 writes every pass's status. 0 to 1m.")

// statusIntervalError says what is wrong with --status-write-interval, or nil.
func statusIntervalError(d time.Duration) error {
	if d < 0 || d > time.Minute {
		return fmt.Errorf("--status-write-interval %s: write 0 to 1m (default %s; 0 writes every pass's status)", d, controllers.DefaultStatusInterval)
	}
	return nil
}

// minPassInterval spaces a pool's passes woken by what its own switch does (its nodes,
// pods and tasks changing by the hundred), so that they do not run back to back, each
// reading vCenter again to record what the executor does on its own
// (controllers/passpace.go, docs/performance.md).
var minPassInterval = flag.Duration("min-pass-interval", controllers.DefaultMinPassInterval,
	"How long after a pool's pass began a change of its own nodes, pods or vSphere tasks starts its next pass at the soonest; a change of its spec, a GPUPoolRequest, demand or the credentials starts one at once. 0: at once. 0 to 10s.")

// minPassIntervalError says what is wrong with --min-pass-interval, or nil.
func minPassIntervalError(d time.Duration) error {
	if d < 0 || d > 10*time.Second {
		return fmt.Errorf("--min-pass-interval %s: write 0 to 10s (default %s; 0 starts a pass at each change)", d, controllers.DefaultMinPassInterval)
	}
	return nil
}

// memoryLimit is the container's memory limit (the manifests pass limits.memory through
// the downward API). The Go runtime does not see a cgroup's limit: without a soft limit
// its heap grows to twice what is live before it collects, and a switch of a large pool
// (inventory reads, events, a watch per node) peaks past a 256 MiB limit, which is an
// OOM kill in the middle of a transition. With it, the collector works harder as the
// process nears the limit instead.
var memoryLimit = flag.String("memory-limit", "", "The container's memory limit (such as 256Mi, or bytes); the Go runtime keeps its memory under 90 % of it (GOMEMLIMIT, when set, wins). Empty: no soft limit.")

// gcPercent is how far the Go heap grows past what is live before the collector runs
// (GOGC). The runtime's 100 lets a switch's peak heap reach twice what is live; the
// manager is idle between switches, so collecting more often costs CPU only while a
// switch allocates, and keeps its RSS at a switch's peak lower: 35 kept a 64-host
// switch's peak under 150 MiB for a few seconds more of the manager's CPU in the switches
// (docs/performance.md, "The runs of 2026-12-06, 14:00" and "The runs of 2026-12-06,
// 17:00").
var gcPercent = flag.Int("gc-percent", DefaultGCPercent, "How far, in percent, the Go heap grows past what is live before a collection (GOGC; the Go runtime's default is 100). Lower keeps the memory at a switch's peak lower for more collector CPU during the switch. GOGC, when set, wins. 10 to 1000.")

// DefaultGCPercent is --gc-percent's default.
const DefaultGCPercent = 35

// gcPercentToSet is the percent to give the runtime, or false when GOGC is set (the
// runtime applied it); a value outside 10-1000 is an error.
func gcPercentToSet(percent int, gogc string) (int, bool, error) {
	if percent < 10 || percent > 1000 {
		return 0, false, fmt.Errorf("--gc-percent %d: write 10 to 1000 (default %d; GOGC=off in the environment turns the collector off)", percent, DefaultGCPercent)
	}
	if gogc != "" {
		return 0, false, nil
	}
	return percent, true, nil
}

// applyGCPercent sets the runtime's GC percent from --gc-percent.
func applyGCPercent() (int, error) {
	p, ok, err := gcPercentToSet(*gcPercent, os.Getenv("GOGC"))
	if err != nil || !ok {
		return 0, err
	}
	debug.SetGCPercent(p)
	return p, nil
}

// softMemoryLimit is the soft limit in bytes for a container limit (90 %, headroom for
// what the runtime does not account), or false when there is none to set: GOMEMLIMIT
// set (the runtime applied it), or no limit given. An unparsable value is an error.
func softMemoryLimit(limit, gomemlimit string) (int64, bool, error) {
	if gomemlimit != "" || limit == "" {
		return 0, false, nil
	}
	q, err := resource.ParseQuantity(limit)
	if err != nil {
		return 0, false, fmt.Errorf("--memory-limit %q: %w (write a quantity such as 256Mi, or bytes)", limit, err)
	}
	b := q.Value()
	if b <= 0 {
		return 0, false, fmt.Errorf("--memory-limit %q: not a positive size (write a quantity such as 256Mi, or bytes)", limit)
	}
	return b / 10 * 9, true, nil
}

// applyMemoryLimit sets the runtime's soft memory limit from --memory-limit.
func applyMemoryLimit() (int64, error) {
	b, ok, err := softMemoryLimit(*memoryLimit, os.Getenv("GOMEMLIMIT"))
	if err != nil || !ok {
		return 0, err
	}
	debug.SetMemoryLimit(b)
	return b, nil
}

// watchMinVMs is from how many VMs on a pool's reads of vCenter are kept by a property
// collector of the pool's own and polled for what changed, rather than read whole each
// pass (vsphere/inventoryview.go).
var watchMinVMs = flag.Int("vcenter-watch-min-vms", vsphere.WatchMinVMs,
	"From how many VMs on a pool's inventory is kept by a vCenter property collector of its own and polled for what changed (WaitForUpdatesEx) instead of read whole each pass; 0 reads every pool whole. Each such pool holds one collector in the manager's vCenter session (at most 8 a session; one unread for 10 minutes is destroyed).")
