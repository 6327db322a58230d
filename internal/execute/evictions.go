package execute

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
)

// Evictions runs the eviction rounds of drains past the pass that hands them out: a
// pass cordons, hands each due drain's node to Evictions and goes on with its other
// steps (parks, reconfigures, power-ons, relabels of other VMs) instead of waiting for
// hundreds of evictions through the API server. A pass after a round's end settles
// what the round found (settleDrain: done, wait, abort or force at drain.timeout). A
// round that found what no pod event will tell (the node drained, an error, pods that
// block or hold the drain, evictions deferred by the pass's cap) wakes its pool (Wake,
// wakes); one that asked for evictions or found pods terminating does not: the pods'
// deletions wake the pool through its pod watches, and a pass per round would cost a
// full observe each, hundreds of times over in a large pool.
//
// Exactly once: a round is recorded (under mu) before it runs, and a node has at most
// one round at a time; a pass that finds a round in flight for a node waits for it
// rather than evict again. A round evicts only the pods it sees not terminating, as a
// drain in a pass does.
//
// Each pool runs at most Limit rounds at once (nodes evicted from at the same time); the
// others queue and run in the order they were handed out, which is the plan's order of
// hosts: the first hosts' nodes drain first and their GPUs free first, so that their
// parks and power-ons go on while later hosts still drain.
type Evictions struct {
	// Limit bounds the rounds a pool runs at once; 0: MaxConcurrentWrites.
	Limit int
	// Wake is told the pool whose round ended with news (wakes), so that its next pass
	// settles it. It must not block.
	Wake func(pool string)

	ctx context.Context
	mu  sync.Mutex
	// rounds are the pools' rounds by node, queued, running, or ended and not yet
	// settled.
	rounds map[string]map[string]*round
	// queues are the pools' rounds to run, in order, and their workers.
	queues map[string]*roundQueue
	wg     sync.WaitGroup
}

// roundQueue is a pool's rounds waiting to run and how many workers run them.
type roundQueue struct {
	pending []*round
	workers int
}

// round is one node's eviction round, for the drain that started at started (the
// worker's step start): a round of an earlier drain of the node is not this drain's.
type round struct {
	node    string
	started time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	evict   func(context.Context) drainOutcome
	// running: a worker took it from the queue.
	running bool
	ended   bool
	out     drainOutcome
	// done is closed once a worker is through with it, or when it is cancelled before
	// a worker took it.
	done chan struct{}
}

// NewEvictions returns the rounds of a manager: ctx ends them all.
func NewEvictions(ctx context.Context, wake func(pool string)) *Evictions {
	return &Evictions{ctx: ctx, Wake: wake, rounds: map[string]map[string]*round{}, queues: map[string]*roundQueue{}}
}

// take returns the ended round of a pool's node for the drain started at started (and
// forgets it, settled by the caller), or reports that a round is in flight (inFlight,
// whichever drain it is for: the node's evictions wait for it), or that there is none.
// An ended round of an earlier drain is forgotten unread.
func (e *Evictions) take(pool, node string, started time.Time) (out drainOutcome, ended, inFlight bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.rounds[pool][node]
	switch {
	case r == nil:
		return drainOutcome{}, false, false
	case !r.ended:
		return drainOutcome{}, false, true
	}
	e.forget(pool, node)
	// Note: to the second, as status stores it (the pass that started the round had it
	// to the nanosecond).
	if !r.started.Truncate(time.Second).Equal(started.Truncate(time.Second)) {
		return drainOutcome{}, false, false
	}
	return r.out, true, false
}

// start records a round for the pool's node and queues it; a worker of the pool runs
// evict when the rounds handed out before it have started and fewer than Limit run. A
// node that has a round already (recorded and not settled) keeps it, and gets no other.
func (e *Evictions) start(pool, node string, started time.Time, evict func(context.Context) drainOutcome) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.rounds[pool][node] != nil {
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	r := &round{node: node, started: started, ctx: ctx, cancel: cancel, evict: evict, done: make(chan struct{})}
	if e.rounds[pool] == nil {
		e.rounds[pool] = map[string]*round{}
	}
	e.rounds[pool][node] = r
	q := e.queues[pool]
	if q == nil {
		q = &roundQueue{}
		e.queues[pool] = q
	}
	q.pending = append(q.pending, r)
	if q.workers < e.limit() {
		q.workers++
		e.wg.Add(1)
		go e.work(pool, q)
	}
}

// work runs a pool's queued rounds one after the other until none is left.
func (e *Evictions) work(pool string, q *roundQueue) {
	defer e.wg.Done()
	for {
		e.mu.Lock()
		if len(q.pending) == 0 {
			q.workers--
			if q.workers == 0 && e.queues[pool] == q {
				delete(e.queues, pool)
			}
			e.mu.Unlock()
			return
		}
		r := q.pending[0]
		q.pending = q.pending[1:]
		r.running = true
		e.mu.Unlock()
		var out drainOutcome
		if out.err = r.ctx.Err(); out.err == nil { // not cancelled while it queued
			out = r.evict(r.ctx)
		}
		cancelled := r.ctx.Err() != nil // by Cancel or keepOnly, which forget it: no news
		r.cancel()
		e.mu.Lock()
		r.ended, r.out = true, out
		current := e.rounds[pool][r.node] == r
		e.mu.Unlock()
		close(r.done)
		if current && !cancelled && e.Wake != nil && wakes(out) {
			e.Wake(pool)
		}
	}
}

// Cancel ends the rounds of a pool and forgets them: its transition was aborted, it is
// paused or deleted, and nothing more may be evicted for it. It returns once no round of
// the pool runs any more (a queued one does not start; a running one stops before its
// next eviction), so that what the caller does next (the uncordons of an abort) comes
// after the pool's last eviction request. An eviction the API server granted stays
// granted.
func (e *Evictions) Cancel(pool string) {
	if e == nil {
		return
	}
	e.cancelWhere(pool, func(string) bool { return true })
}

// cancelWhere cancels the pool's rounds of the nodes drop says, waits until their
// goroutines are through with them, and forgets them.
func (e *Evictions) cancelWhere(pool string, drop func(node string) bool) {
	e.mu.Lock()
	var dropped []*round
	for node, r := range e.rounds[pool] {
		if !drop(node) {
			continue
		}
		r.cancel()
		dropped = append(dropped, r)
		if q := e.queues[pool]; !r.running && !r.ended && q != nil {
			// Queued: out of the queue now, rather than wait for the workers to reach it
			// behind rounds that may take long.
			q.pending = slices.DeleteFunc(q.pending, func(x *round) bool { return x == r })
			r.ended, r.out.err = true, context.Canceled
			close(r.done)
		}
	}
	e.mu.Unlock()
	for _, r := range dropped {
		<-r.done
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range dropped {
		if e.rounds[pool][r.node] == r {
			e.forget(pool, r.node)
		}
	}
}

// InFlight is how many rounds of the pool are recorded and not settled (the tests).
func (e *Evictions) InFlight(pool string) int {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.rounds[pool])
}

// Wait waits until every round has ended (the tests; a manager's shutdown).
func (e *Evictions) Wait() { e.wg.Wait() }

// keepOnly cancels and forgets the pool's rounds of the nodes the plan drains no more
// (not in draining): the pods left, or the transition changed (superseded, replanned).
// A round in flight stops: its node may be uncordoned in this very pass. An ended one is
// not settled as news by a later drain of the same node.
func (e *Evictions) keepOnly(pool string, draining map[string]bool) {
	e.cancelWhere(pool, func(node string) bool { return !draining[node] })
}

// wakes tells whether a round's outcome needs a pass that the pods' events will not bring:
// the node is drained (no pod is left to send one), an error, pods that block or hold the
// drain (their state is the news, and the drain.timeout counts from it), evictions
// deferred to the next round. A round that asked for evictions or found pods terminating
// does not: their deletions wake the pool, and the pass they bring settles it and hands
// out the next round at once (evictBehind).
func wakes(o drainOutcome) bool {
	return o.res.Done || stuck(o) || o.res.Deferred > 0
}

// stuck tells whether a round found what pods' events will not change soon: an error,
// pods that block or hold the drain. The node's next round waits for the next pass.
func stuck(o drainOutcome) bool {
	return o.err != nil || len(o.res.Blocked)+len(o.res.Holding) > 0
}

// forget drops a pool's node round; with e.mu held.
func (e *Evictions) forget(pool, node string) {
	delete(e.rounds[pool], node)
	if len(e.rounds[pool]) == 0 {
		delete(e.rounds, pool)
	}
}

func (e *Evictions) limit() int {
	if e.Limit > 0 {
		return e.Limit
	}
	return MaxConcurrentWrites
}

// evictBehind hands the due drains' eviction rounds to r.Evictions and settles the ones
// that ended since the last pass: a drain is settled (settleDrain) in a pass after its
// round, and a node whose round is in flight waits for it. A node with no round gets
// one; one whose round was just settled gets the next at once when its pods are still
// going, and in the next pass when they block or hold the drain (so that a refusing
// PodDisruptionBudget is asked again at the pass's pace, not in a loop). It reports true
// when a drain aborted the transition.
func (r *run) evictBehind(ctx context.Context, steps []plan.Step) bool {
	for _, step := range steps {
		node := r.World.Nodes[step.VM]
		if node == nil {
			r.note(step, RequeueStep, nil)
			continue
		}
		out, ended, inFlight := r.Evictions.take(r.Pool.Name, node.Name, r.drainStart(step))
		switch {
		case inFlight:
			r.note(step, RequeueDrain, nil)
		case ended:
			wait, err := r.settleDrain(ctx, r.worker(step.VM), node, out)
			r.note(step, wait, err)
			if r.out.Abort != "" {
				r.Evictions.Cancel(r.Pool.Name)
				return true
			}
			if stuck(out) {
				// Its pods will not go by themselves: a suspend waiting for them is
				// not asked, and the next round comes with a pass.
				r.Starts.CancelGatesOn(r.Pool.Name, step.VM)
			} else {
				// Nothing left that the pods' owners hold: its suspend may be asked
				// as soon as its pods are gone (startAfterDrains).
				r.drainsEnding = append(r.drainsEnding, step.VM)
				if r.settled == nil {
					r.settled = map[string]bool{}
				}
				r.settled[step.VM] = true
			}
			if !out.res.Done && !stuck(out) {
				// Pods terminating, or evictions the last pass's cap deferred: the next
				// round now (a pod whose eviction was granted is not asked again).
				r.handOut(step, node)
			}
		default:
			r.handOut(step, node)
			r.note(step, RequeueDrain, nil)
			if r.drainStart(step).Equal(r.Now) {
				// The drain's first round, and most drains end with it: its suspend goes
				// as soon as the pods are gone, and a round that finds them blocked or
				// held cancels it. A later round after a stuck one gets none: its pass
				// settled the stuck round, and the drain waits at the passes' pace.
				r.drainsEnding = append(r.drainsEnding, step.VM)
			}
		}
	}
	return false
}

// handOut records and starts the eviction round of a drain's node, from what the pass
// saw: the node's name and readiness (what a drain reads of it; the pass goes on
// patching its own), the drain's start and the pass's time, and its budget. A round
// waits for its turn (16 at a time): a thousand queued in a 64-host switch held a copy
// of their node's metadata each.
func (r *run) handOut(step plan.Step, node *corev1.Node) {
	started := r.drainStart(step)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID}, Status: corev1.NodeStatus{Conditions: node.Status.Conditions}}
	d, now, pool, budget, drainer := r.Pool.Spec.Drain, r.Now, r.Pool.Name, r.Budget, r.Drainer
	handed := time.Now()
	r.Evictions.start(pool, n.Name, started, func(ctx context.Context) drainOutcome {
		// The pass's time plus how long the round queued: when a pod's eviction is
		// granted is when its wait starts (drain.TerminatingClock), not when the pass ran.
		res, err := drainer.Drain(ctx, n, d, started, now.Add(time.Since(handed)), budget)
		PodEvictions.WithLabelValues(pool).Add(float64(res.Evicted))
		return drainOutcome{res: res, err: err}
	})
}

// drainStart is when the drain of step's VM started (Run stamps it), zero if unknown.
func (r *run) drainStart(step plan.Step) time.Time {
	if ws := r.worker(step.VM); ws.StepStartTime != nil {
		return ws.StepStartTime.Time
	}
	return time.Time{}
}

// drainingNodes are the nodes of every drain the plan has, due or not (the rounds of
// the others are cancelled: keepOnly).
func drainingNodes(p *plan.Plan, w *world.World) map[string]bool {
	out := map[string]bool{}
	for _, hp := range p.Hosts {
		for _, st := range hp.Steps {
			if n := w.Nodes[st.VM]; st.Action == plan.Drain && n != nil {
				out[n.Name] = true
			}
		}
	}
	return out
}
