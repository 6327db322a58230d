package execute

import (
	"sync"
	"time"
)

// Renewing the starts on a condition (issue 37: at 64 hosts the last hosts' drains end
// some 2m15s after the first pass handed out the suspends after them; those were then
// answered not asked at StartTimeout, with the power-ons ahead of them, and planned again
// by a later pass, seconds behind the pods' end). A start on a condition (a suspend
// after drains, a power-on ahead of parks) is a decision that waits for its condition,
// not a call to vCenter that is slow. A pass that observes the world while it waits
// counts it in flight (it plans nothing else for its VM, and does not decide it again),
// but finds whether anything that would cancel it came up: a spec edit or another
// layout (CancelAhead), the VM held (CancelAheadOf, called before), a problem in the way
// of the layout, a pause, abort or deletion (Cancel). A pass that finds none, planning
// for the same generation and layout, stands by it: Renew makes the start stale
// StartTimeout after the last such pass, not after the first. Passes that stop coming (a
// manager that cannot read vCenter or the cluster) renew nothing, and the starts expire
// as before; what bounds the condition bounds the wait (drain.timeout for the drains,
// the parks' tasks for the power-ons). Only a start whose condition is still pending is
// renewed: once it holds, the start queues for its node write and a slot, which
// StartTimeout bounds as any. Exactly once is untouched: a renewed start is the same
// record, asked at most once, and a start already stale, asked, answered or cancelled is
// not renewed.

// Renew restarts StartTimeout for the pool's starts on a condition still pending, not
// yet asked nor stale, planned for generation and layout: a pass that planned for them
// with nothing in the way stands by their decision.
func (s *Starts) Renew(pool string, generation int64, layout string) {
	if s == nil {
		return
	}
	want := aheadPlan{generation: generation, layout: layout}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, rec := range s.records[pool] {
		if !rec.ahead || !rec.pending || rec.asking || rec.ended || rec.plannedFor != want || s.stale(rec) {
			continue
		}
		if now.After(rec.since) {
			rec.since = now
		}
	}
}

// left is how long the freshest of recs still has before it is stale, on the Starts'
// clock; negative when every one is stale (or answered: an answered start waits for
// nothing). s.mu is held.
func (s *Starts) left(recs []*startRecord) time.Duration {
	best := time.Duration(-1)
	for _, rec := range recs {
		if rec.ended || s.stale(rec) {
			continue
		}
		best = max(best, StartTimeout-s.now().Sub(rec.since))
	}
	return best
}

// minRearm is the shortest wait afterStale sets again: a clock that stands still (the
// tests' fake clocks) at a start's last instant must not make the timer spin.
const minRearm = time.Second

// afterStale calls fn once, in a goroutine of the machine's timer, when every one of
// recs is stale or answered (left), which Renew may put off; the timer runs on the
// machine's clock for what left says on the Starts'. stop ends it, and reports whether
// it kept fn from being called.
func (s *Starts) afterStale(recs []*startRecord, fn func()) (stop func() bool) {
	var (
		mu        sync.Mutex
		stopTimer func() bool
		stopped   bool
	)
	var fire func()
	fire = func() {
		s.mu.Lock()
		d := s.left(recs)
		s.mu.Unlock()
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		if d >= 0 { // renewed meanwhile, or the clocks differ: wait for the rest
			stopTimer = s.afterFunc(max(d, minRearm), fire)
			mu.Unlock()
			return
		}
		stopped = true
		mu.Unlock()
		fn()
	}
	s.mu.Lock()
	d := s.left(recs)
	s.mu.Unlock()
	mu.Lock()
	stopTimer = s.afterFunc(max(d, 0), fire)
	mu.Unlock()
	return func() bool {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return false
		}
		stopped = true
		stopTimer()
		return true
	}
}

// afterFunc calls f in d on the machine's timer (Starts.after).
func (s *Starts) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if s.after != nil {
		return s.after(d, f)
	}
	return time.AfterFunc(d, f).Stop
}

// pick is the records at idx.
func pick(recs []*startRecord, idx []int) []*startRecord {
	out := make([]*startRecord, 0, len(idx))
	for _, i := range idx {
		out = append(out, recs[i])
	}
	return out
}
