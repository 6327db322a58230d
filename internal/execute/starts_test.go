package execute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/vsphere"
)

// gatedStarts are start functions that wait for their gate and log their order.
type gatedStarts struct {
	mu      sync.Mutex
	order   []string
	running int
	most    int
	gates   map[string]chan struct{}
}

func newGatedStarts() *gatedStarts { return &gatedStarts{gates: map[string]chan struct{}{}} }

// start is the start of worker w, answering id and err once w's gate opens.
func (g *gatedStarts) start(w, id string, err error) func(context.Context) (string, error) {
	g.mu.Lock()
	gate := make(chan struct{})
	g.gates[w] = gate
	g.mu.Unlock()
	return func(ctx context.Context) (string, error) {
		g.mu.Lock()
		g.running++
		g.most = max(g.most, g.running)
		g.order = append(g.order, w)
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.running--
			g.mu.Unlock()
		}()
		select {
		case <-gate:
			return id, err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func (g *gatedStarts) open(ws ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range ws {
		close(g.gates[w])
	}
}

// waitStarted waits until n starts have been called (bounded: the starts run on
// goroutines this test does not otherwise see).
func (g *gatedStarts) waitStarted(t *testing.T, n int) {
	t.Helper()
	for range 10000 {
		g.mu.Lock()
		k := len(g.order)
		g.mu.Unlock()
		if k >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("fewer than %d starts were called", n)
}

var startsAt = time.Date(2031, 6, 2, 10, 0, 0, 0, time.UTC)

func queue(w string, op vsphere.Op, host string, start func(context.Context) (string, error)) queuedStart {
	return queuedStart{worker: w, host: host, op: op, at: startsAt, start: start}
}

// TestStartsAnsweredOnce: a start is in flight until answered, its answer is taken for
// its own intent only and kept until the pool's commit (a pass's stored status), and the
// pool is woken once per pass when all its starts are answered.
func TestStartsAnsweredOnce(t *testing.T) {
	var mu sync.Mutex
	wakes := 0
	s := NewStarts(t.Context(), func(string) { mu.Lock(); wakes++; mu.Unlock() })
	g := newGatedStarts()
	q := []queuedStart{
		queue("a", vsphere.OpSuspend, "h1", g.start("a", "task-a", nil)),
		queue("b", vsphere.OpSuspend, "h1", g.start("b", "", errors.New("refused"))),
		queue("c", vsphere.OpReconfigure, "h2", g.start("c", "", nil)),
	}
	s.hand("pool", q, startGroups(q))
	if _, ended, inFlight := s.take("pool", "a", vsphere.OpSuspend, startsAt, false); ended || !inFlight {
		t.Fatalf("a start not answered yet: ended %v, in flight %v", ended, inFlight)
	}
	g.open("a", "b")
	g.waitStarted(t, 3)
	mu.Lock()
	if wakes != 0 {
		t.Errorf("woken %d times before the pass's last answer", wakes)
	}
	mu.Unlock()
	g.open("c")
	s.Wait()
	mu.Lock()
	if wakes != 1 {
		t.Errorf("woken %d times, want once for the pass", wakes)
	}
	mu.Unlock()
	// The intent's time is stored to the second.
	a, ended, _ := s.take("pool", "a", vsphere.OpSuspend, startsAt.Add(400*time.Millisecond), true)
	if !ended || a.id != "task-a" || a.err != nil || a.notAsked {
		t.Errorf("peek of a: %+v ended %v, want task-a", a, ended)
	}
	if a, ended, _ := s.take("pool", "a", vsphere.OpSuspend, startsAt, false); !ended || a.id != "task-a" {
		t.Errorf("a after a peek: %+v ended %v, want task-a (a peek keeps the answer)", a, ended)
	}
	// Taken, the answer is kept until a pass's status write stored it (Commit): a pass
	// whose write failed leaves it for the next.
	if a, ended, _ := s.take("pool", "a", vsphere.OpSuspend, startsAt, false); !ended || a.id != "task-a" {
		t.Errorf("a taken again before a commit: %+v ended %v, want task-a", a, ended)
	}
	s.Commit("other pool")
	if a, ended, _ := s.take("pool", "a", vsphere.OpSuspend, startsAt, false); !ended || a.id != "task-a" {
		t.Errorf("a after another pool's commit: %+v ended %v, want task-a", a, ended)
	}
	s.Commit("pool")
	if _, ended, inFlight := s.take("pool", "a", vsphere.OpSuspend, startsAt, false); ended || inFlight {
		t.Errorf("a taken after its pass's commit")
	}
	if a, ended, _ := s.take("pool", "b", vsphere.OpSuspend, startsAt, false); !ended || a.err == nil {
		t.Errorf("b: want its error, got %+v (ended %v)", a, ended)
	}
	// An answer to another intent of the worker is dropped, not given to this one.
	if _, ended, inFlight := s.take("pool", "c", vsphere.OpPowerOn, startsAt, false); ended || inFlight {
		t.Errorf("c's reconfigure answered a power-on intent")
	}
	if n := s.InFlight("pool"); n != 1 {
		t.Errorf("%d records left before the commit, want b's", n)
	}
	s.Commit("pool")
	if n := s.InFlight("pool"); n != 0 {
		t.Errorf("%d records left, want none", n)
	}
}

// TestStartsKeepHostOrder: a host's power-ons go one after the other in the plan's
// order, and a later pass's power-ons of the host after an earlier pass's: on each of
// 20 hosts, the second pass's power-on is asked only after the first pass's two.
func TestStartsKeepHostOrder(t *testing.T) {
	s := NewStarts(t.Context(), nil)
	s.Limit = 100
	g := newGatedStarts()
	const hosts = 20
	on := func(h, i int) string { return fmt.Sprintf("h%d-on-%d", h, i) }
	var first, second []queuedStart
	for h := range hosts {
		host := fmt.Sprintf("h%d", h)
		first = append(first, queue(on(h, 1), vsphere.OpPowerOn, host, g.start(on(h, 1), "t", nil)),
			queue(on(h, 2), vsphere.OpPowerOn, host, g.start(on(h, 2), "t", nil)))
		q := queue(on(h, 3), vsphere.OpPowerOn, host, g.start(on(h, 3), "t", nil))
		q.at = startsAt.Add(time.Minute)
		second = append(second, q)
	}
	s.hand("pool", first, startGroups(first))
	g.waitStarted(t, hosts)
	s.hand("pool", second, startGroups(second))
	for h := range hosts {
		g.open(on(h, 1), on(h, 2), on(h, 3))
	}
	s.Wait()
	for h := range hosts {
		var got []string
		for _, w := range g.order {
			if strings.HasPrefix(w, fmt.Sprintf("h%d-", h)) {
				got = append(got, w)
			}
		}
		if want := []string{on(h, 1), on(h, 2), on(h, 3)}; !slices.Equal(got, want) {
			t.Errorf("host h%d's power-ons ran %v, want %v", h, got, want)
		}
	}
}

// TestStartsLimit: at most Limit starts of a pool are asked at once, over the passes.
func TestStartsLimit(t *testing.T) {
	s := NewStarts(t.Context(), nil)
	s.Limit = 2
	g := newGatedStarts()
	var all []string
	for pass := range 2 {
		var q []queuedStart
		for i := range 3 {
			w := fmt.Sprintf("park-%d-%d", pass, i)
			all = append(all, w)
			q = append(q, queue(w, vsphere.OpSuspend, "h1", g.start(w, "t-"+w, nil)))
		}
		s.hand("pool", q, startGroups(q))
	}
	g.waitStarted(t, 2)
	for _, w := range all {
		g.open(w)
	}
	s.Wait()
	if g.most != 2 || len(g.order) != len(all) {
		t.Errorf("%d of %d starts asked, at most %d at once; want all, at most the limit, 2", len(g.order), len(all), g.most)
	}
}

// TestFollowerTakesStarts: an intent whose start is in flight counts as a task in flight
// and vCenter is not asked about it; an answered one gets its task id (and the task is
// checked in the same pass); a failed one is retried after a backoff; an intent with no
// answer is resolved from vCenter as after a restart.
func TestFollowerTakesStarts(t *testing.T) {
	s := NewStarts(t.Context(), nil)
	g := newGatedStarts()
	q := []queuedStart{
		queue("slow", vsphere.OpSuspend, "h1", g.start("slow", "task-slow", nil)),
		queue("done", vsphere.OpSuspend, "h1", g.start("done", "task-done", nil)),
		queue("failed", vsphere.OpPowerOn, "h2", g.start("failed", "", errors.New("no host"))),
	}
	s.hand("pool", q, startGroups(q))
	g.open("done", "failed")
	g.waitStarted(t, 3)
	for s.pending("pool", "done") || s.pending("pool", "failed") {
		time.Sleep(time.Millisecond)
	}
	intent := func(vm string, op vsphere.Op) gpupoolv1.WorkerStatus {
		return gpupoolv1.WorkerStatus{VM: vm, Task: &gpupoolv1.TaskReference{Operation: string(op), StartTime: metav1.NewTime(startsAt)}}
	}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Status: gpupoolv1.GPUPoolProfileStatus{Workers: []gpupoolv1.WorkerStatus{
		intent("slow", vsphere.OpSuspend), intent("done", vsphere.OpSuspend), intent("failed", vsphere.OpPowerOn), intent("restarted", vsphere.OpSuspend),
	}}}
	vc := &askedVC{tasks: map[string]vsphere.TaskInfo{"task-done": {State: vsphere.TaskRunning}}}
	f := &Follower{Pool: pool, Now: startsAt, VSphere: vc, Events: noEvents{}, Starts: s}
	if after := f.Check(t.Context()); after != RequeueTask {
		t.Errorf("Check asks to come back after %s, want %s (tasks in flight)", after, RequeueTask)
	}
	got := map[string]gpupoolv1.WorkerStatus{}
	for _, w := range pool.Status.Workers {
		got[w.VM] = w
	}
	if w := got["slow"]; w.Task == nil || w.Task.ID != "" {
		t.Errorf("slow: %+v, want its intent kept, without an id", w.Task)
	}
	if w := got["done"]; w.Task == nil || w.Task.ID != "task-done" {
		t.Errorf("done: %+v, want task-done recorded", w.Task)
	}
	if w := got["failed"]; w.Attempts != 1 || w.NextRetryTime == nil {
		t.Errorf("failed: attempts %d, retry %v, want a failed attempt with a backoff", w.Attempts, w.NextRetryTime)
	}
	if slices.Contains(vc.found, "slow") {
		t.Errorf("vCenter was asked for the task of slow, whose start is in flight (asked: %v)", vc.found)
	}
	for _, vm := range []string{"failed", "restarted"} {
		if !slices.Contains(vc.found, vm) {
			t.Errorf("vCenter was not asked for the task of %s (asked: %v)", vm, vc.found)
		}
	}
	if !slices.Contains(vc.checked, "task-done") {
		t.Errorf("task-done was not checked in the pass that recorded it (checked: %v)", vc.checked)
	}
	g.open("slow")
	s.Wait()
}

// pending tells whether the worker's start is recorded and not answered (the tests).
func (s *Starts) pending(pool, worker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[pool][worker]
	return r != nil && !r.ended
}

// askedVC is a vCenter that knows each intent's VM and no task but tasks, and logs what
// it was asked.
type askedVC struct {
	vsphere.Client
	mu      sync.Mutex
	tasks   map[string]vsphere.TaskInfo
	found   []string
	checked []string
}

func (v *askedVC) Inventory(_ context.Context, vms ...string) (*inventory.Inventory, error) {
	inv := &inventory.Inventory{}
	for _, vm := range vms {
		inv.VMs = append(inv.VMs, inventory.VM{Name: vm, Ref: vm})
	}
	return inv, nil
}

func (v *askedVC) FindTask(_ context.Context, vmRef string, _ vsphere.Op, _ []string) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.found = append(v.found, vmRef)
	return "", nil
}

func (v *askedVC) Tasks(_ context.Context, ids []string) (map[string]vsphere.TaskInfo, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checked = append(v.checked, ids...)
	out := map[string]vsphere.TaskInfo{}
	for _, id := range ids {
		if ti, ok := v.tasks[id]; ok {
			out[id] = ti
		}
	}
	return out, nil
}

// TestStartsNotAsked: a start still queued when its pool's starts are cancelled (a
// pause, an abort, a deletion), or queued longer than StartTimeout, is not asked of
// vCenter; one being asked goes on. The next pass clears the intent of one not asked, and
// keeps the task id of one asked.
func TestStartsNotAsked(t *testing.T) {
	for _, c := range []struct {
		name string
		stop func(s *Starts, clock *time.Time)
	}{
		{"cancelled", func(s *Starts, _ *time.Time) { s.Cancel("pool") }},
		{"queued too long", func(_ *Starts, clock *time.Time) { *clock = clock.Add(StartTimeout + time.Second) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			clock := startsAt
			s := NewStarts(t.Context(), nil)
			s.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
			g := newGatedStarts()
			q := []queuedStart{
				queue("on-1", vsphere.OpPowerOn, "h1", g.start("on-1", "task-1", nil)),
				queue("on-2", vsphere.OpPowerOn, "h1", g.start("on-2", "task-2", nil)),
			}
			s.hand("pool", q, startGroups(q))
			g.waitStarted(t, 1) // on-1 is being asked; on-2 queues behind it
			mu.Lock()
			c.stop(s, &clock)
			mu.Unlock()
			g.open("on-1", "on-2")
			s.Wait()
			if !slices.Equal(g.order, []string{"on-1"}) {
				t.Errorf("asked %v, want on-1 only", g.order)
			}
			pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Status: gpupoolv1.GPUPoolProfileStatus{Workers: []gpupoolv1.WorkerStatus{
				{VM: "on-1", Task: &gpupoolv1.TaskReference{Operation: string(vsphere.OpPowerOn), StartTime: metav1.NewTime(startsAt)}},
				{VM: "on-2", Task: &gpupoolv1.TaskReference{Operation: string(vsphere.OpPowerOn), StartTime: metav1.NewTime(startsAt)}},
			}}}
			vc := &askedVC{tasks: map[string]vsphere.TaskInfo{"task-1": {State: vsphere.TaskRunning}}}
			(&Follower{Pool: pool, Now: startsAt, VSphere: vc, Events: noEvents{}, Starts: s}).Check(t.Context())
			if w := pool.Status.Workers[0]; w.Task == nil || w.Task.ID != "task-1" {
				t.Errorf("on-1: %+v, want task-1 recorded", w.Task)
			}
			if w := pool.Status.Workers[1]; w.Task != nil {
				t.Errorf("on-2: %+v, want its intent cleared (not asked)", w.Task)
			}
			if len(vc.found) != 0 {
				t.Errorf("vCenter asked for the tasks of %v; every intent had an answer", vc.found)
			}
		})
	}
}

// TestPreviewLeavesIntents: a preview (Peek) with no starts of its own (kubectl
// gpupool's live plan, another process) counts every intent without a task id as in
// flight, and asks vCenter about none: the manager may be asking for it right now.
func TestPreviewLeavesIntents(t *testing.T) {
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Status: gpupoolv1.GPUPoolProfileStatus{Workers: []gpupoolv1.WorkerStatus{
		{VM: "vm-1", Task: &gpupoolv1.TaskReference{Operation: string(vsphere.OpSuspend), StartTime: metav1.NewTime(startsAt)}},
	}}}
	vc := &askedVC{}
	after := (&Follower{Pool: pool, Now: startsAt, VSphere: vc, Events: noEvents{}, Peek: true}).Check(t.Context())
	if w := pool.Status.Workers[0]; w.Task == nil || after != RequeueTask || len(vc.found) != 0 {
		t.Errorf("intent %+v, after %s, vCenter asked for %v; want the intent kept as a task in flight, nothing asked", w.Task, after, vc.found)
	}
}
