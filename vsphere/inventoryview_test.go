package vsphere_test

import (
	"reflect"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/internal/testclock"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// polls and reads are the scoped reads' calls since the last ResetCalls.
func pollsAndReads(e *env) (int, int) {
	return e.sim.Calls(vgpusim.PollMethod), e.sim.Calls("RetrievePropertiesEx") + e.sim.Calls("RetrieveProperties")
}

// TestWatchedReadsSurviveALostSession: a view's collector goes with its session; the
// read after vCenter ended the session is made afresh (and right), and so are the pool's
// reads for the back-off after; then a new view serves them.
func TestWatchedReadsSurviveALostSession(t *testing.T) {
	clk := clocktesting.NewFakeClock(testclock.Base())
	e := newEnv(t, "twohost.yaml", vsphere.WithWatchedInventory(1), vsphere.WithClock(clk))
	for range 2 {
		if _, err := e.c.Inventory(e.ctx, "gpu-day-1"); err != nil {
			t.Fatal(err)
		}
	}
	e.sim.ExpireSessions()
	got, err := e.c.Inventory(e.ctx, "gpu-day-1")
	if err != nil {
		t.Fatalf("the read after the session ended: %v", err)
	}
	whole, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.VMs) != len(whole.VMs) {
		t.Fatalf("the read after the session ended lists %d VMs, want %d", len(got.VMs), len(whole.VMs))
	}
	for i, vm := range got.VMs {
		if w := whole.VMs[i]; w.Host == "esx-01" && !reflect.DeepEqual(vm, w) {
			t.Fatalf("the read after the session ended: VM of the scope\n got %+v\nwant %+v", vm, w)
		}
	}
	for _, step := range []struct {
		after time.Duration
		polls bool
	}{{time.Minute, false}, {3 * time.Minute, false}, {2 * time.Minute, true}, {time.Second, true}} {
		clk.Step(step.after)
		e.sim.ResetCalls()
		if _, err := e.c.Inventory(e.ctx, "gpu-day-1"); err != nil {
			t.Fatal(err)
		}
		if polls, _ := pollsAndReads(e); (polls > 0) != step.polls {
			t.Fatalf("%v later: %d polls, want a view %t", step.after, polls, step.polls)
		}
	}
	e.sim.ResetCalls()
	if _, err := e.c.Inventory(e.ctx, "gpu-day-1"); err != nil {
		t.Fatal(err)
	}
	readModes[1].wantOneRead(t, e, "a read of the new view")
}

// TestViewsAreBounded: a session holds at most maxViews (8) collectors on vCenter; a
// pool read while all are in use is read afresh, and views unread for ten minutes are
// destroyed and make room.
func TestViewsAreBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(testclock.Base())
	e := newEnv(t, "features.yaml", vsphere.WithWatchedInventory(1), vsphere.WithClock(clk))
	whole, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var scopes [][]string
	for i, a := range whole.VMs {
		for _, b := range whole.VMs[i+1:] {
			scopes = append(scopes, []string{a.Name, b.Name})
		}
	}
	if len(scopes) < 12 {
		t.Fatalf("features.yaml makes %d scopes: too few to fill the views", len(scopes))
	}
	live := func() int { return e.sim.Calls("CreatePropertyCollector") - e.sim.Calls("DestroyPropertyCollector") }
	e.sim.ResetCalls()
	for i, ids := range scopes[:10] {
		clk.Step(time.Minute)
		e.sim.ResetCalls()
		if _, err := e.c.Inventory(e.ctx, ids...); err != nil {
			t.Fatal(err)
		}
		polls, _ := pollsAndReads(e)
		if viewed := i < 8; (polls > 0) != viewed {
			t.Fatalf("pool %d: %d polls, want a view %t", i, polls, viewed)
		}
	}
	// The first views were read 10 and 9 minutes ago: the next pool takes the room of
	// the first, which is destroyed.
	clk.Step(time.Minute)
	e.sim.ResetCalls()
	if _, err := e.c.Inventory(e.ctx, scopes[10]...); err != nil {
		t.Fatal(err)
	}
	if polls, _ := pollsAndReads(e); polls == 0 || e.sim.Calls("DestroyPropertyCollector") != 1 || live() != 0 {
		t.Fatalf("after ten minutes: %d polls, %d collectors destroyed, %d made; want one of each",
			polls, e.sim.Calls("DestroyPropertyCollector"), e.sim.Calls("CreatePropertyCollector"))
	}
	// The second view is still kept, and read with one poll.
	e.sim.ResetCalls()
	if _, err := e.c.Inventory(e.ctx, scopes[1]...); err != nil {
		t.Fatal(err)
	}
	readModes[1].wantOneRead(t, e, "the second pool's view")
}
