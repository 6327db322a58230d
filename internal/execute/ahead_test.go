package execute

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpupool/gpupool/vsphere"
)

// endingTasks is a vCenter's task ends for WatchTasks: a task ends when the test says.
type endingTasks struct {
	mu      sync.Mutex
	ended   map[string]bool
	changed chan struct{}
	watches int
	fail    error
}

func newEndingTasks() *endingTasks {
	return &endingTasks{ended: map[string]bool{}, changed: make(chan struct{})}
}

func (e *endingTasks) end(id string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ended[id] = ok
	close(e.changed)
	e.changed = make(chan struct{})
}

// watch is vsphere.Client.WatchTasks over these tasks.
func (e *endingTasks) watch(ctx context.Context, ids []string, ended func(string, bool)) error {
	e.mu.Lock()
	e.watches++
	fail := e.fail
	e.mu.Unlock()
	if fail != nil {
		return fail
	}
	told := map[string]bool{}
	for {
		e.mu.Lock()
		for _, id := range ids {
			if ok, over := e.ended[id]; over && !told[id] {
				told[id] = true
				ended(id, ok)
			}
		}
		changed := e.changed
		e.mu.Unlock()
		if len(told) == len(ids) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestStartsAheadOfParks: power-ons ahead of parks are asked once every park they wait
// for (of the same handout, or in flight) has ended well, in their host's order, and
// never otherwise: a park that fails, is refused or not asked, a watch that fails, or a
// cancel leaves them not asked. While they wait they are starts in flight, marked ahead.
func TestStartsAheadOfParks(t *testing.T) {
	type result struct{ asked, notAsked []string }
	cases := []struct {
		name string
		// parkErr is the answer to the park of the handout; then run ends tasks or
		// cancels.
		parkID  string
		parkErr error
		fail    error
		run     func(s *Starts, tasks *endingTasks)
		want    result
	}{
		{name: "the parks end well", parkID: "task-p1", run: func(_ *Starts, tasks *endingTasks) {
			tasks.end("task-p1", true)
			tasks.end("task-p2", true)
		}, want: result{asked: []string{"a", "b"}}},
		{name: "the park in flight fails", parkID: "task-p1", run: func(_ *Starts, tasks *endingTasks) {
			tasks.end("task-p2", false)
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "the park of the pass fails", parkID: "task-p1", run: func(_ *Starts, tasks *endingTasks) {
			tasks.end("task-p2", true)
			tasks.end("task-p1", false)
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "the park of the pass is refused", parkErr: errors.New("refused"), run: func(*Starts, *endingTasks) {},
			want: result{notAsked: []string{"a", "b"}}},
		{name: "the park of the pass finds its VM parked", parkID: "", run: func(_ *Starts, tasks *endingTasks) {
			tasks.end("task-p2", true)
		}, want: result{asked: []string{"a", "b"}}},
		{name: "the watch fails", parkID: "task-p1", fail: errors.New("session lost"), run: func(*Starts, *endingTasks) {},
			want: result{notAsked: []string{"a", "b"}}},
		{name: "the same switch goes on", parkID: "task-p1", run: func(s *Starts, tasks *endingTasks) {
			s.CancelAhead("pool", 3, "night")
			tasks.end("task-p1", true)
			tasks.end("task-p2", true)
		}, want: result{asked: []string{"a", "b"}}},
		{name: "another layout is made", parkID: "task-p1", run: func(s *Starts, tasks *endingTasks) {
			s.CancelAhead("pool", 3, "day")
			tasks.end("task-p1", true)
			tasks.end("task-p2", true)
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "the spec changed", parkID: "task-p1", run: func(s *Starts, tasks *endingTasks) {
			s.CancelAhead("pool", 4, "night")
			tasks.end("task-p1", true)
			tasks.end("task-p2", true)
		}, want: result{notAsked: []string{"a", "b"}}},
		{name: "cancelled", parkID: "task-p1", run: func(s *Starts, tasks *endingTasks) {
			tasks.end("task-p1", true)
			s.Cancel("pool")
			tasks.end("task-p2", true)
		}, want: result{notAsked: []string{"a", "b"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			wakes := 0
			s := NewStarts(t.Context(), func(string) { mu.Lock(); wakes++; mu.Unlock() })
			g := newGatedStarts()
			tasks := newEndingTasks()
			tasks.fail = c.fail
			after := []prereq{{worker: "p1"}, {id: "task-p2"}}
			ahead := func(w string) queuedStart {
				q := queue(w, vsphere.OpPowerOn, "h1", g.start(w, "task-"+w, nil))
				q.after, q.watch, q.plannedFor = after, tasks.watch, aheadPlan{generation: 3, layout: "night"}
				return q
			}
			q := []queuedStart{queue("p1", vsphere.OpSuspend, "h1", g.start("p1", c.parkID, c.parkErr)), ahead("a"), ahead("b")}
			g.open("a", "b")
			stages := stageCounts(t)
			s.hand("pool", q, startGroups(q))
			if a, ended, inFlight := s.take("pool", "a", vsphere.OpPowerOn, startsAt, false); ended || !inFlight || !a.ahead {
				t.Fatalf("a power-on ahead before its parks: %+v ended %v in flight %v, want in flight and ahead", a, ended, inFlight)
			}
			g.open("p1")
			g.waitStarted(t, 1)
			c.run(s, tasks)
			s.Wait()
			g.mu.Lock()
			order := slices.Clone(g.order)
			g.mu.Unlock()
			if want := append([]string{"p1"}, c.want.asked...); !slices.Equal(order, want) {
				t.Errorf("asked %v, want %v", order, want)
			}
			for _, w := range c.want.notAsked {
				if a, ended, _ := s.take("pool", w, vsphere.OpPowerOn, startsAt, false); !ended || !a.notAsked {
					t.Errorf("%s: %+v ended %v, want not asked", w, a, ended)
				}
			}
			for _, w := range c.want.asked {
				if a, ended, _ := s.take("pool", w, vsphere.OpPowerOn, startsAt, false); !ended || a.id != "task-"+w {
					t.Errorf("%s: %+v ended %v, want its task", w, a, ended)
				}
			}
			// Every start asked is timed in the queue and at vCenter's door (the park
			// too, refused or not); the parks' wait once they ended well and in time.
			timed := stageCounts(t)
			asked := uint64(1 + len(c.want.asked))
			if timed["queue"]-stages["queue"] != asked || timed["ask"]-stages["ask"] != asked {
				t.Errorf("stages timed %v -> %v, want %d more queue and ask", stages, timed, asked)
			}
			if parks := timed["parks"] - stages["parks"]; len(c.want.asked) > 0 && parks != 1 {
				t.Errorf("the parks' wait timed %d times, want once", parks)
			}
			mu.Lock()
			defer mu.Unlock()
			if wakes != 2 {
				t.Errorf("woken %d times, want twice: the park answered, then the power-ons ahead", wakes)
			}
			if tasks.watches > 1 {
				t.Errorf("%d watches for one handout", tasks.watches)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.follows) != 0 {
				t.Errorf("watches left registered: %v", s.follows)
			}
		})
	}
}

// TestStartsAheadTimeOut: power-ons ahead whose parks end more than StartTimeout after
// the handout, or after the last pass that planned for their generation and layout
// (Renew), are not asked: their decision is older than any start may act on.
func TestStartsAheadTimeOut(t *testing.T) {
	cases := []struct {
		name  string
		run   func(s *Starts, advance func(time.Duration))
		asked bool
	}{
		{"the parks end too late", func(_ *Starts, advance func(time.Duration)) { advance(StartTimeout + time.Second) }, false},
		{"a pass renews them", func(s *Starts, advance func(time.Duration)) {
			advance(StartTimeout - time.Second)
			s.Renew("pool", 3, "night")
			advance(StartTimeout - time.Second)
		}, true},
		{"the renewal lapses", func(s *Starts, advance func(time.Duration)) {
			advance(time.Minute)
			s.Renew("pool", 3, "night")
			advance(StartTimeout + time.Second)
		}, false},
		{"a pass for another layout", func(s *Starts, advance func(time.Duration)) {
			advance(StartTimeout - time.Second)
			s.Renew("pool", 3, "day")
			advance(2 * time.Second)
		}, false},
		{"renewed once stale", func(s *Starts, advance func(time.Duration)) {
			advance(StartTimeout + time.Second)
			s.Renew("pool", 3, "night")
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			clock := startsAt
			s := NewStarts(t.Context(), nil)
			s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
			tasks := newEndingTasks()
			g := newGatedStarts()
			q := queue("a", vsphere.OpPowerOn, "h1", g.start("a", "task-a", nil))
			q.after, q.watch = []prereq{{id: "task-p"}}, tasks.watch
			q.plannedFor = aheadPlan{generation: 3, layout: "night"}
			g.open("a")
			s.hand("pool", []queuedStart{q}, startGroups([]queuedStart{q}))
			c.run(s, func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() })
			tasks.end("task-p", true)
			s.Wait()
			a, ended, _ := s.take("pool", "a", vsphere.OpPowerOn, startsAt, false)
			switch {
			case c.asked && (!ended || a.id != "task-a"):
				t.Errorf("a: %+v ended %v, want its task", a, ended)
			case !c.asked && (!ended || !a.notAsked):
				t.Errorf("a: %+v ended %v, want not asked", a, ended)
			case !c.asked && len(g.order) != 0:
				t.Errorf("asked %v after the timeout", g.order)
			}
		})
	}
}

// TestStartGroupsAhead: the power-ons ahead of a host's parks are a group of their own,
// apart from the host's other power-ons of the same pass, in the plan's order.
func TestStartGroupsAhead(t *testing.T) {
	on := func(w, host string, ahead bool) queuedStart {
		q := queue(w, vsphere.OpPowerOn, host, nil)
		if ahead {
			q.after = []prereq{{id: "task-p"}}
		}
		return q
	}
	q := []queuedStart{on("a", "h1", false), on("b", "h1", true), on("c", "h1", false), on("d", "h1", true), on("e", "h2", true)}
	got := startGroups(q)
	want := [][]int{{0, 2}, {1, 3}, {4}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("groups %v, want %v", got, want)
	}
}

// stageCounts is how many starts StartStages timed so far, by stage.
func stageCounts(t *testing.T) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, stage := range []string{"parks", "drains", "mark", "queue", "ask"} {
		var m dto.Metric
		if err := StartStages.WithLabelValues(stage).(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		out[stage] = m.GetHistogram().GetSampleCount()
	}
	return out
}

// counterValue is a counter's value for the labels.
func counterValue(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
