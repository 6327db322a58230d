//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/replay"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/internal/trace"
	"github.com/gpupool/gpupool/test/localenv"
)

// TestDemandBringsNightInOnLocalCluster runs the demand demo (make demo-demand): the
// schedule wants day for hours, a training Job submitted by day waits Unschedulable, demand
// brings night in early (reason Demand, the pod named as the cause), the Job runs on the
// night node and completes, and day, the default layout, comes back once night has been idle.
// It checks each step from the API and logs the latency from the demand crossing its
// threshold to the first drain.
func TestDemandBringsNightInOnLocalCluster(t *testing.T) {
	ctx, env := upDayNight(t)
	res, err := localenv.RunDemandDemo(ctx, env, os.Stdout, 12*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkDemandCycle(ctx, t, env, res)
}

// TestDemandClaimBringsNightInOnLocalCluster is TestDemandBringsNightInOnLocalCluster with
// Dynamic Resource Allocation: the pool names the simulated DRA driver (readiness.dra),
// the training Job's pod asks for its vGPU through a ResourceClaimTemplate, and the night
// node is ready for work once the driver's ResourceSlice publishes its device; the
// scheduler allocates the claim there.
func TestDemandClaimBringsNightInOnLocalCluster(t *testing.T) {
	ctx, env := upDayNight(t)
	res, err := localenv.RunDemandClaimDemo(ctx, env, os.Stdout, 12*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	checkDemandCycle(ctx, t, env, res)
}

// upDayNight starts the local environment on the day/night inventory, taken down when
// the test ends.
func upDayNight(t *testing.T) (context.Context, *localenv.Env) {
	return upInventory(t, filepath.Join("test", "vgpusim", "testdata", "daynight.yaml"))
}

// upInventory starts the local environment on an inventory (a path under the repository
// root), taken down when the test ends.
func upInventory(t *testing.T, inventory string) (context.Context, *localenv.Env) {
	root := testenv.Root()
	dir := t.TempDir()
	opts := localenv.Options{Dir: dir, Root: root, BinDir: filepath.Join(root, "bin"), ManagerEnv: cacheMutationDetector,
		Inventory: filepath.Join(root, inventory), Log: os.Stdout,
		Image: filepath.Join(root, "dist", "image")}
	ctx := context.Background()
	env, err := localenv.Up(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = localenv.Down(opts) })
	diagnoseOnFailure(t, ctx, env)
	return watchManager(t, ctx, dir), env
}

// diagnoseOnFailure has a failed test print the cluster's events and the tails of the
// environment's logs named (the manager's when none is: localenv.Env.Diagnose). Called
// after the test's Down is registered, it runs before it: the environment and its state
// folder go with the test.
func diagnoseOnFailure(t *testing.T, ctx context.Context, env *localenv.Env, logs ...string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			env.Diagnose(ctx, os.Stdout, logs...)
		}
	})
}

// checkDemandCycle checks what the demand demo saw: the pod pending and counted, night
// brought in by demand, the Job run on the night node, day back, and the latency.
func checkDemandCycle(ctx context.Context, t *testing.T, env *localenv.Env, res *localenv.DemandResult) {
	t.Helper()
	if got := strings.Join(res.Layouts, ","); got != "day,night,day" {
		t.Errorf("layouts %s, want day,night,day", got)
	}
	if res.TrainingPod == "" {
		t.Fatal("no training pod seen")
	}
	pod := localenv.DemoNamespace + "/" + res.TrainingPod

	// 1. Pending in the day layout, for the scheduler's reason, and counted as demand.
	if res.PendingReason != corev1.PodReasonUnschedulable {
		t.Errorf("training pod pending with reason %q (%s), want Unschedulable", res.PendingReason, res.PendingMessage)
	}
	if d := res.PendingDemand; d.PendingPods != 1 || d.PendingGPUs != 1 || !slices.ContainsFunc(d.Pods, func(s string) bool { return strings.Contains(s, pod) }) || d.PendingSince == nil {
		t.Errorf("status.demand.layouts[night] while pending = %+v, want 1 pod (%s) requesting 1 GPU, pendingSince set", d, pod)
	}
	if !strings.Contains(res.WaitMessage, "demand acts at") {
		t.Errorf("status.demand.message while waiting for `for` = %q, want it to say when demand acts", res.WaitMessage)
	}

	// 2. Night brought in early by demand, the pod named as the cause.
	if res.DesiredNight != gpupoolv1.DesiredByDemand {
		t.Errorf("night desired by %q, want Demand", res.DesiredNight)
	}
	if tr := res.TransitionToNight; tr == nil || tr.Reason != gpupoolv1.DesiredByDemand || !strings.Contains(tr.Cause, pod) {
		t.Errorf("transition to night %+v, want reason Demand and a cause naming %s", tr, pod)
	}
	if h := res.HistoryToNight; h == nil || h.Reason != gpupoolv1.DesiredByDemand || h.Result != gpupoolv1.TransitionCompleted || !strings.Contains(h.Message, res.TrainingPod) {
		t.Errorf("history of the switch to night %+v, want a completed demand switch naming %s", h, pod)
	}

	// 3. The Job ran on the night node and completed.
	if res.TrainingNode != "gpu-night-1" || !res.TrainingRan || !res.TrainingSucceeded {
		t.Errorf("training ran on %q (seen running %v, succeeded %v), want gpu-night-1", res.TrainingNode, res.TrainingRan, res.TrainingSucceeded)
	}
	var p corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: localenv.DemoNamespace, Name: res.TrainingPod}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodSucceeded || p.Spec.NodeName != "gpu-night-1" {
		t.Errorf("training pod: phase %s on %q, want Succeeded on gpu-night-1", p.Status.Phase, p.Spec.NodeName)
	}
	// The pod's events woke the pool, whichever way it asks for its GPU: demand counted it
	// within seconds of its creation, not at the next periodic pass (minutes). One clock:
	// the API server and the operator run on this machine.
	if ps := res.PendingDemand.PendingSince; ps != nil && ps.Sub(p.CreationTimestamp.Time) > 30*time.Second {
		t.Errorf("demand counted the training pod from %s, %s after it was created: its events did not wake the pool", ps, ps.Sub(p.CreationTimestamp.Time))
	}

	// 4. Day back, the default layout outside the (distant) night window, once night was
	// idle and past its dwell.
	checkDayBackByDefault(ctx, t, env, res)
	checkDemandReport(t, res, &p)
	checkDemandReplay(t, res)
	for _, name := range []string{"gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4", "gpu-night-1"} {
		var n corev1.Node
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "gpu-day-") {
			if n.Labels[gpupoolv1.LabelLayout] != "day" || n.Labels["lab.example/workload"] != "inference" || n.Spec.Unschedulable {
				t.Errorf("node %s: labels %v unschedulable %v, want day labels and schedulable", name, n.Labels, n.Spec.Unschedulable)
			}
		} else if n.Labels[gpupoolv1.LabelParked] != "true" {
			t.Errorf("node %s: labels %v, want parked", name, n.Labels)
		}
	}
	if res.MinReadyInference < 3 {
		t.Errorf("only %d inference pods were Ready at one point: the PDB (maxUnavailable 1 of 4) was violated", res.MinReadyInference)
	}

	// 5. The latency from the threshold (pendingSince + for) to the first drain. The
	// operator decides on pendingSince as the API keeps it (to the second), so the first
	// cordon cannot come before the threshold; the bound above is loose for a loaded
	// two-core machine.
	if res.FirstCordon.IsZero() || res.Threshold.IsZero() {
		t.Fatalf("no latency measured: threshold %s, first cordon %s", res.Threshold, res.FirstCordon)
	}
	t.Logf("latency from demand crossing its threshold to the first drain: %s (watch), %s (Cordoned event)", res.Latency, res.EventLatency)
	if res.Latency < -time.Second || res.Latency > time.Minute {
		t.Errorf("latency from the threshold to the first cordon %s, want within [0, 1m]", res.Latency)
	}
}

// checkDayBackByDefault: day wanted again by Default, after a completed night -> day
// switch that came no sooner than night's minDwell, and the pool on day by Default.
func checkDayBackByDefault(ctx context.Context, t *testing.T, env *localenv.Env, res *localenv.DemandResult) {
	t.Helper()
	if res.DesiredDayBack != gpupoolv1.DesiredByDefault {
		t.Errorf("day wanted again by %q, want Default", res.DesiredDayBack)
	}
	if h := res.HistoryToDay; h == nil || h.From != "night" || h.Result != gpupoolv1.TransitionCompleted {
		t.Errorf("history of the switch back to day %+v, want a completed night -> day", h)
	} else if hn := res.HistoryToNight; hn != nil && h.StartTime.Sub(hn.EndTime.Time) < localenv.DemandMinDwell-time.Second {
		t.Errorf("day came back %s after night arrived, before night's minDwell %s", h.StartTime.Sub(hn.EndTime.Time), localenv.DemandMinDwell)
	}
	var pool gpupoolv1.GPUPoolProfile
	if err := env.Client.Get(ctx, client.ObjectKey{Name: localenv.DemoPool}, &pool); err != nil {
		t.Fatal(err)
	}
	if pool.Status.ActiveLayout != "day" || pool.Status.DesiredReason != gpupoolv1.DesiredByDefault {
		t.Errorf("after the demo: active %s, desired %s by %s, want day by Default", pool.Status.ActiveLayout, pool.Status.DesiredLayout, pool.Status.DesiredReason)
	}
}

// checkDemandReport (issue 39, accounting on a real cluster): the manager's accounting of
// the demo's days has the training pod's tenant (its namespace) allocated about as long
// as the pod ran on the night node's one GPU (within the pass that saw it end), both
// layouts offered, and the two switches' offline capacity at most the one physical
// GPU for the transitions' lengths in history.
func checkDemandReport(t *testing.T, res *localenv.DemandResult, training *corev1.Pod) {
	t.Helper()
	r := res.Report
	if r == nil {
		t.Fatal("the demo printed no accounting report")
	}
	var ran time.Duration
	for _, cs := range training.Status.ContainerStatuses {
		if term := cs.State.Terminated; term != nil && training.Status.StartTime != nil {
			ran = max(ran, term.FinishedAt.Sub(training.Status.StartTime.Time))
		}
	}
	allocated := 0.0
	for _, tf := range r.Tenants {
		if tf.Tenant == localenv.DemoNamespace {
			allocated = tf.Allocated * 3600
		}
	}
	// The same whether the pod asks for nvidia.com/gpu or for a device through a claim.
	if ran <= 0 || allocated < 0.5*ran.Seconds() || allocated > ran.Seconds()+15 {
		t.Errorf("tenant %s allocated %.0f GPU-seconds; its training pod ran %s on one GPU (tenants %+v)", localenv.DemoNamespace, allocated, ran, r.Tenants)
	}
	offered := map[string]float64{}
	for _, l := range r.Layouts {
		offered[l.Layout] += l.Offered
	}
	if offered["day"] <= 0 || offered["night"] <= 0 {
		t.Errorf("offered by layout %v, want day and night", offered)
	}
	span := 0.0
	for _, h := range []*gpupoolv1.TransitionRecord{res.HistoryToNight, res.HistoryToDay} {
		if h != nil {
			span += h.EndTime.Sub(h.StartTime.Time).Seconds()
		}
	}
	if sw := r.Totals.Switching * 3600; sw <= 0 || sw > span+30 {
		t.Errorf("switching %.0f GPU-seconds, want more than 0 and at most the two transitions' %.0f s on the one GPU (plus a pass)", sw, span)
	}
}

// checkDemandReplay (issue 39, fidelity): kubectl gpupool record, run through the demo,
// recorded the training pod (arrival, start, succeeded end, the night layout as the one
// that could take it) and the two switches as the pool's history has them; replayed
// offline under the live spec (kubectl gpupool simulate's replay), the trace gives the
// same sequence of switches, each starting within 30 s of the recorded one.
func checkDemandReplay(t *testing.T, res *localenv.DemandResult) {
	t.Helper()
	tr, got := res.Trace, res.Replayed
	if tr == nil || got == nil {
		t.Fatal("the demo recorded or replayed nothing")
	}
	kinds := map[string]string{}
	for _, ev := range tr.Events {
		if ev.Pod == localenv.DemoNamespace+"/"+res.TrainingPod {
			kinds[ev.Kind] = ev.Outcome
			if ev.Kind == trace.Arrive && (!slices.Equal(ev.Layouts, []string{"night"}) || ev.GPUs != 1 || !ev.Job || !ev.Counts) {
				t.Errorf("the training pod's arrival %+v, want 1 GPU, night only, a Job's pod demand counts", ev)
			}
		}
	}
	if _, ok := kinds[trace.Start]; !ok || kinds[trace.End] != trace.Succeeded {
		t.Errorf("the training pod's events %v, want an arrival, a start and a succeeded end", kinds)
	}
	recorded := replay.Recorded(tr)
	var history []*gpupoolv1.TransitionRecord
	for _, h := range []*gpupoolv1.TransitionRecord{res.HistoryToNight, res.HistoryToDay} {
		if h != nil {
			history = append(history, h)
		}
	}
	if len(recorded) != len(history) {
		t.Fatalf("recorded %d switches %+v; the history has %d", len(recorded), recorded, len(history))
	}
	for i, h := range history {
		// One clock: the recorder, the API server and the operator run on this machine.
		if d := recorded[i].Start.Sub(h.StartTime.Time); recorded[i].To != h.To || d < -time.Second || d > 5*time.Second {
			t.Errorf("recorded switch %d: to %s at %s; history: to %s at %s", i, recorded[i].To, recorded[i].Start, h.To, h.StartTime)
		}
	}
	if at, g, r, diverged := replay.Divergence(got.Switches, recorded, 30*time.Second); diverged {
		t.Errorf("the replay departs from the recording at %s: replayed %+v, recorded %+v (all replayed %+v)", at, g, r, got.Switches)
	}
	t.Logf("recorded switches %+v; replayed %+v; switch times learned %v", recorded, got.Switches, got.SwitchTimes)
}
