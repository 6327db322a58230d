package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	vimtypes "github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
)

// TestFaultMatrix runs a full day -> night -> day cycle under faults at every step
// boundary: (a) the manager restarts before every pass (a new reconciler and a new
// vSphere session); (b) every other status write of the pool fails, so that both the
// intent writes and the end-of-pass patches are lost in turn; (c) the first task of each
// vSphere operation fails in each direction; (d) the manager dies right after each
// intent is stored; (e) status writes are stored but answered with a timeout. The task
// starts run inside the pass (their intents stored by a write of their own) and, in the
// "starts behind" cases, past it (the intents stored by the pass's one status write, the
// starts then handed to execute.Starts, as the manager runs them), and in the "writes
// wait" cases with passes that leave what can be observed again unwritten for up to 5 s
// (StatusInterval, as the manager runs them: a restart or a crash loses it). It counts from
// vgpusim's call log that each operation was issued exactly once per step (besides the
// retries of the injected task failures), and that no node is left cordoned.
func TestFaultMatrix(t *testing.T) {
	cases := []struct {
		name                              string
		restart, failPatch, failVC, crash bool
		// behind: the task starts are asked past the pass, once the pass's own status
		// write stored their intents (execute.Starts, as the manager runs them).
		behind bool
		// made: a failing status write is applied before it fails (a timeout after the
		// API server stored it), rather than refused.
		made bool
		// wait: passes leave what can be observed again unwritten for up to 5 s
		// (StatusInterval, as the manager runs them).
		wait bool
	}{
		{"restart", true, false, false, false, false, false, false},
		{"status-write", false, true, false, false, false, false, false},
		{"task", false, false, true, false, false, false, false},
		{"crash", false, false, false, true, false, false, false},
		{"all", true, true, true, true, false, false, false},
		{"status-write, starts behind", false, true, false, false, true, false, false},
		{"crash, starts behind", false, false, false, true, true, false, false},
		{"all, starts behind", true, true, true, true, true, false, false},
		{"status-write made, starts behind", false, true, false, false, true, true, false},
		{"status-write, starts behind, writes wait", false, true, false, false, true, false, true},
		{"crash, starts behind, writes wait", false, false, false, true, true, false, true},
		{"restart, starts behind, writes wait", true, false, false, false, true, false, true},
		{"task, starts behind, writes wait", false, false, true, false, true, false, true},
		{"crash and task, starts behind, writes wait", false, false, true, true, true, false, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, fmt.Sprintf("fm%d-", i))
			h.restart = tc.restart
			h.startsBehind = tc.behind
			if tc.wait {
				h.statusInterval = 5 * time.Second
			}
			h.tolerateErrors = tc.failPatch
			patchFailures, writes := 0, 0
			crashed := map[string]bool{}
			h.client = func(c client.WithWatch) client.Client {
				return interceptor.NewClient(c, interceptor.Funcs{
					SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
						pool, isPool := obj.(*gpupoolv1.GPUPoolProfile)
						if !isPool || sub != "status" {
							return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
						}
						if writes++; tc.failPatch && writes%2 == 1 {
							patchFailures++
							if tc.made {
								if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
									return err
								}
								return apierrors.NewTimeoutError("injected: the write was stored, its answer lost", 0)
							}
							return apierrors.NewServiceUnavailable("injected: the API server is not available")
						}
						intent := pendingIntent(pool)
						if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil || !tc.crash || intent == "" || crashed[intent] {
							return err
						}
						// The intent is stored; the manager dies before it asks vCenter.
						crashed[intent] = true
						panic(errCrash{})
					},
				})
			}
			taskFailures := 0
			injectTasks := func() {
				if !tc.failVC {
					return
				}
				for _, m := range []string{"SuspendVM_Task", "PowerOnVM_Task"} {
					h.sim.FailTasks(m, 1, &vimtypes.GenericVmConfigFault{Reason: "injected failure"})
					taskFailures++
				}
			}

			pool := h.dayNight()
			h.clock.SetTime(monday1950)
			h.create(pool)
			injectTasks()
			h.checkNight(h.converge(pool.Name, "night", 120))
			h.clock.SetTime(tuesday0750)
			injectTasks()
			h.checkDay(h.converge(pool.Name, "day", 120))

			// 4 suspends and 1 power-on by night, 1 suspend and 4 power-ons by day.
			want := map[string]int{"SuspendVM_Task": 5, "PowerOnVM_Task": 5, "PowerOffVM_Task": 0, "ReconfigVM_Task": 0, "ShutdownGuest": 0}
			if tc.failVC {
				want["SuspendVM_Task"] += 2
				want["PowerOnVM_Task"] += 2
			}
			got := h.opCounts()
			duplicates, issued := 0, 0
			for m, n := range got {
				issued += n
				if n > want[m] {
					duplicates += n - want[m]
				}
				if n != want[m] {
					t.Errorf("%s issued %d times, want %d", m, n, want[m])
				}
			}
			adopted := testutil.ToFloat64(execute.IntentsResolved.WithLabelValues(pool.Name, "adopted"))
			notStarted := testutil.ToFloat64(execute.IntentsResolved.WithLabelValues(pool.Name, "not-started"))
			kept := tc.behind && !tc.restart && !tc.crash // the starts' answers outlive a failed status write
			switch {
			case tc.failPatch && !kept && !tc.made && adopted == 0:
				t.Error("no task was ever adopted from a recorded intent: the lost-task-id path was not exercised")
			case kept && adopted != 0:
				t.Errorf("%.0f tasks were looked for in vCenter although the starts still held their answers (a failed status write must leave them for the next pass)", adopted)
			}
			deferred := testutil.ToFloat64(statusWrites.WithLabelValues(pool.Name, "deferred"))
			switch {
			case tc.wait && deferred == 0:
				t.Error("no pass left its status write: the writes that wait were not exercised")
			case !tc.wait && deferred != 0:
				t.Errorf("%.0f passes left their status write with StatusInterval 0", deferred)
			}
			stranded := 0
			var nodes corev1.NodeList
			h.must(k8s.List(h.ctx, &nodes))
			for _, n := range nodes.Items {
				if _, ok := h.sim.VM(n.Name); ok && n.Spec.Unschedulable && n.Labels[LabelParked] != "true" {
					stranded++
					t.Errorf("node %s left cordoned", n.Name)
				}
			}
			if tc.crash && notStarted == 0 {
				t.Error("no intent was ever found without its task: the crash-after-intent path was not exercised")
			}
			t.Logf("fault matrix %-12s restarts=%d crashes=%d status-write failures=%d task failures=%d reconcile errors=%d operations issued=%d tasks adopted=%.0f intents not started=%.0f writes left=%.0f duplicates=%d stranded nodes=%d",
				tc.name, h.restarts, h.crashes, patchFailures, taskFailures, h.errors, issued, adopted, notStarted, deferred, duplicates, stranded)
		})
	}
}

// pendingIntent names the first recorded intent without a task id as VM/operation, or
// "". Each VM has each operation once per direction of the cycle.
func pendingIntent(p *gpupoolv1.GPUPoolProfile) string {
	for _, w := range p.Status.Workers {
		if t := w.Task; t != nil && t.ID == "" {
			return w.VM + "/" + t.Operation
		}
	}
	return ""
}
