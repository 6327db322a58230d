package vsphere

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// How often vCenter's capacity query is asked. An inventory read happens on every pass of
// every pool (and demand wakes passes on pod events), while vCenter's answer for a host
// changes only when what runs on it does. So the session remembers each host's last
// answer with a fingerprint of what the read saw of the host, and asks again only when:
//
//   - the fingerprint changed: a VM of the host changed power state, vGPU profiles or
//     host, a GPU's VMs or vGPU mode changed, the host's offered profiles, connection or
//     maintenance state changed, or the recent tasks of the host or of its VMs changed
//     (a task started, or vCenter dropped one from the list). The read does not read the
//     state of VMs' tasks, so a task in flight is seen through the recent task that
//     appeared when it started and, once it ends, through the power state or profile it
//     changed;
//   - the answer is older than CapacityMaxAge, which bounds what the fingerprint cannot
//     see (a reservation made outside the inventory gpupool reads, a task that runs for
//     long without changing anything the read sees);
//   - the last query of the host failed (only answers are remembered).
//
// Each query has its own deadline (CapacityQueryTimeout, WithCapacityQueryTimeout), so a
// hung DirectPathProfileManager costs a read at most that, not the pass's whole budget.
// After a query times out, no host of the session is asked for CapacityQueryBackoff: the
// hosts whose answer cannot be reused record the capacity as failed, with a message
// saying why and until when (on the connector's clock, WithClock). A failed or skipped
// query never fails the read; the planner then has no second opinion for the host.
const (
	// CapacityQueryTimeout is the default deadline of one capacity query.
	CapacityQueryTimeout = 10 * time.Second
	// CapacityQueryBackoff is how long no capacity query is asked after one timed out.
	CapacityQueryBackoff = 5 * time.Minute
	// CapacityMaxAge is how long an answer is reused for a host whose fingerprint did not
	// change.
	CapacityMaxAge = 5 * time.Minute
)

// WithCapacityQueryTimeout overrides CapacityQueryTimeout; zero or less keeps it.
func WithCapacityQueryTimeout(d time.Duration) Option {
	return func(sc *SessionCache) {
		if d > 0 {
			sc.capacityTimeout = d
		}
	}
}

// capacityMemo is a session's memory of vCenter's capacity answers and of a query that
// timed out.
type capacityMemo struct {
	mu      sync.Mutex
	answers map[types.ManagedObjectReference]capacityAnswer
	// hungUntil is when queries may be asked again after one timed out; hungWhy says
	// which and when.
	hungUntil time.Time
	hungWhy   string
}

// capacityAnswer is vCenter's last answer for a host (CapacityRead only), with the
// fingerprint of the read it was asked for and when it was answered.
type capacityAnswer struct {
	fingerprint [32]byte
	at          time.Time
	capacity    inventory.VCenterCapacity
}

// reuse returns the remembered answer for the host when its fingerprint is the same and
// it is younger than maxAge (an answer from the clock's future, after the clock was set
// back, is not reused).
func (m *capacityMemo) reuse(host types.ManagedObjectReference, fp [32]byte, now time.Time, maxAge time.Duration) (inventory.VCenterCapacity, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.answers[host]
	if !ok || a.fingerprint != fp || now.Before(a.at) || now.Sub(a.at) >= maxAge {
		return inventory.VCenterCapacity{}, false
	}
	return a.capacity, true
}

// remember records an answer (a failed query forgets the host's last one).
func (m *capacityMemo) remember(host types.ManagedObjectReference, fp [32]byte, now time.Time, c inventory.VCenterCapacity) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c.State != inventory.CapacityRead {
		delete(m.answers, host)
		return
	}
	if m.answers == nil {
		m.answers = map[types.ManagedObjectReference]capacityAnswer{}
	}
	m.answers[host] = capacityAnswer{fingerprint: fp, at: now, capacity: c}
}

// backingOff says, while queries are held back after a timeout, why (else "").
func (m *capacityMemo) backingOff(now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Before(m.hungUntil) {
		return m.hungWhy
	}
	return ""
}

// timedOut holds queries back for backoff from now, and returns the message the hosts
// that are not asked meanwhile record.
func (m *capacityMemo) timedOut(host string, timeout, backoff time.Duration, now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hungUntil = now.Add(backoff)
	m.hungWhy = fmt.Sprintf("not asked: vCenter's DirectPathProfileManager.QueryCapacity for host %s did not answer within %s at %s; no host is asked before %s",
		host, timeout, now.UTC().Format(time.RFC3339), m.hungUntil.UTC().Format(time.RFC3339))
	return m.hungWhy
}

// capacityFingerprint sums up what the read saw of a host that vCenter's capacity answer
// depends on: the host's availability, offered profiles and GPUs (mode, VMs on each), its
// recent tasks, and per VM on it its power state, vGPU profiles and recent tasks.
func capacityFingerprint(h inventory.Host, self mo.HostSystem, vms []*mo.VirtualMachine) [32]byte {
	var b strings.Builder
	fmt.Fprintf(&b, "host %s %s %t %t %s\n", h.Ref, h.ConnectionState, h.InMaintenance, h.EnteringMaintenance, h.Policy)
	for _, p := range h.Profiles {
		fmt.Fprintf(&b, "profile %s\n", p.Name)
	}
	for _, g := range h.GPUs {
		fmt.Fprintf(&b, "gpu %s %s %s\n", g.PCIID, g.Mode, strings.Join(g.VMs, ","))
	}
	fmt.Fprintf(&b, "tasks %s\n", refList(self.RecentTask))
	vms = slices.Clone(vms)
	slices.SortFunc(vms, func(a, b *mo.VirtualMachine) int { return strings.Compare(a.Self.Value, b.Self.Value) })
	for _, vm := range vms {
		var profiles []string
		if vm.Config != nil {
			_, _, profiles = vgpuProfiles(vm.Config.Hardware.Device)
		}
		fmt.Fprintf(&b, "vm %s %s %s tasks %s\n", vm.Self.Value, vm.Runtime.PowerState, strings.Join(profiles, ","), refList(vm.RecentTask))
	}
	return sha256.Sum256([]byte(b.String()))
}

// refList is the sorted ids of refs, comma-separated.
func refList(refs []types.ManagedObjectReference) string {
	ids := refValues(refs)
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// vmsByHost groups the read's VMs by the host they run on: pointers into vms, not
// copies (a mo.VirtualMachine is 2 KB before what it points to; copies of the 1,280 VMs
// of a 64-host read were 6.8 MB of the manager's heap at a switch's peak).
func vmsByHost(vms []mo.VirtualMachine) map[types.ManagedObjectReference][]*mo.VirtualMachine {
	out := map[types.ManagedObjectReference][]*mo.VirtualMachine{}
	for i := range vms {
		if h := vms[i].Runtime.Host; h != nil {
			out[*h] = append(out[*h], &vms[i])
		}
	}
	return out
}
