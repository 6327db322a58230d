package execute

import (
	"time"
)

// startGroup is one group of a handout (startGroups) and what its starts wait for: the
// host's earlier power-on group (after; mine is closed once this one is through), the
// parks of power-ons ahead (cond), the drains of a suspend after drains (gate), and the
// pool's node-write and start slots.
type startGroup struct {
	pool        string
	queued      []queuedStart
	idx         []int
	recs        []*startRecord
	handedAt    time.Time
	after, mine chan struct{}
	cond        chan bool
	gate        *drainGate
	marks       chan struct{}
	slots       *startSlots
}

// run asks vCenter for a group's starts once what they wait for is through (the host's
// earlier power-ons, the parks of power-ons ahead), each after its node write (mark), in
// a start slot of the pool. A suspend after drains is not run: awaitDrains.
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
		if !s.parksEnded(grp.cond, pick(recs, idx)) {
			for _, i := range idx {
				s.notAsked(recs[i])
			}
			PowerOnsAhead.WithLabelValues(pool, "not-asked").Add(float64(len(idx)))
			return
		}
		ready = time.Now()
		StartStages.WithLabelValues("parks").Observe(ready.Sub(grp.handedAt).Seconds())
	}
	s.markAndAsk(grp, ready)
}

// afterDrains goes on with a suspend after drains (a group of one start, rec) once its
// wait ended (awaitDrains): asked when its drains ended, the start neither cancelled nor
// stale, else answered not asked.
func (s *Starts) afterDrains(grp startGroup, rec *startRecord, open bool) {
	s.mu.Lock()
	rec.stopGate, rec.openGate, rec.pending = nil, nil, false
	open = open && !s.stale(rec)
	s.mu.Unlock()
	if !open {
		s.notAsked(rec)
		SuspendsAfterDrains.WithLabelValues(grp.pool, "not-asked").Inc()
		return
	}
	ready := time.Now()
	StartStages.WithLabelValues("drains").Observe(ready.Sub(grp.handedAt).Seconds())
	s.markAndAsk(grp, ready)
}

// markAndAsk makes each start's node write (mark) and asks vCenter for the starts of the
// group whose write went through, in order, each in a start slot of the pool taken for
// it alone (a group of a host's power-ons does not hold a slot between its starts, which
// a park waiting for one may take); ready is when they could go but for the queue.
func (s *Starts) markAndAsk(grp startGroup, ready time.Time) {
	pool, queued, idx, recs := grp.pool, grp.queued, grp.idx, grp.recs
	marked := make([]bool, len(idx))
	for j, i := range idx {
		marked[j] = s.mark(grp.marks, queued[i], recs[i])
	}
	if queued[idx[0]].mark != nil {
		ready = time.Now() // the queue is measured from the node write's end
	}
	for j, i := range idx {
		result := "not-asked" // answered without asking: its node write failed, or it is stale
		// A start no longer to be asked (cancelled, past its time) waits for no slot.
		if marked[j] && !s.answerStale(recs[i]) {
			func() {
				grp.slots.acquire(queued[i].op)
				defer grp.slots.release()
				s.ask(queued[i], recs[i], ready)
			}()
		}
		if marked[j] {
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
