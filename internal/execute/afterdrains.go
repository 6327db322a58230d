package execute

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpupool/gpupool/internal/plan"
)

// Suspends after drains (issue 37: a node whose last pod went waited for the next pass,
// its read of vCenter and its status write, before the suspend of its VM was asked). A
// pass that hands out a drain's first eviction round (most drains end with it), or
// settles a round with nothing left to evict (the node's pods only terminating, or
// gone), plans the suspends that the end of those drains makes due on their host
// (plan.AfterDrains), records their intents in its one status write and hands them to
// Starts with the nodes they wait for. Starts asks vCenter for each once the pods of
// every one of those nodes are gone (Executor.Drains; no goroutine waits for them:
// drainwait.go), or a pass observed those drains ended (OpenGates: a terminating pod
// past its deadline, a node not Ready), after its Machine is protected and its node's
// parked marks written (protectThen, Starts.mark), and only then. A round that finds
// pods blocking or holding the drain (a PodDisruptionBudget, do-not-disrupt) cancels
// them (CancelGatesOn): those pods would not go by themselves, and the drain waits for
// the passes, which ask again and keep drain.timeout. Drains that do not end within
// StartTimeout of the last pass that planned the same switch (the handout's, or a later
// one's that renewed them: Renew), or a pause, abort, deletion, edit, switch to another
// layout or hold of the VM meanwhile, leave them not asked, and the next pass plans from
// what it observes. Until then they are starts in flight: the passes go on with the
// drains (a suspend in flight keeps its VM's steps), and a manager that restarts
// resolves their intents as any (no task found: planned again).

// startAfterDrains queues the suspends that the drains ending in the pass make due
// (r.drainsEnding), each waiting for its host's drains.
func (r *run) startAfterDrains(ctx context.Context) {
	if r.Starts == nil || r.Planned == nil || r.Drains == nil || len(r.drainsEnding) == 0 {
		return
	}
	for _, ad := range plan.AfterDrains(r.plannedWithQueued(), r.drainsEnding) {
		var nodes []string
		for _, vm := range ad.After {
			if n := r.World.Nodes[vm]; n != nil {
				nodes = append(nodes, n.Name)
			}
		}
		if len(nodes) != len(ad.After) {
			continue // cannot happen: a drain ending has its node
		}
		gate := &drainGate{nodes: nodes, watch: r.Drains}
		for _, step := range ad.Suspends {
			ws := r.worker(step.VM)
			if ws.Task != nil || backingOff(ws, r.Now) {
				continue
			}
			msg := ws.Message // the drain's, when the pass settled one of its rounds
			queued := len(r.queued)
			r.protectLater = true
			wait, err := r.execute(ctx, step) // queues the suspend and its node's marks
			r.protectLater = false
			for i := queued; i < len(r.queued); i++ {
				q := &r.queued[i]
				q.step, q.gate, q.gateVMs = step, gate, ad.After
				q.mark = r.protectThen(step.VM, q.mark)
				q.plannedFor = aheadPlan{generation: r.Pool.Generation, layout: r.Planned.Layout}
				ws.Message = msg
				if !r.settled[step.VM] {
					ws.Message = fmt.Sprintf("Suspend to be asked once the drains on host %s end", ad.Host)
				}
			}
			r.note(step, wait, err)
		}
	}
}

// protectThen is the write a suspend after drains makes once its drains ended, before it
// is asked: its node's Machine protected, then mark (its node's parked marks; nil when
// the node carries them). A suspend that is never asked (its drains blocked, the switch
// aborted) leaves its Machine to Cluster API, which a protection made at the handout,
// minutes before, would not.
func (r *run) protectThen(vm string, mark func(context.Context) error) func(context.Context) error {
	node := r.World.Nodes[vm]
	if node == nil {
		return mark
	}
	name, ns := node.Name, r.Nodes
	return func(ctx context.Context) error {
		n, err := ns.Current(ctx, name)
		if err != nil {
			return err
		}
		if err := ns.Protect(ctx, n); err != nil {
			return err
		}
		if mark == nil {
			return nil
		}
		return mark(ctx)
	}
}

// CancelGatesOn answers "not asked" the pool's suspends after drains, not yet asked,
// that wait for the drain of vm: a round found pods that block or hold it, and they
// will not go by themselves.
func (s *Starts) CancelGatesOn(pool, vm string) {
	if s == nil {
		return
	}
	s.cancelAheadWhere(pool, func(_ string, rec *startRecord) bool { return slices.Contains(rec.gateVMs, vm) })
}

// OpenGates lets the pool's suspends after drains go whose drains a pass observed ended
// (drained, by VM as plan.AfterDrains was given them): the pass's word, with its full
// view of a drain (a terminating pod past its deadline, a node that is not Ready), where
// the wait on the pods' watches sees pods still there.
func (s *Starts) OpenGates(pool string, drained func(vm string) bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range s.records[pool] {
		if rec.opened == nil || rec.ended || rec.asking || slices.ContainsFunc(rec.gateVMs, func(vm string) bool { return !drained(vm) }) {
			continue
		}
		select {
		case <-rec.opened:
		default:
			close(rec.opened)
			if rec.openGate != nil {
				rec.openGate() // ends the wait on the pods' watches
			}
		}
	}
}

// openDrainedGates opens the gates of the pool's suspends after drains whose drains the
// pass observed ended (Starts.OpenGates).
func (r *run) openDrainedGates() {
	if r.Starts == nil || r.Planned == nil {
		return
	}
	nodes := r.Planned.Nodes
	r.Starts.OpenGates(r.Pool.Name, func(vm string) bool {
		ns, ok := nodes[vm]
		return ok && ns.Drained
	})
}
