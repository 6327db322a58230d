package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/test/cluster"
)

// until reconciles (letting the world settle and the clock move by the requeue delay,
// at most 10s) until cond holds, and fails the test after maxIter passes.
func (h *harness) until(name string, maxIter int, what string, cond func(*gpupoolv1.GPUPoolProfile) bool) *gpupoolv1.GPUPoolProfile {
	h.t.Helper()
	for range maxIter {
		res := h.reconcile(name)
		h.settle()
		if p := h.get(name); cond(p) {
			return p
		}
		h.clock.Step(testworld.Step(res))
	}
	p := h.get(name)
	h.t.Fatalf("%s: not reached after %d passes: workers %+v, %s", what, maxIter, p.Status.Workers, testworld.Conditions(p))
	return nil
}

func (h *harness) patchNodeObj(vm string, change func(*corev1.Node)) {
	h.t.Helper()
	n := h.node(vm)
	before := n.DeepCopy()
	change(n)
	h.must(k8s.Patch(h.ctx, n, client.MergeFrom(before)))
}

// TestNodeWaitsForItsGPUs: a powered-on VM's node that is Ready but whose device plugin
// has not advertised nvidia.com/gpu yet is neither relabelled nor uncordoned; the worker
// says what it waits for, the node's state is pending, and past nodeReadyTimeout the
// pool is Degraded naming the resource and the state is failed. Once the GPU shows up
// the switch completes. kwok withdraws the GPUs of parked VMs.
func TestNodeWaitsForItsGPUs(t *testing.T) {
	h := newHarness(t, "gpu-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	for _, vm := range []string{"day-1", "night-1"} {
		if got, want := cluster.AdvertisedGPUs(h.node(vm)), map[string]string{"day-1": "1", "night-1": "0"}[vm]; got != want {
			t.Errorf("node %s advertises %s nvidia.com/gpu, want %s", vm, got, want)
		}
	}
	if got := h.node("day-1").Labels[LabelState]; got != StateReady {
		t.Errorf("day-1 state %q, want ready", got)
	}
	// The device plugin of night-1 will take an hour (real time) to register.
	h.patchNodeObj("night-1", func(n *corev1.Node) { n.Annotations[cluster.AnnotationSimGPUDelay] = "1h" })

	h.clock.SetTime(monday1950)
	p := h.until(pool.Name, 60, "night-1 waiting for its GPU", func(p *gpupoolv1.GPUPoolProfile) bool {
		w := execute.FindWorker(p, h.prefix+"night-1")
		return w != nil && w.Step == gpupoolv1.StepWaitNodeReady && strings.Contains(w.Message, "nvidia.com/gpu (allocatable 0 of 1)")
	})
	n := h.node("night-1")
	if !nodes.Ready(n) || n.Labels[LabelLayout] == "night" || n.Labels[LabelState] != StatePending {
		t.Errorf("night-1 node: want Ready, not relabelled, state pending: ready %v labels %v", nodes.Ready(n), n.Labels)
	}
	if got := h.node("day-1").Labels[LabelState]; got != StateParked {
		t.Errorf("day-1 state %q, want parked", got)
	}
	if c := findCondition(p, gpupoolv1.ConditionProgressing); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "WaitNodeReady") ||
		!strings.Contains(c.Message, "node "+h.prefix+"night-1 waits for nvidia.com/gpu (allocatable 0 of 1)") {
		t.Errorf("Progressing %+v, want the transition waiting for the node's nvidia.com/gpu", c)
	}

	// Past nodeReadyTimeout (10m): Degraded names what is missing, the node is failed.
	h.clock.Step(11 * time.Minute)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if c := findCondition(p, gpupoolv1.ConditionDegraded); c == nil || c.Reason != ReasonNodeNotReady || !strings.Contains(c.Message, "nvidia.com/gpu") {
		t.Errorf("Degraded %+v, want NodeNotReady naming nvidia.com/gpu", c)
	}
	if got := h.node("night-1").Labels[LabelState]; got != StateFailed {
		t.Errorf("night-1 state %q, want failed", got)
	}

	// The device plugin registers: the switch completes.
	n = h.node("night-1")
	before := n.DeepCopy()
	n.Status.Allocatable[cluster.GPUResource] = resource.MustParse("1")
	n.Status.Capacity[cluster.GPUResource] = resource.MustParse("1")
	h.must(k8s.Status().Patch(h.ctx, n, client.MergeFrom(before)))
	p = h.converge(pool.Name, "night", 30)
	h.checkNight(p)
	if got := h.node("night-1").Labels[LabelState]; got != StateReady {
		t.Errorf("night-1 state %q, want ready", got)
	}
	for _, vm := range []string{"day-1", "day-4"} {
		if n := h.node(vm); cluster.AdvertisedGPUs(n) != "0" || n.Labels[LabelState] != StateParked {
			t.Errorf("parked node %s: %s GPUs advertised, state %q; want 0 and parked", vm, cluster.AdvertisedGPUs(n), n.Labels[LabelState])
		}
	}
}

// TestReadinessLabelsAndConditions: the labels and conditions spec.readiness names are
// waited for too.
func TestReadinessLabelsAndConditions(t *testing.T) {
	h := newHarness(t, "rdy-")
	pool := h.dayNight()
	pool.Spec.Readiness.NodeLabels = map[string]string{"nvidia.com/vgpu.present": "true"}
	pool.Spec.Readiness.NodeConditions = []string{"VGPULicensed"}
	h.clock.SetTime(monday1000)
	// GPU feature discovery and a problem detector have marked the day nodes.
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		h.patchNodeObj(vm, func(n *corev1.Node) { n.Labels["nvidia.com/vgpu.present"] = "true" })
		n := h.node(vm)
		before := n.DeepCopy()
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "VGPULicensed", Status: corev1.ConditionTrue, Reason: "Licensed"})
		h.must(k8s.Status().Patch(h.ctx, n, client.MergeFrom(before)))
	}
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	h.clock.SetTime(monday1950)
	h.until(pool.Name, 60, "night-1 waiting for its label and condition", func(p *gpupoolv1.GPUPoolProfile) bool {
		w := execute.FindWorker(p, h.prefix+"night-1")
		return w != nil && w.Step == gpupoolv1.StepWaitNodeReady &&
			strings.Contains(w.Message, "label nvidia.com/vgpu.present=true (missing)") && strings.Contains(w.Message, "condition VGPULicensed=True (is missing)")
	})
	h.patchNodeObj("night-1", func(n *corev1.Node) { n.Labels["nvidia.com/vgpu.present"] = "true" })
	h.until(pool.Name, 10, "night-1 waiting for its condition only", func(p *gpupoolv1.GPUPoolProfile) bool {
		w := execute.FindWorker(p, h.prefix+"night-1")
		return w != nil && w.Step == gpupoolv1.StepWaitNodeReady && !strings.Contains(w.Message, "label") && strings.Contains(w.Message, "VGPULicensed")
	})
	n := h.node("night-1")
	before := n.DeepCopy()
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "VGPULicensed", Status: corev1.ConditionTrue, Reason: "Licensed"})
	h.must(k8s.Status().Patch(h.ctx, n, client.MergeFrom(before)))
	h.checkNight(h.converge(pool.Name, "night", 30))
}

// TestDoNotDisruptHoldsTheDrain: a pod annotated gpupool.dev/do-not-disrupt is not
// evicted; the drain waits for it and names it, until drain.timeout, then Force deletes
// it and the switch goes on.
func TestDoNotDisruptHoldsTheDrain(t *testing.T) {
	h := newHarness(t, "dnd-")
	pool := h.dayNight()
	pool.Spec.Drain.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
	pool.Spec.Drain.OnTimeout = gpupoolv1.DrainForce
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	pod := h.addPod("train-a", h.prefix+"day-1", nil)
	before := pod.DeepCopy()
	pod.Annotations = map[string]string{AnnotationDoNotDisrupt: "true"}
	h.must(k8s.Patch(h.ctx, pod, client.MergeFrom(before)))

	h.clock.SetTime(monday1950)
	start := h.clock.Now()
	p := h.until(pool.Name, 30, "day-1 drain held by its pod", func(p *gpupoolv1.GPUPoolProfile) bool {
		w := execute.FindWorker(p, h.prefix+"day-1")
		return w != nil && w.Step == gpupoolv1.StepDrainRequired && strings.Contains(w.Message, "waiting for 1 pod(s) to finish: "+h.prefix+"apps/train-a ("+AnnotationDoNotDisrupt+")")
	})
	if c := findCondition(p, gpupoolv1.ConditionProgressing); c == nil || !strings.Contains(c.Message, "train-a") {
		t.Errorf("Progressing %+v, want it to name the pod", c)
	}
	if got := h.node("day-1").Labels[LabelState]; got != StateDraining {
		t.Errorf("day-1 state %q, want draining", got)
	}
	// Within the timeout the pod stays.
	for h.clock.Since(start) < 90*time.Second {
		h.reconcile(pool.Name)
		h.clock.Step(10 * time.Second)
	}
	var got corev1.Pod
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(pod), &got))
	if got.DeletionTimestamp != nil {
		t.Fatalf("pod %s evicted within drain.timeout despite %s", pod.Name, AnnotationDoNotDisrupt)
	}
	// Past it, Force deletes it and the switch completes.
	h.checkNight(h.converge(pool.Name, "night", 60))
	if err := k8s.Get(h.ctx, client.ObjectKeyFromObject(pod), &got); !apierrors.IsNotFound(err) {
		t.Errorf("pod after the forced drain: %v", err)
	}
	containsAll(t, "events", h.events(), "DrainForced")
}

// TestDrainingSoonWarnsTheScheduler: within warnAhead (here leadTime, 10m) before the
// switch starts, the nodes it will drain carry the draining-soon taint and the time
// their drain starts; an override that cancels the switch takes it off, and drained
// nodes lose it.
func TestDrainingSoonWarnsTheScheduler(t *testing.T) {
	for _, mode := range []string{"in the pass", "past the pass"} {
		t.Run(mode, func(t *testing.T) { drainingSoonWarnsTheScheduler(t, mode) })
	}
}

// drainingSoonWarnsTheScheduler is TestDrainingSoonWarnsTheScheduler with the node marks
// written in the pass (the tests' reconciler) or past it (stateBatches, as the manager
// writes them: each pass's batch waited for before the test reads the nodes). A pass
// that wants the warning a node carries, or that the last batch wrote after the pass
// read the node, writes no warning.
func drainingSoonWarnsTheScheduler(t *testing.T, mode string) {
	h := newHarness(t, map[string]string{"in the pass": "warn-", "past the pass": "warb-"}[mode])
	log := &nodeWriteLog{}
	log.reset()
	h.client = log.wrap
	var states *stateBatches
	if mode == "past the pass" {
		states = newStateBatches(h.ctx)
		h.reconciler().states = states
	}
	reconcile := func(pool string) {
		h.reconcile(pool)
		states.idle(pool)
	}
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	states.idle(pool.Name)
	day := []string{"day-1", "day-2", "day-3", "day-4"}
	wantAt := monday1950.UTC().Format(time.RFC3339)
	check := func(when string, warned bool) {
		t.Helper()
		for _, vm := range append(day, "night-1") {
			n := h.node(vm)
			want := warned && vm != "night-1"
			if nodes.HasWarning(n, monday1950) != want || (!want && nodes.HasAnyWarning(n)) {
				t.Errorf("%s: node %s taints %v drain-at %q, want warned=%v (drain at %s)", when, vm, n.Spec.Taints, n.Annotations[AnnotationDrainAt], want, wantAt)
			}
		}
	}
	// warningWrites counts the node patches since the last reset that write a warning.
	warningWrites := func() int {
		log.mu.Lock()
		defer log.mu.Unlock()
		count := 0
		for _, ws := range log.writes {
			for _, w := range ws {
				if _, at := parsePatch(t, w.patch).Metadata.Annotations[AnnotationDrainAt]; at {
					count++
				}
			}
		}
		return count
	}
	check("10:00", false)

	h.clock.SetTime(monday1950.Add(-11 * time.Minute))
	reconcile(pool.Name)
	check("19:39", false)
	h.clock.SetTime(monday1950.Add(-10 * time.Minute))
	log.reset()
	reconcile(pool.Name)
	check("19:40", true)
	if n := warningWrites(); n != len(day) {
		t.Errorf("19:40: %d warning writes, want one per day node (%d)", n, len(day))
	}
	// The next passes, at once (their reads may come before the writes land) and later,
	// want the same warnings: no node is written for them again.
	log.reset()
	reconcile(pool.Name)
	h.clock.Step(time.Minute)
	reconcile(pool.Name)
	if n := warningWrites(); n != 0 {
		t.Errorf("19:41: %d warning writes of warnings in place, want none:\n%s", n, log)
	}
	check("19:41", true)
	if ts := h.node("day-1").Spec.Taints; !hasTaint(h.node("day-1"), TaintDrainingSoon) || func() bool {
		for _, t := range ts {
			if t.Key == TaintDrainingSoon {
				return t.Effect != corev1.TaintEffectPreferNoSchedule
			}
		}
		return true
	}() {
		t.Errorf("taints %v, want %s:PreferNoSchedule", ts, TaintDrainingSoon)
	}

	// An override keeps day: the switch is cancelled, so is the warning.
	p := h.get(pool.Name)
	p.Spec.Override = &gpupoolv1.Override{Layout: "day", Until: &metav1.Time{Time: monday1950.Add(3 * time.Hour)}}
	h.must(k8s.Update(h.ctx, p))
	reconcile(pool.Name)
	check("override", false)
	p = h.get(pool.Name)
	p.Spec.Override = nil
	h.must(k8s.Update(h.ctx, p))
	reconcile(pool.Name)
	check("override removed", true)

	// The switch starts: the nodes keep the warning while they are drained, then lose it.
	h.clock.SetTime(monday1950)
	reconcile(pool.Name)
	if n := h.node("day-1"); n.Annotations[AnnotationDrainAt] != wantAt || n.Labels[LabelState] != StateDraining {
		t.Errorf("day-1 while draining: drain-at %q state %q, want %s and draining", n.Annotations[AnnotationDrainAt], n.Labels[LabelState], wantAt)
	}
	h.settle()
	h.checkNight(h.converge(pool.Name, "night", 60))
	states.idle(pool.Name)
	check("night", false)
}

// TestJobPodsWaitCompleted drains a node (no kubelet: its pods stay as created) through
// the real eviction API: with drain.jobPods WaitCompleted a Job's pod is not evicted and
// holds the drain until it has completed; with Evict it is evicted like any pod.
func TestJobPodsWaitCompleted(t *testing.T) {
	h := newHarness(t, "job-")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.prefix + "plain"}}
	h.must(k8s.Create(h.ctx, node))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
	// Only a Ready node holds pods until they complete.
	setReady := func(st corev1.ConditionStatus) {
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
		h.must(k8s.Status().Update(h.ctx, node))
	}
	setReady(corev1.ConditionTrue)
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train-0", Namespace: h.prefix + "apps",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "5f0f2b1e-6a3c-4c1e-9d59-5d4c1c7e0002", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "c", Image: "train"}}},
	}
	h.must(k8s.Create(h.ctx, pod))
	r := h.reconciler()
	wait := gpupoolv1.DrainSpec{JobPods: gpupoolv1.JobPodsWaitCompleted}

	res, err := r.drainer().Drain(h.ctx, node, wait, h.clock.Now(), h.clock.Now(), nil)
	h.must(err)
	if res.Done || res.Evicted != 0 || len(res.Holding) != 1 || !strings.Contains(res.Message(), "waiting for 1 pod(s) to finish: "+h.prefix+"apps/train-0 (Job pod, drain.jobPods: WaitCompleted)") {
		t.Fatalf("WaitCompleted on a running Job pod: %+v (%s)", res, res.Message())
	}
	var got corev1.Pod
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(pod), &got))
	if got.DeletionTimestamp != nil {
		t.Fatal("the Job pod was evicted under WaitCompleted")
	}

	// The Job's pod completes: the drain is done, without an eviction.
	got.Status.Phase = corev1.PodSucceeded
	h.must(k8s.Status().Update(h.ctx, &got))
	// (The reconciler's client reads from the API server: the update is seen at once.)
	if res, err = r.drainer().Drain(h.ctx, node, wait, h.clock.Now(), h.clock.Now(), nil); err != nil || !res.Done {
		t.Fatalf("after the pod completed: %+v (%s), %v", res, res.Message(), err)
	}

	// Under Evict, a running Job pod is evicted.
	pod2 := pod.DeepCopy()
	pod2.Name, pod2.ResourceVersion, pod2.UID = "train-1", "", ""
	h.must(k8s.Create(h.ctx, pod2))
	res, err = r.drainer().Drain(h.ctx, node, gpupoolv1.DrainSpec{JobPods: gpupoolv1.JobPodsEvict}, h.clock.Now(), h.clock.Now(), nil)
	h.must(err)
	if res.Evicted != 1 || len(res.Holding) != 0 {
		t.Fatalf("Evict on a running Job pod: %+v (%s)", res, res.Message())
	}

	// On a node that is not Ready, WaitCompleted and do-not-disrupt hold nothing: the
	// pods are evicted (waiting would only run into drain.timeout and abort).
	setReady(corev1.ConditionUnknown)
	for i, ann := range []map[string]string{nil, {AnnotationDoNotDisrupt: "true"}} {
		p := pod.DeepCopy()
		p.Name, p.ResourceVersion, p.UID, p.Annotations = fmt.Sprintf("train-nr-%d", i), "", "", ann
		h.must(k8s.Create(h.ctx, p))
	}
	res, err = r.drainer().Drain(h.ctx, node, wait, h.clock.Now(), h.clock.Now(), nil)
	h.must(err)
	if res.Evicted != 2 || len(res.Holding) != 0 {
		t.Fatalf("WaitCompleted and do-not-disrupt on a NotReady node: %+v (%s), want both evicted", res, res.Message())
	}
}
