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
