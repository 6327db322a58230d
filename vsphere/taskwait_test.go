package vsphere_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpupool/gpupool/vsphere"
)

// TestWaitTasks: the wait holds while every task runs (it ends only by its context),
// ends when one task ends, and ends at once for a task that is already over.
func TestWaitTasks(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	e.do(e.c.PowerOff, "gpu-day-1")
	e.do(e.c.PowerOff, "gpu-day-2")

	e.sim.HoldTasks()
	first, err := e.c.PowerOn(e.ctx, e.ref("gpu-day-1"), "")
	if err != nil || first == "" {
		t.Fatalf("power-on: %q, %v", first, err)
	}
	second, err := e.c.PowerOn(e.ctx, e.ref("gpu-day-2"), "")
	if err != nil || second == "" {
		t.Fatalf("power-on: %q, %v", second, err)
	}
	ids := []string{first, second}

	// While both tasks are held, only the context ends the wait.
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	calls := e.sim.Calls("WaitForUpdatesEx")
	go func() { done <- e.c.WaitTasks(ctx, ids) }()
	// The first answer carries the running states; a second long poll means the wait
	// read them and went on waiting.
	for i := 0; e.sim.Calls("WaitForUpdatesEx") < calls+2; i++ {
		if i > 3000 {
			t.Fatal("the wait never polled twice")
		}
		select {
		case err := <-done:
			t.Fatalf("the wait ended (%v) while every task runs", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := wait(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait on held tasks ended with %v, want the context's end", err)
	}

	// Released, the tasks end and so does a new wait.
	go func() { done <- e.c.WaitTasks(e.ctx, ids) }()
	if n := e.sim.ReleaseTasks(); n != 2 {
		t.Fatalf("released %d tasks", n)
	}
	if err := wait(t, done); err != nil {
		t.Fatalf("wait after the tasks ended: %v", err)
	}
	if info, _ := e.c.Task(e.ctx, first); info.State != vsphere.TaskSuccess {
		t.Fatalf("first task: %+v", info)
	}

	// Over already: the first answer ends the wait.
	if err := e.c.WaitTasks(e.ctx, []string{second}); err != nil {
		t.Fatalf("wait on a finished task: %v", err)
	}
	if err := e.c.WaitTasks(e.ctx, nil); err != nil {
		t.Fatalf("wait on no task: %v", err)
	}
}

// wait receives the result of a wait, failing the test when none comes in time.
func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end")
		return nil
	}
}

// TestWatchTasks: each task is reported once as it ends, success or failure; the watch
// holds while a task runs and ends once all have ended; a task already over is reported
// at once, a task vCenter does not know fails the watch, and a cancelled watch says so.
func TestWatchTasks(t *testing.T) {
	e := newEnv(t, "daynight.yaml")
	for _, vm := range []string{"gpu-day-1", "gpu-day-2", "gpu-day-3"} {
		e.do(e.c.PowerOff, vm)
	}
	e.sim.HoldTasks()
	var ids []string
	for _, vm := range []string{"gpu-day-1", "gpu-day-2"} {
		id, err := e.c.PowerOn(e.ctx, e.ref(vm), "")
		if err != nil || id == "" {
			t.Fatalf("power-on %s: %q, %v", vm, id, err)
		}
		ids = append(ids, id)
	}
	e.sim.FailTasks("PowerOnVM_Task", 1, nil)
	failing, err := e.c.PowerOn(e.ctx, e.ref("gpu-day-3"), "")
	if err != nil || failing == "" {
		t.Fatalf("power-on gpu-day-3: %q, %v", failing, err)
	}
	ids = append(ids, failing, failing) // named twice: reported once

	type end struct {
		id string
		ok bool
	}
	ends := make(chan end, 8)
	record := func(id string, ok bool) { ends <- end{id, ok} }
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	done := make(chan error, 1)
	calls := e.sim.Calls("WaitForUpdatesEx")
	go func() { done <- e.c.WatchTasks(ctx, ids, record) }()
	for i := 0; e.sim.Calls("WaitForUpdatesEx") < calls+2; i++ {
		if i > 3000 {
			t.Fatal("the watch never polled twice")
		}
		select {
		case err := <-done:
			t.Fatalf("the watch ended (%v) while every task runs", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The injected failure ends its task at once; the held ones run on.
	if n := len(ends); n != 1 {
		t.Fatalf("%d tasks reported ended while two are held and one failed", n)
	}
	if en := <-ends; en.id != failing || en.ok {
		t.Fatalf("ended %v while held, want %s failed", en, failing)
	}
	cancel()
	if err := wait(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("watch of held tasks ended with %v, want the context's end", err)
	}

	go func() { done <- e.c.WatchTasks(e.ctx, ids, record) }()
	if n := e.sim.ReleaseTasks(); n != 2 {
		t.Fatalf("released %d tasks", n)
	}
	if err := wait(t, done); err != nil {
		t.Fatalf("watch after the tasks ended: %v", err)
	}
	close(ends)
	got := map[string]bool{}
	for en := range ends {
		if _, twice := got[en.id]; twice {
			t.Fatalf("task %s reported twice", en.id)
		}
		got[en.id] = en.ok
	}
	want := map[string]bool{ids[0]: true, ids[1]: true, failing: false}
	if len(got) != len(want) {
		t.Fatalf("ended %v, want %v", got, want)
	}
	for id, ok := range want {
		if got[id] != ok {
			t.Errorf("task %s ended ok=%v, want %v", id, got[id], ok)
		}
	}

	// Over already: reported at once.
	ends = make(chan end, 8)
	if err := e.c.WatchTasks(e.ctx, []string{ids[0]}, record); err != nil {
		t.Fatalf("watch of a finished task: %v", err)
	}
	if en := <-ends; en.id != ids[0] || !en.ok {
		t.Fatalf("ended %v, want %s ok", en, ids[0])
	}
	// A task vCenter does not know fails the watch: nothing tells how it ended.
	if err := e.c.WatchTasks(e.ctx, []string{ids[1], "task-999999"}, record); err == nil {
		t.Fatal("watch of an unknown task: no error")
	}
	if err := e.c.WatchTasks(e.ctx, nil, record); err != nil {
		t.Fatalf("watch of no task: %v", err)
	}
}
