package execute

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gpupool/gpupool/vsphere"
)

// fakeTimers is the Starts' timer (Starts.after) that the test fires.
type fakeTimers struct {
	mu    sync.Mutex
	armed []*fakeTimer
}

type fakeTimer struct {
	d              time.Duration
	f              func()
	stopped, fired bool
}

// fireAll fires, once, every timer armed and neither stopped nor fired yet, as the
// machine's timers would once their time came; it reports how many it fired.
func (ft *fakeTimers) fireAll() int {
	ft.mu.Lock()
	var due []*fakeTimer
	for _, t := range ft.armed {
		if !t.stopped && !t.fired {
			t.fired = true
			due = append(due, t)
		}
	}
	ft.mu.Unlock()
	for _, t := range due {
		t.f()
	}
	return len(due)
}

func (ft *fakeTimers) after(d time.Duration, f func()) func() bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	t := &fakeTimer{d: d, f: f}
	ft.armed = append(ft.armed, t)
	return func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// fire fires the last timer armed, as the machine's timer would once its time came;
// it reports the wait it was armed with.
func (ft *fakeTimers) fire(t *testing.T) time.Duration {
	t.Helper()
	ft.mu.Lock()
	if len(ft.armed) == 0 {
		ft.mu.Unlock()
		t.Fatal("no timer armed")
	}
	last := ft.armed[len(ft.armed)-1]
	ft.mu.Unlock()
	last.f()
	return last.d
}

func (ft *fakeTimers) count() int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return len(ft.armed)
}

// TestAfterStale: the wait of a start on a condition ends when every start it stands for
// is stale or answered, on the Starts' clock; a timer that fires before (a pass renewed
// them, or the clocks differ) is set again for what is left, never for less than
// minRearm (a clock that stands still must not make it spin); stop keeps it from ending.
func TestAfterStale(t *testing.T) {
	var mu sync.Mutex
	clock := startsAt
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	newStarts := func() (*Starts, *fakeTimers) {
		ft := &fakeTimers{}
		s := NewStarts(t.Context(), nil)
		s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		s.after = ft.after
		return s, ft
	}
	record := func(s *Starts, w string) *startRecord {
		rec := &startRecord{op: vsphere.OpSuspend, ahead: true, pending: true, plannedFor: aheadPlan{generation: 1, layout: "night"}, since: s.now(), done: make(chan struct{})}
		s.mu.Lock()
		if s.records["pool"] == nil {
			s.records["pool"] = map[string]*startRecord{}
		}
		s.records["pool"][w] = rec
		s.mu.Unlock()
		return rec
	}

	t.Run("renewed before the timer fires", func(t *testing.T) {
		s, ft := newStarts()
		a := record(s, "a")
		fired := 0
		stop := s.afterStale([]*startRecord{a}, func() { fired++ })
		if d := ft.armed[0].d; d != StartTimeout {
			t.Fatalf("armed for %v, want StartTimeout", d)
		}
		advance(StartTimeout - 10*time.Second)
		s.Renew("pool", 1, "night")
		advance(10 * time.Second)
		if d := ft.fire(t); d != StartTimeout || fired != 0 {
			t.Fatalf("fired at the handout's time: ended %d times, want the wait to go on", fired)
		}
		if ft.count() != 2 || ft.armed[1].d != StartTimeout-10*time.Second {
			t.Fatalf("set again for %v, want what the renewal left (%v)", ft.armed[len(ft.armed)-1].d, StartTimeout-10*time.Second)
		}
		advance(StartTimeout)
		ft.fire(t)
		if fired != 1 {
			t.Fatalf("ended %d times once stale, want once", fired)
		}
		if stop() {
			t.Error("stop after the end reports it kept the end from coming")
		}
	})

	t.Run("the freshest start holds the wait", func(t *testing.T) {
		s, ft := newStarts()
		a := record(s, "a")
		advance(time.Minute)
		b := record(s, "b")
		fired := 0
		s.afterStale([]*startRecord{a, b}, func() { fired++ })
		if d := ft.armed[0].d; d != StartTimeout {
			t.Fatalf("armed for %v, want b's StartTimeout", d)
		}
		advance(StartTimeout - time.Second) // a is stale, b not
		ft.fire(t)
		if fired != 0 || ft.armed[len(ft.armed)-1].d != minRearm {
			t.Fatalf("ended %d times while b stands, set again for %v; want 0 and minRearm", fired, ft.armed[len(ft.armed)-1].d)
		}
		s.notAsked(b) // answered: waits for nothing
		ft.fire(t)
		if fired != 1 {
			t.Fatalf("ended %d times once every start is stale or answered, want once", fired)
		}
	})

	t.Run("a clock that stands still", func(t *testing.T) {
		s, ft := newStarts()
		a := record(s, "a")
		fired := 0
		s.afterStale([]*startRecord{a}, func() { fired++ })
		advance(StartTimeout) // its last instant: not stale yet
		for range 3 {
			ft.fire(t)
			if got := ft.armed[len(ft.armed)-1].d; got < minRearm || fired != 0 {
				t.Fatalf("set again for %v, ended %d times; want at least %v and no end", got, fired, minRearm)
			}
		}
		advance(time.Nanosecond)
		ft.fire(t)
		if fired != 1 {
			t.Fatalf("ended %d times, want once", fired)
		}
	})

	t.Run("stopped", func(t *testing.T) {
		s, ft := newStarts()
		a := record(s, "a")
		fired := 0
		stop := s.afterStale([]*startRecord{a}, func() { fired++ })
		if !stop() {
			t.Fatal("stop before the end reports nothing kept")
		}
		if !ft.armed[0].stopped {
			t.Error("the timer was not stopped")
		}
		advance(StartTimeout + time.Second)
		ft.fire(t) // a timer that fired as it was stopped
		if fired != 0 || stop() {
			t.Errorf("ended %d times after stop, want none", fired)
		}
	})

	t.Run("stale from the start", func(t *testing.T) {
		s, ft := newStarts()
		a := record(s, "a")
		advance(StartTimeout + time.Second)
		fired := 0
		s.afterStale([]*startRecord{a}, func() { fired++ })
		if d := ft.armed[0].d; d != 0 {
			t.Fatalf("armed for %v, want at once", d)
		}
		ft.fire(t)
		if fired != 1 {
			t.Fatalf("ended %d times, want once", fired)
		}
	})
}

// TestStartsRenewRandom: random passes that renew (for the switch's generation and layout
// or another), hold VMs, edit the spec, and let time pass, while suspends after drains
// wait: each is asked exactly when its drains end while it is neither cancelled nor past
// StartTimeout from its handout or from the last renewal that found it fresh (the model),
// and asked at most once.
func TestStartsRenewRandom(t *testing.T) {
	const workers = 4
	names := []string{"a", "b", "c", "d"}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var mu sync.Mutex
		clock := startsAt
		s := NewStarts(t.Context(), nil)
		s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
		s.after = (&fakeTimers{}).after // the test ends the waits, not a timer
		d := newDrainGates()
		vc := &suspendVC{log: &orderLog{}}
		var q []queuedStart
		for _, w := range names[:workers] {
			st := queue(w, vsphere.OpSuspend, "h1", func(ctx context.Context) (string, error) { return vc.Suspend(ctx, w) })
			st.gate, st.gateVMs = &drainGate{nodes: []string{"node-" + w}, watch: d}, []string{w}
			st.plannedFor = aheadPlan{generation: 1, layout: "night"}
			q = append(q, st)
		}
		type model struct {
			since               time.Time
			cancelled, answered bool
			asked               bool
		}
		m := map[string]*model{}
		for _, w := range names[:workers] {
			m[w] = &model{since: startsAt}
		}
		stale := func(x *model) bool { return x.cancelled || clock.Sub(x.since) > StartTimeout }
		s.hand("pool", q, startGroups(q))
		var trace []string
		for step := 0; step < 30; step++ {
			switch k := rng.IntN(10); {
			case k < 4:
				dt := time.Duration(rng.IntN(90)) * time.Second
				mu.Lock()
				clock = clock.Add(dt)
				mu.Unlock()
				trace = append(trace, "advance "+dt.String())
			case k < 7:
				gen, layout := int64(1), "night"
				if rng.IntN(4) == 0 {
					gen, layout = 1, "day"
				}
				s.Renew("pool", gen, layout)
				trace = append(trace, "renew "+layout)
				for _, x := range m {
					if layout == "night" && !x.answered && !stale(x) {
						x.since = clock
					}
				}
			case k < 8:
				w := names[rng.IntN(workers)]
				s.CancelAheadOf("pool", map[string]bool{w: true})
				trace = append(trace, "hold "+w)
				if x := m[w]; !x.answered {
					x.cancelled, x.answered = true, true
				}
			default:
				w := names[rng.IntN(workers)]
				d.end("node-" + w)
				trace = append(trace, "drained "+w)
				s.mu.Lock()
				done := s.records["pool"][w].done
				s.mu.Unlock()
				<-done // answered before the clock moves on
				if x := m[w]; !x.answered {
					x.answered, x.asked = true, !stale(x)
				}
			}
		}
		s.Cancel("pool") // the rest are not asked
		s.Wait()
		calls := vc.log.all()
		for _, w := range names[:workers] {
			a, ended, _ := s.take("pool", w, vsphere.OpSuspend, startsAt, false)
			if !ended {
				t.Fatalf("seed %d: %s not answered (%v)", seed, w, trace)
			}
			n := 0
			for _, c := range calls {
				if c == "suspend "+w {
					n++
				}
			}
			if want := m[w].asked; (a.id != "") != want || n != map[bool]int{true: 1, false: 0}[want] {
				t.Fatalf("seed %d: %s answered %+v, asked %d times; the model says asked=%v (%v)", seed, w, a, n, want, trace)
			}
		}
	}
}

// TestStartsRenewTimers: the timers that end the waits of starts on a condition (a
// suspend's wait for its drains, a power-on's for its parks and the watch of those parks'
// tasks) follow the renewals: fired at the handout's StartTimeout after a pass renewed
// the starts, they leave them waiting, the watch open, and the start is asked once its
// condition holds; fired once the renewal lapsed, they answer the starts not asked
// without their condition, and end the watch.
func TestStartsRenewTimers(t *testing.T) {
	for _, kind := range []string{"suspend after drains", "power-on ahead"} {
		for _, renewed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, renewed %v", kind, renewed), func(t *testing.T) {
				var mu sync.Mutex
				clock := startsAt
				advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
				ft := &fakeTimers{}
				s := NewStarts(t.Context(), nil)
				s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
				s.after = ft.after
				d := newDrainGates()
				tasks := newEndingTasks()
				g := newGatedStarts()
				op := vsphere.OpSuspend
				if kind == "power-on ahead" {
					op = vsphere.OpPowerOn
				}
				q := queue("a", op, "h1", g.start("a", "task-a", nil))
				g.open("a")
				q.plannedFor = aheadPlan{generation: 1, layout: "night"}
				if op == vsphere.OpSuspend {
					q.gate, q.gateVMs = &drainGate{nodes: []string{"node-a"}, watch: d}, []string{"a"}
				} else {
					q.after, q.watch = []prereq{{id: "task-p"}}, tasks.watch
				}
				s.hand("pool", []queuedStart{q}, startGroups([]queuedStart{q}))
				s.mu.Lock()
				rec := s.records["pool"]["a"]
				s.mu.Unlock()
				if op == vsphere.OpPowerOn {
					waitWatches(t, tasks, 1) // the watch of the parks is open
				}
				advance(StartTimeout - time.Second)
				if renewed {
					s.Renew("pool", 1, "night")
				}
				advance(2 * time.Second) // past the handout's StartTimeout
				if n := ft.fireAll(); n == 0 {
					t.Fatal("no timer armed for the wait")
				}
				if !renewed {
					select {
					case <-rec.done:
					case <-time.After(30 * time.Second): // a failsafe, not a timing
						t.Fatal("the timers fired past StartTimeout, and the start is still waiting")
					}
					s.Wait()
					if a, ended, _ := s.take("pool", "a", op, startsAt, false); !ended || !a.notAsked {
						t.Fatalf("lapsed: %+v ended %v, want not asked", a, ended)
					}
					if len(g.order) != 0 {
						t.Fatalf("asked %v once stale", g.order)
					}
					return
				}
				if a, ended, inFlight := s.take("pool", "a", op, startsAt, false); ended || !inFlight {
					t.Fatalf("renewed, past the handout's StartTimeout: %+v ended %v, want still waiting", a, ended)
				}
				if op == vsphere.OpPowerOn {
					tasks.mu.Lock()
					watches := tasks.watches
					tasks.mu.Unlock()
					if watches != 1 {
						t.Fatalf("%d watches of the parks, want the one still open", watches)
					}
					tasks.end("task-p", true)
				} else {
					d.end("node-a")
				}
				s.Wait()
				if a, ended, _ := s.take("pool", "a", op, startsAt, false); !ended || a.id != "task-a" {
					t.Fatalf("renewed, its condition held: %+v ended %v, want its task", a, ended)
				}
				if ft.fireAll(); len(g.order) != 1 {
					t.Fatalf("asked %v, want once", g.order)
				}
			})
		}
	}
}

// waitWatches waits until n watches of the tasks have begun.
func waitWatches(t *testing.T, e *endingTasks, n int) {
	t.Helper()
	waitCount(t, n, "watches of the tasks", func() int { e.mu.Lock(); defer e.mu.Unlock(); return e.watches })
}

// waitCount waits (bounded) until count reaches n: what it counts happens on goroutines
// the test does not otherwise see.
func waitCount(t *testing.T, n int, what string, count func() int) {
	t.Helper()
	for range 10000 {
		if count() >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("fewer than %d %s began", n, what)
}

// TestStartsRenewOnlyPending: a start whose condition held (its drains ended) and that
// now waits for its node write or a slot is a start queued for vCenter: a pass that
// renews the switch leaves it, and it is answered not asked at StartTimeout from its
// handout, as any queued start.
func TestStartsRenewOnlyPending(t *testing.T) {
	var mu sync.Mutex
	clock := startsAt
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	s := NewStarts(t.Context(), nil)
	s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	s.after = (&fakeTimers{}).after
	d := newDrainGates()
	g := newGatedStarts()
	q := queue("a", vsphere.OpSuspend, "h1", g.start("a", "task-a", nil))
	g.open("a")
	q.plannedFor = aheadPlan{generation: 1, layout: "night"}
	q.gate, q.gateVMs = &drainGate{nodes: []string{"node-a"}, watch: d}, []string{"a"}
	writing, release := make(chan struct{}), make(chan struct{})
	q.mark = func(context.Context) error { close(writing); <-release; return nil }
	s.hand("pool", []queuedStart{q}, startGroups([]queuedStart{q}))
	d.end("node-a")
	<-writing // its drains ended: its node write is under way
	advance(StartTimeout - time.Second)
	s.Renew("pool", 1, "night")
	advance(2 * time.Second)
	close(release)
	s.Wait()
	if a, ended, _ := s.take("pool", "a", vsphere.OpSuspend, startsAt, false); !ended || !a.notAsked {
		t.Fatalf("%+v ended %v, want not asked: renewed once its drains had ended", a, ended)
	}
	if len(g.order) != 0 {
		t.Fatalf("asked %v", g.order)
	}
}
