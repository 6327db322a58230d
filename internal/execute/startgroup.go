package execute

import (
	"context"
	"time"
)

// startGroup is one group of a handout (startGroups) and what its starts wait for: the
// host's earlier power-on group (after; mine is closed once this one is through), the
// parks of power-ons ahead (cond), the drains of a suspend after drains (gate), and the
// pool's node-write and start slots.
type startGroup struct {
	pool             string
	queued           []queuedStart
	idx              []int
	recs             []*startRecord
	handed, handedAt time.Time
	after, mine      chan struct{}
	cond             chan bool
	gate             func(context.Context) bool
	marks, slots     chan struct{}
}

// run asks vCenter for a group's starts once what they wait for is through, each after
// its node write (mark), in a start slot of the pool.
func (s *Starts) run(grp startGroup) {
	pool, queued, idx, recs := grp.pool, grp.queued, grp.idx, grp.recs
	if grp.mine != nil {
		defer s.hostDone(pool, queued[idx[0]].powerOnHost(), grp.mine)
		if grp.after != nil {
			<-grp.after
		}
	}
	ready := grp.handedAt
	if grp.cond != nil {
		if !s.parksEnded(grp.cond, grp.handed) {
			for _, i := range idx {
				s.notAsked(recs[i])
			}
			PowerOnsAhead.WithLabelValues(pool, "not-asked").Add(float64(len(idx)))
			return
		}
		ready = time.Now()
		StartStages.WithLabelValues("parks").Observe(ready.Sub(grp.handedAt).Seconds())
	}
	if grp.gate != nil {
		if !s.drainsEnd(grp.gate, recs[idx[0]], grp.handed) {
			s.notAsked(recs[idx[0]])
			SuspendsAfterDrains.WithLabelValues(pool, "not-asked").Inc()
			return
		}
		ready = time.Now()
		StartStages.WithLabelValues("drains").Observe(ready.Sub(grp.handedAt).Seconds())
	}
	marked := make([]bool, len(idx))
	for j, i := range idx {
		marked[j] = s.mark(grp.marks, queued[i], recs[i], grp.handed)
	}
	if queued[idx[0]].mark != nil {
		ready = time.Now() // the queue is measured from the node write's end
	}
	grp.slots <- struct{}{}
	defer func() { <-grp.slots }()
	for j, i := range idx {
		result := "not-asked" // answered without asking: its node write failed
		if marked[j] {
			s.ask(queued[i], recs[i], grp.handed, ready)
			result = map[bool]string{false: "asked", true: "not-asked"}[recs[i].notAsked]
		}
		switch {
		case grp.cond != nil:
			PowerOnsAhead.WithLabelValues(pool, result).Inc()
		case grp.gate != nil:
			SuspendsAfterDrains.WithLabelValues(pool, result).Inc()
		}
	}
}
