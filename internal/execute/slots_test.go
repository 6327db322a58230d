package execute

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpupool/gpupool/vsphere"
)

// granted tells whether a slot's channel is closed, without waiting.
func granted(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestStartSlotsParksFirst: with every slot held, a waiting park or reconfigure gets the
// next slot before any power-on that waited longer; within a class, first come first.
func TestStartSlotsParksFirst(t *testing.T) {
	s := newStartSlots(1)
	if !granted(s.enqueue(vsphere.OpPowerOn)) {
		t.Fatal("a free slot was not given at once")
	}
	type waiter struct {
		name string
		ch   <-chan struct{}
	}
	var ws []waiter
	for i, op := range []vsphere.Op{vsphere.OpPowerOn, vsphere.OpPowerOn, vsphere.OpSuspend, vsphere.OpReconfigure, vsphere.OpPowerOff} {
		ws = append(ws, waiter{fmt.Sprintf("%d-%s", i, op), s.enqueue(op)})
	}
	want := []string{"2-" + string(vsphere.OpSuspend), "3-" + string(vsphere.OpReconfigure), "4-" + string(vsphere.OpPowerOff), "0-" + string(vsphere.OpPowerOn), "1-" + string(vsphere.OpPowerOn)}
	var got []string
	for range ws {
		s.release()
		var now []string
		for _, w := range ws {
			if granted(w.ch) && !slices.Contains(got, w.name) {
				now = append(now, w.name)
			}
		}
		if len(now) != 1 {
			t.Fatalf("one release gave %d slots (%v), want one", len(now), now)
		}
		got = append(got, now[0])
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slots given in the order %v, want %v", got, want)
	}
	s.release()
	if s.free != 1 || s.queued() != 0 {
		t.Errorf("after the last release: %d free, %d waiting; want the one slot free", s.free, s.queued())
	}
}

// TestStartSlotsRandom drives the slots with random asks and releases, for many seeds and
// limits, and checks after every step: at most the limit held; no slot free while a start
// waits; a power-on given a slot only while no other start waits; within a class, slots
// given in the order asked; and every start given one once all release.
func TestStartSlotsRandom(t *testing.T) {
	ops := []vsphere.Op{vsphere.OpPowerOn, vsphere.OpSuspend, vsphere.OpReconfigure, vsphere.OpPowerOff}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 37))
		limit := 1 + rng.IntN(4)
		s := newStartSlots(limit)
		type asked struct {
			class int
			ch    <-chan struct{}
			given bool
		}
		var all []*asked
		held := 0
		check := func(step int) {
			// What changed since the last step: the starts given a slot now.
			var now []*asked
			for _, a := range all {
				if !a.given && granted(a.ch) {
					a.given = true
					now = append(now, a)
					held++
				}
			}
			waiting := [2]int{}
			for _, a := range all {
				if !a.given {
					waiting[a.class]++
				}
			}
			for _, a := range now {
				if a.class == 1 && waiting[0] > 0 {
					t.Fatalf("seed %d step %d: a power-on was given a slot while %d parks wait", seed, step, waiting[0])
				}
			}
			if held > limit {
				t.Fatalf("seed %d step %d: %d slots held, limit %d", seed, step, held, limit)
			}
			if held < limit && waiting[0]+waiting[1] > 0 {
				t.Fatalf("seed %d step %d: %d of %d slots held while %d starts wait", seed, step, held, limit, waiting[0]+waiting[1])
			}
			for c := range 2 { // first come first within a class: no one given after a later one
				seenWaiting := false
				for _, a := range all {
					if a.class != c {
						continue
					}
					if !a.given {
						seenWaiting = true
					} else if seenWaiting {
						t.Fatalf("seed %d step %d: class %d given out of order", seed, step, c)
					}
				}
			}
		}
		for step := range 200 {
			if held > 0 && rng.IntN(2) == 0 {
				s.release()
				held--
			} else {
				op := ops[rng.IntN(len(ops))]
				all = append(all, &asked{class: slotClass(op), ch: s.enqueue(op)})
			}
			check(step)
		}
		for step := 200; held > 0; step++ { // everyone releases: every start gets a slot
			s.release()
			held--
			check(step)
		}
		for _, a := range all {
			if !a.given {
				t.Fatalf("seed %d: a start never got a slot", seed)
			}
		}
		if s.free != limit {
			t.Fatalf("seed %d: %d slots free at the end, want %d", seed, s.free, limit)
		}
	}
}

// TestStartsParksBeforePowerOns: with the pool's one start slot taken by a host's first
// power-on, a later pass's suspend is asked before the power-ons waiting longer, the
// rest of that host's group included (a group holds no slot between its starts), and the
// host's power-ons still go in the plan's order.
func TestStartsParksBeforePowerOns(t *testing.T) {
	s := NewStarts(t.Context(), nil)
	s.Limit = 1
	g := newGatedStarts()
	hand := func(q ...queuedStart) { s.hand("pool", q, startGroups(q)) }
	hand(queue("on-h1-a", vsphere.OpPowerOn, "h1", g.start("on-h1-a", "t1", nil)),
		queue("on-h1-b", vsphere.OpPowerOn, "h1", g.start("on-h1-b", "t2", nil)))
	g.waitStarted(t, 1) // on-h1-a holds the slot
	s.mu.Lock()
	slots := s.slots["pool"]
	s.mu.Unlock()
	hand(queue("on-h2", vsphere.OpPowerOn, "h2", g.start("on-h2", "t3", nil)))
	waitQueued(t, slots, 1) // on-h2 waits for it
	hand(queue("park-h3", vsphere.OpSuspend, "h3", g.start("park-h3", "t4", nil)))
	waitQueued(t, slots, 2) // and the park, which came last
	g.open("on-h1-a", "on-h1-b", "on-h2", "park-h3")
	s.Wait()
	want := []string{"on-h1-a", "park-h3", "on-h2", "on-h1-b"}
	if fmt.Sprint(g.order) != fmt.Sprint(want) {
		t.Errorf("asked in the order %v, want %v", g.order, want)
	}
	if g.most != 1 {
		t.Errorf("%d starts asked at once, want at most the limit, 1", g.most)
	}
}

// waitQueued waits until n starts wait for a slot (bounded: they queue on goroutines the
// test does not otherwise see).
func waitQueued(t *testing.T, s *startSlots, n int) {
	t.Helper()
	for range 10000 {
		if s.queued() >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("fewer than %d starts wait for a slot", n)
}

// TestStartsQueuedEndWithTheirContext: when the manager stops while starts wait for the
// pool's slots, the start under way ends with the context, the waiting ones are answered
// not asked without calling vCenter, and Wait returns.
func TestStartsQueuedEndWithTheirContext(t *testing.T) {
	ctx, stop := context.WithCancel(t.Context())
	s := NewStarts(ctx, nil)
	s.Limit = 1
	g := newGatedStarts()
	hand := func(q ...queuedStart) { s.hand("pool", q, startGroups(q)) }
	hand(queue("park-a", vsphere.OpSuspend, "h1", g.start("park-a", "t1", nil)))
	g.waitStarted(t, 1)
	s.mu.Lock()
	slots := s.slots["pool"]
	s.mu.Unlock()
	hand(queue("on-b", vsphere.OpPowerOn, "h2", g.start("on-b", "t2", nil)),
		queue("on-c", vsphere.OpPowerOn, "h2", g.start("on-c", "t3", nil)),
		queue("park-d", vsphere.OpSuspend, "h3", g.start("park-d", "t4", nil)))
	waitQueued(t, slots, 2) // on-b and park-d wait; on-c waits for on-b
	stop()
	s.Wait()
	if fmt.Sprint(g.order) != "[park-a]" {
		t.Errorf("asked %v after the stop, want only park-a, under way before it", g.order)
	}
	for _, w := range []string{"on-b", "on-c", "park-d"} {
		s.mu.Lock()
		rec := s.records["pool"][w]
		s.mu.Unlock()
		if rec == nil || !rec.ended || !rec.notAsked {
			t.Errorf("%s: %+v, want answered not asked", w, rec)
		}
	}
	if slots.queued() != 0 || slots.free != 1 {
		t.Errorf("after the stop: %d waiting, %d free; want none waiting and the slot free", slots.queued(), slots.free)
	}
}
