package localenv

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// A switch's trace, as the benchmark observed it: what the watches of Nodes and Pods
// saw (on the benchmark's clock) and what vgpusim's task log says (on vgpusim's clock).
// reactions and criticalPath turn it into gpupool's reaction times and the split of
// the switch's time between vSphere, Kubernetes and gpupool. Nothing here comes from
// gpupool's own status or metrics.

// nodeTrace is when one worker's node reached each precondition or action; a zero time
// was not seen.
type nodeTrace struct {
	// Cordoned: the node to drain was seen unschedulable.
	Cordoned time.Time
	// PodsGone: the last of the benchmark's pods on the node was deleted (zero: it had
	// none, and Cordoned is the precondition of its park).
	PodsGone time.Time
	// ReadyForWork: the node of the new layout was seen Ready with its GPUs advertised.
	ReadyForWork time.Time
	// Done: the node of the new layout was seen labelled for it and schedulable.
	Done time.Time
}

// switchTrace is one switch.
type switchTrace struct {
	Start time.Time // when the benchmark asked for the switch
	// Old are the nodes the switch parks, New those it brings up, by VM name.
	Old, New map[string]*nodeTrace
	// Tasks are vgpusim's VM tasks started during the switch.
	Tasks []vgpusim.TaskRecord
	// Cordons counts, per node, how often it went from schedulable to cordoned.
	Cordons map[string]int
	// Offset is vgpusim's clock minus the benchmark's: a task time t is t-Offset on the
	// benchmark's clock. vgpusim runs on the benchmark's machine, so it is 0 there; it
	// is a parameter so that a remote vCenter's clock is never compared unadjusted.
	Offset time.Duration
	// HostOf names a VM's host (the GPUs an old VM frees are a new VM's precondition).
	HostOf func(vm string) string
}

// Reaction kinds: the precondition, then gpupool's next action for the worker.
const (
	ReactCordon  = "start>cordon"     // the switch was asked for; the node to drain is cordoned
	ReactPark    = "pods gone>park"   // the host's old nodes' last pod is gone; a park task starts
	ReactTask    = "task>next task"   // a task of the VM finished; its next task starts
	ReactFreed   = "GPU freed>task"   // the host's last old VM is parked; a new VM's first task starts
	ReactRelabel = "ready>relabelled" // the new node is ready for work; it is relabelled and uncordoned
)

var reactionKinds = []string{ReactCordon, ReactPark, ReactTask, ReactFreed, ReactRelabel}

// local converts a vgpusim time to the benchmark's clock.
func (tr *switchTrace) local(t time.Time) time.Time { return t.Add(-tr.Offset) }

// tasksOf is the tasks of each VM, in the order they started.
func (tr *switchTrace) tasksOf() map[string][]vgpusim.TaskRecord {
	out := map[string][]vgpusim.TaskRecord{}
	for _, t := range tr.Tasks {
		out[t.VMName] = append(out[t.VMName], t)
	}
	for _, ts := range out {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Start.Before(ts[j].Start) })
	}
	return out
}

// freedAt is, per host, when its last old VM's park task finished (local clock).
func (tr *switchTrace) freedAt(tasks map[string][]vgpusim.TaskRecord) map[string]time.Time {
	out := map[string]time.Time{}
	for vm := range tr.Old {
		ts := tasks[vm]
		if len(ts) == 0 || ts[len(ts)-1].Finish.IsZero() {
			continue
		}
		h, f := tr.HostOf(vm), tr.local(ts[len(ts)-1].Finish)
		if f.After(out[h]) {
			out[h] = f
		}
	}
	return out
}

// since is b-a, or -1 when either is unknown; a negative difference (two watches seen in
// another order than they happened) counts as 0.
func since(a, b time.Time) time.Duration {
	if a.IsZero() || b.IsZero() {
		return -1
	}
	return max(b.Sub(a), 0)
}

// slowestParks describes the n old nodes whose park started longest after their host's
// drains were done (drained), with both times from the switch's start: where to look in
// the manager's log.
func (tr *switchTrace) slowestParks(n int) []string {
	tasks := tr.tasksOf()
	drained := tr.drained(tasks)
	var all []slowStep
	for vm := range tr.Old {
		if ts, d := tasks[vm], drained[tr.HostOf(vm)]; len(ts) > 0 && !d.at.IsZero() {
			all = append(all, slowStep{vm, d.at, tr.local(ts[0].Start)})
		}
	}
	return tr.slowest(all, n, "host drained", "park")
}

// slowestRelabels describes the n new nodes relabelled longest after they were ready
// for work, and slowestFreed the n new VMs whose first task started longest after their
// host's GPUs were freed, with both times from the switch's start.
func (tr *switchTrace) slowestRelabels(n int) []string {
	var all []slowStep
	for vm, nt := range tr.New {
		if !nt.ReadyForWork.IsZero() && !nt.Done.IsZero() {
			all = append(all, slowStep{vm, nt.ReadyForWork, nt.Done})
		}
	}
	return tr.slowest(all, n, "ready", "relabelled")
}

func (tr *switchTrace) slowestFreed(n int) []string {
	tasks := tr.tasksOf()
	freed := tr.freedAt(tasks)
	var all []slowStep
	for vm := range tr.New {
		ts, f := tasks[vm], freed[tr.HostOf(vm)]
		if len(ts) > 0 && !f.IsZero() && !tr.local(ts[0].Start).Before(f) {
			all = append(all, slowStep{vm, f, tr.local(ts[0].Start)})
		}
	}
	return tr.slowest(all, n, "GPUs freed", "task")
}

// slowStep is a worker's precondition met (from) and its step taken (to).
type slowStep struct {
	vm       string
	from, to time.Time
}

func (tr *switchTrace) slowest(all []slowStep, n int, from, to string) []string {
	sort.Slice(all, func(i, j int) bool { return all[i].to.Sub(all[i].from) > all[j].to.Sub(all[j].from) })
	var out []string
	for _, s := range all[:min(n, len(all))] {
		out = append(out, fmt.Sprintf("%s %s (%s at %s, %s at %s)", s.vm, s.to.Sub(s.from).Round(10*time.Millisecond),
			from, s.from.Sub(tr.Start).Round(10*time.Millisecond), to, s.to.Sub(tr.Start).Round(10*time.Millisecond)))
	}
	return out
}

// drained is, per host, its old node whose pods were gone last (its cordon when it had
// none) and when. The plan parks a host's VMs once every drain of the host is done
// (plan.Plan.Due: a host's steps go phase by phase), so that is a park's precondition,
// not the node's own pods gone: a node emptied early waits for its siblings' pods, which
// is Kubernetes' time, not gpupool's.
func (tr *switchTrace) drained(tasks map[string][]vgpusim.TaskRecord) map[string]drainedNode {
	out := map[string]drainedNode{}
	for vm, n := range tr.Old {
		at := cmpOr(n.PodsGone, n.Cordoned)
		if len(tasks[vm]) == 0 || at.IsZero() {
			continue
		}
		if h := tr.HostOf(vm); at.After(out[h].at) {
			out[h] = drainedNode{vm: vm, at: at}
		}
	}
	return out
}

// drainedNode is an old VM, and when its node's pods were gone.
type drainedNode struct {
	vm string
	at time.Time
}

// reactions lists gpupool's reaction times of the switch by kind.
func (tr *switchTrace) reactions() map[string][]time.Duration {
	out := map[string][]time.Duration{}
	add := func(kind string, d time.Duration) {
		if d >= 0 {
			out[kind] = append(out[kind], d)
		}
	}
	tasks := tr.tasksOf()
	drained := tr.drained(tasks)
	for vm, n := range tr.Old {
		add(ReactCordon, since(tr.Start, n.Cordoned))
		if ts := tasks[vm]; len(ts) > 0 {
			add(ReactPark, since(drained[tr.HostOf(vm)].at, tr.local(ts[0].Start)))
		}
	}
	freed := tr.freedAt(tasks)
	for vm := range tr.New {
		// A first task that started before the GPUs were freed did not wait for them
		// (a reconfigure of a VM that is off): it is no reaction to that.
		ts, f := tasks[vm], freed[tr.HostOf(vm)]
		if len(ts) > 0 && !f.IsZero() && !tr.local(ts[0].Start).Before(f) {
			add(ReactFreed, since(f, tr.local(ts[0].Start)))
		}
	}
	for _, ts := range tasks {
		for i := 1; i < len(ts); i++ {
			add(ReactTask, since(tr.local(ts[i-1].Finish), tr.local(ts[i].Start)))
		}
	}
	for _, n := range tr.New {
		add(ReactRelabel, since(n.ReadyForWork, n.Done))
	}
	return out
}

func cmpOr(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return a
}

// Breakdown splits a switch's critical path between whom it waited on.
type Breakdown struct {
	VSphere, Kubernetes, Gpupool time.Duration
}

// criticalPath follows the switch's last step back to its start: the new node done
// last, its readiness, its tasks, the old VMs of its host that freed its GPUs, their
// parks, their pods and their cordon. Each stretch is vSphere's (a task running),
// Kubernetes' (evictions, a node becoming ready) or gpupool's (a precondition met, its
// action not yet taken).
func (tr *switchTrace) criticalPath() Breakdown {
	var b Breakdown
	last := ""
	for vm, n := range tr.New {
		if last == "" || n.Done.After(tr.New[last].Done) {
			last = vm
		}
	}
	if last == "" || tr.New[last].Done.IsZero() {
		return b
	}
	add := func(d *time.Duration, from, to time.Time) {
		if x := since(from, to); x > 0 {
			*d += x
		}
	}
	n, tasks := tr.New[last], tr.tasksOf()
	add(&b.Gpupool, n.ReadyForWork, n.Done)
	ts := tasks[last]
	if len(ts) == 0 {
		add(&b.Kubernetes, tr.Start, n.ReadyForWork)
		return b
	}
	add(&b.Kubernetes, tr.local(ts[len(ts)-1].Finish), n.ReadyForWork)
	tr.addTasks(&b, ts)
	// The old VM of the host whose park ended last freed the GPUs.
	host, freer := tr.HostOf(last), ""
	for vm := range tr.Old {
		if ot := tasks[vm]; tr.HostOf(vm) == host && len(ot) > 0 && (freer == "" || ot[len(ot)-1].Finish.After(tasks[freer][len(tasks[freer])-1].Finish)) {
			freer = vm
		}
	}
	if freer == "" {
		add(&b.Gpupool, tr.Start, tr.local(ts[0].Start))
		return b
	}
	ot := tasks[freer]
	add(&b.Gpupool, tr.local(ot[len(ot)-1].Finish), tr.local(ts[0].Start))
	tr.addTasks(&b, ot)
	// The park waited for the host's last drain (drained), whose node's pods went last.
	d := tr.drained(tasks)[host]
	add(&b.Gpupool, d.at, tr.local(ot[0].Start))
	o := tr.Old[d.vm]
	add(&b.Kubernetes, o.Cordoned, d.at)
	add(&b.Gpupool, tr.Start, o.Cordoned)
	return b
}

// addTasks adds one VM's tasks: their run time is vSphere's, the gaps between them
// gpupool's.
func (tr *switchTrace) addTasks(b *Breakdown, ts []vgpusim.TaskRecord) {
	for i, t := range ts {
		if x := since(t.Start, t.Finish); x > 0 {
			b.VSphere += x
		}
		if i > 0 {
			if x := since(ts[i-1].Finish, t.Start); x > 0 {
				b.Gpupool += x
			}
		}
	}
}

// Percentiles are a distribution's p50, p99 and max, with how many values it has.
type Percentiles struct {
	N             int
	P50, P99, Max time.Duration
}

// percentiles of ds (nearest rank); the zero value for none.
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Percentiles{N: len(s), P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1]}
}

// reactionPercentiles merges the switches' reactions by kind.
func reactionPercentiles(trs ...*switchTrace) map[string]Percentiles {
	all := map[string][]time.Duration{}
	for _, tr := range trs {
		for k, ds := range tr.reactions() {
			all[k] = append(all[k], ds...)
		}
	}
	out := map[string]Percentiles{}
	for k, ds := range all {
		out[k] = percentiles(ds)
	}
	return out
}
