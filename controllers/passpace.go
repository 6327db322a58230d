package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultMinPassInterval is how long after a pool's pass began a wake by the pool's own
// work starts the next one at the soonest (MinPassInterval, --min-pass-interval).
const DefaultMinPassInterval = time.Second

// passPace spaces the passes of a pool woken by what its own switch does: its nodes
// changing (cordoned, drained, parked, registered, ready), its pods going, its tasks
// starting and ending. During a switch those come by the hundred, and each would start
// a pass as soon as the last one ended: passes back to back, each reading vCenter again
// (its tasks, the inventory, the capacity of the hosts that changed) to record what
// the executor already does on its own (the hand-out's starts, their order, the suspends
// after drains, the relabels of ready nodes: internal/execute, readyfollow.go). Such a
// wake waits until MinPassInterval after the pool's last pass began; what a user or the
// demand asks (the pool's spec, a GPUPoolRequest, demand, the credentials) and a pass's
// own requeue are not delayed. Zero: no pacing.
type passPace struct {
	every time.Duration
	now   func() time.Time // time.Now: the delays are the workqueue's, in real time

	mu    sync.Mutex
	begun map[string]time.Time
}

func newPassPace(every time.Duration) *passPace {
	return &passPace{every: every, now: time.Now, begun: map[string]time.Time{}}
}

// began records that a pass of the pool begins now.
func (p *passPace) began(pool string) {
	if p == nil || p.every <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.begun[pool] = p.now()
}

// forget drops a deleted pool.
func (p *passPace) forget(pool string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.begun, pool)
}

// delay is how long a wake of the pool waits now (0: none). A pass that began in the
// clock's future (the clock set back) does not hold the pool longer than every.
func (p *passPace) delay(pool string) time.Duration {
	if p == nil || p.every <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.begun[pool]
	if !ok {
		return 0
	}
	return min(max(at.Add(p.every).Sub(p.now()), 0), p.every)
}

// paced wraps an event handler of the pool controller so that the pools it wakes are
// paced.
func (p *passPace) paced(h handler.EventHandler) handler.EventHandler {
	if p == nil || p.every <= 0 {
		return h
	}
	return pacedHandler{h: h, p: p}
}

type pacedHandler struct {
	h handler.EventHandler
	p *passPace
}

type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

func (ph pacedHandler) Create(ctx context.Context, e event.TypedCreateEvent[client.Object], q queue) {
	ph.h.Create(ctx, e, pacedQueue{q, ph.p})
}

func (ph pacedHandler) Update(ctx context.Context, e event.TypedUpdateEvent[client.Object], q queue) {
	ph.h.Update(ctx, e, pacedQueue{q, ph.p})
}

func (ph pacedHandler) Delete(ctx context.Context, e event.TypedDeleteEvent[client.Object], q queue) {
	ph.h.Delete(ctx, e, pacedQueue{q, ph.p})
}

func (ph pacedHandler) Generic(ctx context.Context, e event.TypedGenericEvent[client.Object], q queue) {
	ph.h.Generic(ctx, e, pacedQueue{q, ph.p})
}

// pacedQueue adds a pool's request after the pool's delay. A request already queued
// sooner stays as soon (the workqueue keeps one of each). It must not offer AddWithOpts:
// controller-runtime's handlers would take that for the priority queue's and add past
// Add, unpaced (TestPassPaceOnThePriorityQueue).
type pacedQueue struct {
	queue
	p *passPace
}

func (q pacedQueue) Add(req reconcile.Request) {
	if d := q.p.delay(req.Name); d > 0 {
		q.AddAfter(req, d)
		return
	}
	q.queue.Add(req)
}
