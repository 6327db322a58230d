package vgpusim_test

import (
	"context"
	"testing"
	"time"
)

// TestTaskRecords: a delayed task is logged with its method, VM and start while it
// runs, and with a finish no earlier than its start once it ended (the simulator's
// clock, the one vCenter's task info carries).
func TestTaskRecords(t *testing.T) {
	sim := startSim(t, "daynight.yaml")
	c := connect(t, sim)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vm := vmObj(t, sim, c, "gpu-day-1")
	sim.SetTaskDelay("PowerOffVM_Task", 50*time.Millisecond)
	tk, err := vm.PowerOff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs := sim.TaskRecords()
	if len(rs) != 1 || rs[0].Method != "PowerOffVM_Task" || rs[0].VMName != "gpu-day-1" || rs[0].VM != vm.Reference().Value ||
		rs[0].Task != tk.Reference().Value || rs[0].Start.IsZero() || !rs[0].Finish.IsZero() {
		t.Fatalf("while running: %+v", rs)
	}
	if err := tk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	rs = sim.TaskRecords()
	if len(rs) != 1 || rs[0].Finish.Before(rs[0].Start) || rs[0].Finish.IsZero() || rs[0].Failed {
		t.Fatalf("after it ended: %+v", rs)
	}
}
