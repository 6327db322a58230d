//go:build e2e

package e2e

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/test/localenv"
)

// TestDemandSizedPartialSwitchOnLocalCluster runs the count demand demo (make
// demo-count-demand) on one host with two P100s, four 4Q day VMs on each: night is day
// with up to two GPUs converted to 16Q, its count sized by demand (1..2). One pending
// 1-GPU training Job brings night in with ONE GPU converted: only that GPU's four day
// VMs are parked, the other GPU's keep running (never cordoned, schedulable, their
// inference pods undisturbed), the Job runs on the one night node and completes, and
// day comes back once night is idle. Each fact is read from the API (and vCenter, for
// which GPU a VM runs on).
func TestDemandSizedPartialSwitchOnLocalCluster(t *testing.T) {
	ctx, env := upInventory(t, localenv.CountInventory)
	res, err := localenv.RunCountDemandDemo(ctx, env, os.Stdout, 12*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(res.Layouts, ","); got != "day,night,day" {
		t.Errorf("layouts %s, want day,night,day", got)
	}
	if res.TrainingPod == "" {
		t.Fatal("no training pod seen")
	}
	checkCountBringIn(t, res)
	checkPartialSwitch(t, res)
	checkCountTraining(ctx, t, env, res)
	checkCountDayBack(ctx, t, env, res)
}

// checkCountBringIn: the pod pending and counted, night brought in by demand with one
// GPU converted (the transition's count, the history's, status.activeCount).
func checkCountBringIn(t *testing.T, res *localenv.CountDemandResult) {
	t.Helper()
	pod := localenv.DemoNamespace + "/" + res.TrainingPod
	if res.PendingReason != corev1.PodReasonUnschedulable {
		t.Errorf("training pod pending with reason %q (%s), want Unschedulable", res.PendingReason, res.PendingMessage)
	}
	if d := res.PendingDemand; d.PendingPods != 1 || d.PendingGPUs != 1 || d.PendingSince == nil {
		t.Errorf("status.demand.layouts[night] while pending = %+v, want 1 pod requesting 1 GPU, pendingSince set", d)
	}
	if res.DesiredNight != gpupoolv1.DesiredByDemand {
		t.Errorf("night desired by %q, want Demand", res.DesiredNight)
	}
	if tr := res.TransitionToNight; tr == nil || tr.Reason != gpupoolv1.DesiredByDemand || tr.Count != 1 || !strings.Contains(tr.Cause, pod) {
		t.Errorf("transition to night %+v, want reason Demand, count 1 and a cause naming %s", tr, pod)
	}
	if h := res.HistoryToNight; h == nil || h.Reason != gpupoolv1.DesiredByDemand || h.Result != gpupoolv1.TransitionCompleted || h.Count != 1 {
		t.Errorf("history of the switch to night %+v, want a completed demand switch with count 1", h)
	}
	if res.ActiveCount != 1 {
		t.Errorf("status.activeCount at night %d, want 1", res.ActiveCount)
	}
	if len(res.Chosen) != 1 {
		t.Errorf("status.plan.conversion chose %v, want one GPU", res.Chosen)
	}
}

// checkPartialSwitch: exactly the day VMs of the converted GPU parked; the other GPU's
// day VMs running there, their nodes Ready, schedulable, never cordoned, their inference
// pods left where they ran.
func checkPartialSwitch(t *testing.T, res *localenv.CountDemandResult) {
	t.Helper()
	if len(res.DayGPUs) != 2 {
		t.Fatalf("by day the day VMs run on GPUs %v, want two GPUs", res.DayGPUs)
	}
	for g, vms := range res.DayGPUs {
		if len(vms) != 4 {
			t.Errorf("by day GPU %s runs %v, want four day VMs", g, vms)
		}
	}
	conv := res.ConvertedGPU
	if _, ok := res.DayGPUs[conv]; !ok {
		t.Fatalf("the Job's VM runs on GPU %q, not one of the day GPUs %v", conv, slices.Collect(maps.Keys(res.DayGPUs)))
	}
	if len(res.Chosen) == 1 && res.Chosen[0] != conv {
		t.Errorf("status.plan.conversion chose %s, but the night VM runs on %s", res.Chosen[0], conv)
	}
	var other string
	for g := range res.DayGPUs {
		if g != conv {
			other = g
		}
	}
	if !slices.Equal(res.ParkedDay, res.DayGPUs[conv]) {
		t.Errorf("day nodes parked at night %v, want exactly the converted GPU's %v", res.ParkedDay, res.DayGPUs[conv])
	}
	if !slices.Equal(res.KeptDay, res.DayGPUs[other]) {
		t.Errorf("day nodes Ready and schedulable at night %v, want the other GPU's %v", res.KeptDay, res.DayGPUs[other])
	}
	// The kept nodes stay day's, so inference keeps landing there (the training pod,
	// which selects night's label, cannot).
	for n, shape := range res.KeptShape {
		if shape != "layout=day workload=inference taints=none" {
			t.Errorf("kept node %s at night: %s, want day's labels and no taint", n, shape)
		}
	}
	for vm, g := range res.KeptVMGPUs {
		if g != other {
			t.Errorf("kept day VM %s runs on GPU %q at night, want %s", vm, g, other)
		}
	}
	if len(res.Cordoned) == 0 {
		t.Error("no day node seen cordoned: the converted GPU's day nodes were not drained")
	}
	for _, n := range res.Cordoned {
		if !slices.Contains(res.DayGPUs[conv], n) {
			t.Errorf("day node %s of the kept GPU %s was cordoned during the run", n, other)
		}
	}
	onKept := 0
	for _, node := range res.InferenceByDay {
		if slices.Contains(res.DayGPUs[other], node) {
			onKept++
		}
	}
	if len(res.InferenceUndisturbed) != onKept {
		t.Errorf("inference pods on the kept GPU's nodes by day %v: %d, of which undisturbed at night %v", res.InferenceByDay, onKept, res.InferenceUndisturbed)
	}
	if res.MinReadyInference < 3 {
		t.Errorf("only %d inference pods were Ready at one point: the PDB (maxUnavailable 1 of 4) was violated", res.MinReadyInference)
	}
	t.Logf("converted GPU %s (parked %v); kept GPU %s: %v", conv, res.ParkedDay, other, res.KeptShape)
}

// checkCountTraining: one night node, the Job run there to completion.
func checkCountTraining(ctx context.Context, t *testing.T, env *localenv.Env, res *localenv.CountDemandResult) {
	t.Helper()
	if len(res.NightNodes) != 1 || res.NightNodes[0] != res.TrainingNode || !slices.Contains(localenv.CountNightVMs, res.TrainingNode) {
		t.Errorf("night nodes Ready at night %v, training on %q; want one night node, the training's", res.NightNodes, res.TrainingNode)
	}
	if !res.TrainingRan || !res.TrainingSucceeded {
		t.Errorf("training on %s: seen running %v, succeeded %v", res.TrainingNode, res.TrainingRan, res.TrainingSucceeded)
	}
	var p corev1.Pod
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: localenv.DemoNamespace, Name: res.TrainingPod}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodSucceeded || p.Spec.NodeName != res.TrainingNode {
		t.Errorf("training pod: phase %s on %q, want Succeeded on %s", p.Status.Phase, p.Spec.NodeName, res.TrainingNode)
	}
}

// checkCountDayBack: day back by Default after night's dwell, every day node day's and
// schedulable, the night nodes parked.
func checkCountDayBack(ctx context.Context, t *testing.T, env *localenv.Env, res *localenv.CountDemandResult) {
	t.Helper()
	checkDayBackByDefault(ctx, t, env, &res.DemandResult)
	var nodes corev1.NodeList
	if err := env.Client.List(ctx, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		switch {
		case strings.HasPrefix(n.Name, "gpu-day-"):
			if n.Labels[gpupoolv1.LabelLayout] != "day" || n.Labels["lab.example/workload"] != "inference" || n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == "lab.example/training" }) {
				t.Errorf("node %s: labels %v taints %v unschedulable %v, want day's labels, not night's taint, schedulable", n.Name, n.Labels, n.Spec.Taints, n.Spec.Unschedulable)
			}
		case strings.HasPrefix(n.Name, "gpu-night-"):
			// A candidate that never ran has only the state label.
			if n.Labels[gpupoolv1.LabelParked] != "true" && n.Labels[gpupoolv1.LabelState] != "parked" {
				t.Errorf("node %s: labels %v, want parked", n.Name, n.Labels)
			}
		}
	}
}
