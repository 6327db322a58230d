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

// TestTaskWatchFollowsBatches: a task's end wakes the pool without restarting the watch
// of the pool's other tasks (no new property collector in vCenter), a pass that finds
// tasks no watch follows adds a watch of those only, and past maxTaskWatches one watch
// of all the pool's tasks replaces them; every end wakes the pool, and the watches end
// with the tasks.
func TestTaskWatchFollowsBatches(t *testing.T) {
	h := newHarness(t, "twb-")
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
	woken := func(what string) {
		t.Helper()
		select {
		case ev := <-w.events:
			if ev.Object.GetName() != "p" {
				t.Fatalf("woke %q, want p", ev.Object.GetName())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the pool was not woken: %s", what)
		}
	}
	collectors := func() int { return h.sim.Calls("CreatePropertyCollector") }
	watching := func(want int, what string) {
		t.Helper()
		if n := w.watching(); n != want {
			t.Fatalf("%s: %d watches, want %d", what, n, want)
		}
	}

	h.sim.HoldTasksOf("PowerOffVM_Task")
	off1, err := vc.PowerOff(h.ctx, ref("day-1"))
	h.must(err)
	susp2, err := vc.Suspend(h.ctx, ref("day-2"))
	h.must(err)
	before := collectors()
	first := before
	w.watch("p", vc, []string{off1, susp2})
	woken("the suspend ended")
	watching(1, "one of the batch's two tasks ended")
	w.watch("p", vc, []string{off1}) // the next pass, with the task that still runs
	watching(1, "the pass found the task its watch follows")
	if n := collectors() - before; n != 1 {
		t.Fatalf("%d property collectors for one batch, want 1: an end restarted the watch", n)
	}

	off3, err := vc.PowerOff(h.ctx, ref("day-3"))
	h.must(err)
	w.watch("p", vc, []string{off1, off3})
	watching(2, "a task no watch followed")
	off4, err := vc.PowerOff(h.ctx, ref("day-4"))
	h.must(err)
	w.watch("p", vc, []string{off1, off3, off4})
	watching(3, "another task")
	h.sim.HoldTasks() // also the power-ons below
	on1, err := vc.PowerOn(h.ctx, ref("night-1"), "")
	h.must(err)
	all := []string{off1, off3, off4, on1}
	w.watch("p", vc, all)
	watching(maxTaskWatches, "a watch per batch, up to the bound")
	// Each watch creates its collector in its own goroutine: wait for the four (bounded)
	// so that none is counted with the watch of all below.
	for deadline := time.Now().Add(30 * time.Second); collectors()-first < maxTaskWatches; {
		if time.Now().After(deadline) {
			t.Fatalf("%d property collectors for %d watches", collectors()-first, maxTaskWatches)
		}
		time.Sleep(10 * time.Millisecond)
	}
	on2, err := vc.PowerOn(h.ctx, ref("day-2"), "")
	h.must(err)
	all = append(all, on2)
	before = collectors()
	w.watch("p", vc, all)
	watching(1, "past the bound, one watch of all")
	w.watch("p", vc, all)
	watching(1, "the same tasks again")
	if n := h.sim.ReleaseTasks(); n != len(all) {
		t.Fatalf("released %d tasks, want %d", n, len(all))
	}
	for range all {
		woken("a held task ended")
	}
	watching(0, "every task ended")
	if n := collectors() - before; n != 1 {
		t.Fatalf("%d property collectors for the watch of all, want 1", n)
	}

	// A pass without a session ends every watch of the pool at once.
	off, err := vc.PowerOff(h.ctx, ref("day-2"))
	h.must(err)
	w.watch("p", vc, []string{off})
	on, err := vc.PowerOn(h.ctx, ref("night-1"), "")
	h.must(err)
	w.watch("p", vc, []string{off, on})
	watching(2, "two batches")
	w.watch("p", nil, nil)
	watching(0, "a pass without a session")
	h.sim.ReleaseTasks()
}
