package controllers

import (
	"context"
	"testing"
	"time"
)

// TestTaskWatchWakesThePoolWhenATaskEnds: a pool with a task in flight is woken when
// vCenter ends the task, once, however many passes asked for the same watch; a watch a
// pass ends (no tasks, no session) wakes nobody.
func TestTaskWatchWakesThePoolWhenATaskEnds(t *testing.T) {
	h := newHarness(t, "tw-")
	vc := h.vsphereClient()
	ref := func(vm string) string {
		r, ok := h.sim.VMRef(h.prefix + vm)
		if !ok {
			t.Fatalf("no VM %s", vm)
		}
		return r
	}
	ctx, cancel := context.WithCancel(h.ctx)
	w := newTaskWatch(ctx)
	t.Cleanup(func() { cancel(); w.stop() })

	h.sim.HoldTasks()
	off, err := vc.PowerOff(h.ctx, ref("day-1"))
	h.must(err)
	w.watch("p", vc, []string{off})
	w.watch("p", vc, []string{off}) // the next pass finds the same task in flight
	if n := w.watching(); n != 1 {
		t.Fatalf("%d watches, want 1", n)
	}
	if n := h.sim.ReleaseTasks(); n != 1 {
		t.Fatalf("released %d tasks", n)
	}
	select {
	case ev := <-w.events:
		if ev.Object.GetName() != "p" {
			t.Fatalf("woke %q, want p", ev.Object.GetName())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pool was not woken when its task ended")
	}
	if n := w.watching(); n != 0 {
		t.Errorf("%d watches left after the task ended", n)
	}

	// A pass without tasks ends the watch: the task's end wakes nobody.
	h.sim.HoldTasks()
	on, err := vc.PowerOn(h.ctx, ref("day-1"), "")
	h.must(err)
	w.watch("q", vc, []string{on})
	w.watch("q", nil, nil)
	if n := w.watching(); n != 0 {
		t.Fatalf("%d watches after the pass ended it", n)
	}
	h.sim.ReleaseTasks()
	cancel()
	w.stop()
	if n := len(w.events); n != 0 {
		t.Errorf("%d wake-ups from an ended watch", n)
	}
	var nilWatch *taskWatch
	nilWatch.watch("r", vc, []string{on}) // tests that call Reconcile directly have none
}
