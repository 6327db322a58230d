package execute

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// Power-ons ahead of parks (issue 37: a GPU a park freed waited for the next pass, its
// read of vCenter and its status write, before the power-on it made due was asked).
// A pass that starts parks, or follows parks in flight, also plans the power-ons those
// parks make due on their hosts (plan.AfterParks), records their intents with the
// parks' in its one status write, and hands them to Starts with the parks they wait
// for. Starts asks vCenter for them once every one of those parks has ended well, as
// the task ends reach it (vsphere.Client.WatchTasks), and only then; a park that fails,
// is not asked, or is not seen to end within StartTimeout of the last pass that planned
// the same switch (Renew), leaves them not asked, and the next pass plans from what it
// observes. Until then they are starts in flight: the
// passes count their VMs as starting (no other power-on on the host, plan.settled), and
// a manager that restarts resolves their intents as any (no task found: planned again).

// prereq is a park a power-on ahead waits for: a start of the same handout (worker), or
// a task in flight (id).
type prereq struct {
	worker string
	id     string
}

// startAhead queues the power-ons that the pass's parks, and the parks in flight whose
// task ids are known, make due (plan.AfterParks over Input.Planned), each after the
// parks of its host. Only past the pass (Starts): a run that starts its tasks itself
// has nothing to ask them later with. A power-on whose worker has a task or backs off
// stops its host's run there: those after it may need it placed first.
func (r *run) startAhead() {
	if r.Starts == nil || r.Planned == nil {
		return
	}
	parks := map[string]plan.Action{}
	from := map[string]prereq{} // park key -> what to follow
	for _, q := range r.queued {
		if a, ok := parkAction(q.op); ok {
			parks[q.step.VM], from[q.step.VM] = a, prereq{worker: q.worker}
		}
	}
	for _, ws := range r.Pool.Status.Workers {
		if ws.Task == nil || ws.Task.ID == "" {
			continue // an intent whose start is not answered yet has no task to follow
		}
		if a, ok := parkAction(vsphere.Op(ws.Task.Operation)); ok {
			parks[ws.VM], from[ws.VM] = a, prereq{id: ws.Task.ID}
		}
	}
	for _, ahead := range plan.AfterParks(r.plannedWithQueued(), parks) {
		var after []prereq
		for _, k := range ahead.After {
			after = append(after, from[k])
		}
		for _, step := range ahead.PowerOns {
			ws := r.worker(step.VM)
			vm, ok := r.World.VM(step.VM)
			// A power-on the plan moves to another host is left to a pass: the passes
			// count a power-on in flight on its VM's own host (plan.settled).
			if !ok || ws.Task != nil || backingOff(ws, r.Now) || (step.Host != "" && step.Host != vm.Host) {
				break
			}
			queued := len(r.queued)
			if ws.StepStartTime == nil {
				ws.StepStartTime = ptrTime(r.Now)
			}
			wait, _ := r.startTask(ws, vm, vsphere.OpPowerOn, func(ctx context.Context) (string, error) { return r.VSphere.PowerOn(ctx, vm.Ref, "") })
			if len(r.queued) == queued {
				break
			}
			q := &r.queued[queued]
			q.step, q.after, q.watch = step, after, r.VSphere.WatchTasks
			q.plannedFor = aheadPlan{generation: r.Pool.Generation, layout: r.Planned.Layout}
			ws.Message = fmt.Sprintf("PowerOn to be asked once the parks on host %s end", ahead.Host)
			r.out.After = Soonest(r.out.After, wait)
		}
	}
}

// plannedWithQueued is the input the pass's plan was built from, with the pass's own
// starts in flight: the plan after them counts them as the next pass will.
func (r *run) plannedWithQueued() plan.Input {
	in := *r.Planned
	in.InFlight = maps.Clone(in.InFlight)
	for _, q := range r.queued {
		if a, ok := taskAction(q.op); ok {
			if in.InFlight == nil {
				in.InFlight = map[string]plan.Action{}
			}
			in.InFlight[q.worker] = a
		}
	}
	return in
}

// taskAction is the plan's action of a vSphere operation.
func taskAction(op vsphere.Op) (plan.Action, bool) {
	switch op {
	case vsphere.OpReconfigure:
		return plan.Reconfigure, true
	case vsphere.OpPowerOn:
		return plan.PowerOn, true
	}
	return parkAction(op)
}

// parkAction is the plan's action of a park operation.
func parkAction(op vsphere.Op) (plan.Action, bool) {
	switch op {
	case vsphere.OpSuspend:
		return plan.Suspend, true
	case vsphere.OpPowerOff:
		return plan.PowerOff, true
	}
	return "", false
}

// aheadGroup is a group of power-ons ahead of parks in a handout: the parks they wait
// for, the watch to follow those parks' tasks with, and where followParks says, once,
// whether they may be asked.
type aheadGroup struct {
	after  []prereq
	watch  func(ctx context.Context, ids []string, ended func(id string, ok bool)) error
	result chan bool
	// recs are the group's power-ons: the parks are watched while one is not stale.
	recs []*startRecord
}

// aheadOf is the parks the power-ons of a group wait for (those of their host).
func aheadOf(queued []queuedStart, idx []int) []prereq {
	var out []prereq
	for _, i := range idx {
		for _, p := range queued[i].after {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// followParks tells each group of power-ons ahead, once, whether every park it waits
// for ended well, past the pass: a park of the same handout once its start is answered
// (not asked, or refused: no), then by its task, with the parks in flight, through a
// watch of the group's parks' tasks (vsphere.Client.WatchTasks), one per group, so that
// a host whose parks were asked first is not held by the parks of other hosts that wait
// for a slot. A group is told no as soon as one of its parks fails, and when its watch
// fails, Cancel or Forget ends the watches, or its power-ons are stale (StartTimeout
// past the handout, or past the last pass that renewed them: Renew), each group on a
// timer of its own: its power-ons are then not asked, and the next pass plans from what
// it observes. (parksEnded also answers not asked a group told yes once its starts are
// stale on the Starts' clock.)
func (s *Starts) followParks(pool string, groups []aheadGroup, recs map[string]*startRecord) {
	ctx, stop := context.WithCancel(s.ctx)
	key := new(int)
	s.mu.Lock()
	if s.follows[pool] == nil {
		s.follows[pool] = map[*int]context.CancelFunc{}
	}
	s.follows[pool][key] = stop
	s.mu.Unlock()
	var left sync.WaitGroup
	for _, g := range groups {
		gctx, cancel := context.WithCancel(ctx)
		stopTimer := s.afterStale(g.recs, cancel)
		left.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer left.Done()
			defer cancel()
			defer stopTimer()
			g.result <- s.parksWell(gctx, pool, g, recs)
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		left.Wait()
		stop()
		s.mu.Lock()
		delete(s.follows[pool], key)
		if len(s.follows[pool]) == 0 {
			delete(s.follows, pool)
		}
		s.mu.Unlock()
	}()
}

// parksWell reports whether every park of the group ended well (followParks); it stops
// watching at the first that did not.
func (s *Starts) parksWell(ctx context.Context, pool string, g aheadGroup, recs map[string]*startRecord) bool {
	ids, ok := s.parkTasks(ctx, g.after, recs)
	if !ok {
		return false
	}
	if len(ids) == 0 {
		return true // every park found its VM parked already
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	good := true
	err := g.watch(ctx, ids, func(_ string, ok bool) {
		if !ok {
			good = false
			stop()
		}
	})
	if err != nil && good && ctx.Err() == nil {
		log.FromContext(s.ctx).Info("Watching the parks of power-ons ahead failed; they are planned again", "pool", pool, "error", err)
	}
	return good && err == nil
}

// parkTasks are the task ids of the parks: those of the handout once their starts are
// answered (a VM found parked already has none); ok is false when one was not asked or
// refused, or ctx ended first.
func (s *Starts) parkTasks(ctx context.Context, after []prereq, recs map[string]*startRecord) (ids []string, ok bool) {
	for _, p := range after {
		if p.id != "" {
			ids = append(ids, p.id)
			continue
		}
		rec := recs[p.worker]
		if rec == nil {
			return nil, false
		}
		select {
		case <-rec.done:
		case <-ctx.Done():
			return nil, false
		}
		s.mu.Lock()
		id, err, notAsked := rec.id, rec.err, rec.notAsked
		s.mu.Unlock()
		if err != nil || notAsked {
			return nil, false
		}
		if id != "" {
			ids = append(ids, id)
		}
	}
	return ids, true
}

// aheadPlan is what a power-on ahead was planned for: the pool's generation and the
// layout being made.
type aheadPlan struct {
	generation int64
	layout     string
}

// CancelAhead answers "not asked" the pool's starts asked on a condition past the pass
// (power-ons ahead of parks, suspends after drains) not yet asked that were planned for
// another generation of the pool or another layout than the pass that calls it makes:
// the switch they were part of is no longer the one being made (a spec edit, the
// schedule or demand wanting another layout, the way back to the layout the switch
// started from). Their VMs are then planned again from what is observed.
func (s *Starts) CancelAhead(pool string, generation int64, layout string) {
	if s == nil {
		return
	}
	want := aheadPlan{generation: generation, layout: layout}
	s.cancelAheadWhere(pool, func(_ string, rec *startRecord) bool { return rec.plannedFor != want })
}

// CancelAheadOf answers "not asked" the pool's starts asked on a condition past the pass
// not yet asked of the workers held (by status key): a VM the pass holds (its node
// ambiguous, its Machine not protectable) starts nothing decided before it was held.
func (s *Starts) CancelAheadOf(pool string, held map[string]bool) {
	if s == nil || len(held) == 0 {
		return
	}
	s.cancelAheadWhere(pool, func(worker string, _ *startRecord) bool { return held[worker] })
}

// cancelAheadWhere cancels the pool's starts on a condition, not yet asked, that drop
// says, and ends their waits and node writes under way.
func (s *Starts) cancelAheadWhere(pool string, drop func(worker string, rec *startRecord) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for worker, rec := range s.records[pool] {
		if !rec.ahead || rec.asking || rec.ended || !drop(worker, rec) {
			continue
		}
		rec.cancelled = true
		if rec.stopGate != nil {
			rec.stopGate()
		}
		if rec.stopMark != nil {
			rec.stopMark()
		}
	}
}
