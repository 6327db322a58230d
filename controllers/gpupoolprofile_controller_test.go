package controllers

import (
	"strings"
	"testing"
	"time"

	vimtypes "github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/test/cluster"
)

var (
	monday1000  = monday0700.Add(3 * time.Hour)
	monday1950  = monday0700.Add(12*time.Hour + 50*time.Minute) // night, 10 minutes' lead before 20:00
	tuesday0750 = monday0700.Add(24*time.Hour + 50*time.Minute) // day, 10 minutes' lead before 08:00
)

// weekZone is the zone abbreviation of the tests' week in Berlin (CET, or CEST when
// TEST_CLOCK_BASE is in summer): the week keeps one offset (testclock.Weekly), so every
// time in it is written with this one.
func weekZone() string {
	z, _ := monday0700.Zone()
	return z
}

// vSphere calls that change a VM.
var opMethods = []string{"PowerOnVM_Task", "SuspendVM_Task", "PowerOffVM_Task", "ReconfigVM_Task", "ShutdownGuest"}

func (h *harness) opCounts() map[string]int {
	out := map[string]int{}
	for _, m := range opMethods {
		out[m] = h.sim.Calls(m)
	}
	return out
}

// addPod puts a pod owned by a (notional) ReplicaSet on a node, as the scheduler would.
func (h *harness) addPod(name, node string, labels map[string]string) *corev1.Pod {
	h.t.Helper()
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps", Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "infer", UID: "d9d2b2f6-3c1e-4c54-9d59-5d4c1c7e0001", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "infer"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	h.must(k8s.Create(h.ctx, p))
	return p
}

func (h *harness) checkDay(p *gpupoolv1.GPUPoolProfile) {
	h.t.Helper()
	if p.Status.ActiveLayout != "day" || p.Status.DesiredLayout != "day" {
		h.t.Fatalf("active %q desired %q, want day", p.Status.ActiveLayout, p.Status.DesiredLayout)
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		st := h.vm(vm)
		if st.PowerState != "poweredOn" || st.Profile != "grid_p100-4q" || st.GPU != "0000:3b:00.0" {
			h.t.Errorf("VM %s: %+v, want poweredOn with grid_p100-4q on 0000:3b:00.0", vm, st)
		}
		n := h.node(vm)
		want := map[string]string{LabelPool: p.Name, LabelLayout: "day", LabelProfile: "grid_p100-4q", LabelMemoryMiB: "4096", "lab.example/workload": "inference"}
		for k, v := range want {
			if n.Labels[k] != v {
				h.t.Errorf("node %s: label %s=%q, want %q", n.Name, k, n.Labels[k], v)
			}
		}
		if _, parked := n.Labels[LabelParked]; parked || n.Spec.Unschedulable || len(gpupoolTaints(n)) != 0 || !nodes.Ready(n) {
			h.t.Errorf("node %s: want Ready, schedulable, untainted and not parked: labels %v taints %v unschedulable %v", n.Name, n.Labels, n.Spec.Taints, n.Spec.Unschedulable)
		}
	}
	if st := h.vm("night-1"); st.PowerState == "poweredOn" {
		h.t.Errorf("night-1 runs by day: %+v", st)
	}
}

func (h *harness) checkNight(p *gpupoolv1.GPUPoolProfile) {
	h.t.Helper()
	if p.Status.ActiveLayout != "night" {
		h.t.Fatalf("active %q, want night", p.Status.ActiveLayout)
	}
	st := h.vm("night-1")
	if st.PowerState != "poweredOn" || st.Profile != "grid_p100-16q" || st.GPU != "0000:3b:00.0" {
		h.t.Errorf("night-1: %+v, want poweredOn with grid_p100-16q on 0000:3b:00.0", st)
	}
	n := h.node("night-1")
	if n.Labels[LabelLayout] != "night" || n.Labels[LabelMemoryMiB] != "16384" || n.Labels["lab.example/workload"] != "training" || !nodes.Ready(n) || n.Spec.Unschedulable {
		h.t.Errorf("night node: labels %v ready %v unschedulable %v", n.Labels, nodes.Ready(n), n.Spec.Unschedulable)
	}
	if ts := gpupoolTaints(n); len(ts) != 1 || ts[0].Key != "lab.example/training" {
		h.t.Errorf("night node taints %v, want the layout's training taint", n.Spec.Taints)
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if st := h.vm(vm); st.PowerState != "suspended" || st.GPU != "" {
			h.t.Errorf("VM %s: %+v, want suspended without a GPU", vm, st)
		}
		n := h.node(vm)
		if n.Labels[LabelParked] != "true" || !n.Spec.Unschedulable || nodes.Ready(n) || !hasTaint(n, TaintParked) {
			h.t.Errorf("node %s: want parked (label, taint), cordoned and not Ready: labels %v taints %v", n.Name, n.Labels, n.Spec.Taints)
		}
		if _, has := n.Labels[LabelLayout]; has {
			h.t.Errorf("parked node %s still carries the layout label", n.Name)
		}
	}
}

// gpupoolTaints are the node's taints but those the API server and node controller
// manage (node.kubernetes.io/...): envtest has no node lifecycle controller to lift the
// not-ready taint the API server puts on new nodes.
func gpupoolTaints(n *corev1.Node) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range n.Spec.Taints {
		if !strings.HasPrefix(t.Key, "node.kubernetes.io/") {
			out = append(out, t)
		}
	}
	return out
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

func containsAll(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, g := range got {
			if strings.Contains(g, w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: nothing contains %q in %v", what, w, got)
		}
	}
}

func runDayNightDay(t *testing.T, h *harness) {
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	for i := 1; i <= 4; i++ {
		h.addPod("infer-"+string(rune('0'+i)), h.prefix+"day-"+string(rune('0'+i)), map[string]string{"app": "infer"})
	}

	// Day is wanted and day VMs run: only their nodes get labelled. No VM is touched.
	p := h.converge(pool.Name, "day", 30)
	h.checkDay(p)
	if ops := h.opCounts(); ops["PowerOnVM_Task"]+ops["SuspendVM_Task"]+ops["ReconfigVM_Task"] != 0 {
		t.Fatalf("vSphere operations while the layout was already right: %v", ops)
	}
	if p.Status.NextTransition == nil || p.Status.NextTransition.Layout != "night" || !p.Status.NextTransition.At.Time.Equal(monday1950) {
		t.Errorf("next transition %+v, want night at %s", p.Status.NextTransition, monday1950)
	}

	// Day -> night at 19:50 (20:00 minus the lead time).
	h.clock.SetTime(monday1950)
	h.steps = nil
	p = h.converge(pool.Name, "night", 60)
	h.checkNight(p)
	containsAll(t, "steps day->night", h.steps,
		"day-1:DrainRequired", "day-4:DrainRequired", "day-1:ParkRequired", "day-4:ParkRequired",
		"night-1:PowerOnRequired", "night-1:RelabelRequired")
	var pods corev1.PodList
	h.must(k8s.List(h.ctx, &pods, client.InNamespace(h.prefix+"apps")))
	if len(pods.Items) != 0 {
		t.Errorf("pods left on drained nodes: %d", len(pods.Items))
	}
	if ops := h.opCounts(); ops["SuspendVM_Task"] != 4 || ops["PowerOnVM_Task"] != 1 || ops["ReconfigVM_Task"] != 0 || ops["PowerOffVM_Task"] != 0 {
		t.Errorf("vSphere operations day->night: %v, want 4 suspends and 1 power-on", ops)
	}

	// Night -> day on Tuesday at 07:50.
	h.clock.SetTime(tuesday0750)
	h.steps = nil
	p = h.converge(pool.Name, "day", 60)
	h.checkDay(p)
	// The relabel of a day node uncordons it in the same patch: no pass is left with
	// UncordonRequired.
	containsAll(t, "steps night->day", h.steps, "night-1:DrainRequired", "night-1:ParkRequired",
		"day-1:PowerOnRequired", "day-4:PowerOnRequired", "day-1:RelabelRequired")
	for _, st := range h.steps {
		if strings.HasSuffix(st, ":"+string(gpupoolv1.StepUncordonRequired)) {
			t.Errorf("steps night->day: %s, want the uncordon done with the relabel", st)
		}
	}
	if ops := h.opCounts(); ops["SuspendVM_Task"] != 5 || ops["PowerOnVM_Task"] != 5 || ops["ReconfigVM_Task"] != 0 || ops["PowerOffVM_Task"] != 0 {
		t.Errorf("vSphere operations after day->night->day: %v, want 5 suspends and 5 power-ons, each once", ops)
	}
	if st := h.vm("night-1"); st.PowerState != "suspended" {
		t.Errorf("night-1 %+v, want suspended", st)
	}
	if c := findCondition(p, gpupoolv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready condition %+v", c)
	}
	containsAll(t, "events", h.events(), "TransitionStarted", "Cordoned", "Drained", "SuspendStarted", "SuspendSucceeded",
		"PowerOnStarted", "PowerOnSucceeded", "Relabelled", "Uncordoned", "TransitionCompleted")
}

func TestDayNightDay(t *testing.T) {
	runDayNightDay(t, newHarness(t, "cyc-"))
}

// TestRestartAtEveryStep runs the same cycle with a new reconciler and a new vSphere
// session for every reconcile, as if the operator restarted between any two steps. It
// must converge the same way, and issue each vSphere operation exactly once.
func TestRestartAtEveryStep(t *testing.T) {
	h := newHarness(t, "rst-")
	h.restart = true
	runDayNightDay(t, h)
}

func TestPDBBlocksDrainAndAbortKeepsDay(t *testing.T) {
	h := newHarness(t, "pdb-")
	pool := h.dayNight()
	pool.Spec.Drain.Timeout = &metav1.Duration{Duration: time.Minute}
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	h.blockDrain("day-1") // one pod, one must stay: no disruption allowed

	h.clock.SetTime(monday1950)
	var p *gpupoolv1.GPUPoolProfile
	for i := 0; i < 20; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		p = h.get(pool.Name)
		if p.Status.Phase == gpupoolv1.PhaseBlocked {
			break
		}
		h.clock.Step(min(res.RequeueAfter, 10*time.Second))
	}
	if p.Status.Phase != gpupoolv1.PhaseBlocked || p.Status.Transition == nil || p.Status.Transition.AbortedTime == nil {
		t.Fatalf("want an aborted transition, got phase %s transition %+v", p.Status.Phase, p.Status.Transition)
	}
	c := findCondition(p, gpupoolv1.ConditionDegraded)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonDrainAborted || !strings.Contains(c.Message, h.prefix+"apps/infer-a") {
		t.Fatalf("Degraded condition %+v, want DrainAborted naming the blocking pod", c)
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if st := h.vm(vm); st.PowerState != "poweredOn" {
			t.Errorf("VM %s %s, want it left running", vm, st.PowerState)
		}
		if n := h.node(vm); n.Spec.Unschedulable {
			t.Errorf("node %s left cordoned after the abort", n.Name)
		}
	}
	if ops := h.opCounts(); ops["SuspendVM_Task"]+ops["PowerOnVM_Task"] != 0 {
		t.Errorf("vSphere operations despite the abort: %v", ops)
	}
	// Aborted stays aborted: more passes change nothing.
	h.clock.Step(time.Minute)
	h.reconcile(pool.Name)
	if p := h.get(pool.Name); p.Status.Phase != gpupoolv1.PhaseBlocked || h.node("day-1").Spec.Unschedulable {
		t.Errorf("an aborted transition was retried without a spec change: phase %s", p.Status.Phase)
	}
	// The states say what is true now, not the aborted steps: the day VMs run and serve.
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if got := h.node(vm).Labels[LabelState]; got != StateReady {
			t.Errorf("node %s state %q after the abort, want %s", vm, got, StateReady)
		}
	}
	containsAll(t, "events", h.events(), "TransitionAborted")
	if hs := h.get(pool.Name).Status.History; len(hs) != 2 || hs[0].Result != gpupoolv1.TransitionAborted || hs[0].SlowestWorker == "" {
		t.Errorf("history %+v, want the aborted transition (once, naming the worker it waited for) after the first", hs)
	}
}

func TestAdminCordonIsKept(t *testing.T) {
	h := newHarness(t, "adm-")
	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	n := h.node("day-2")
	before := n.DeepCopy()
	n.Spec.Unschedulable = true
	h.must(k8s.Patch(h.ctx, n, client.MergeFrom(before)))
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	h.clock.SetTime(tuesday0750)
	p := h.converge(pool.Name, "day", 60)
	if !h.node("day-2").Spec.Unschedulable {
		t.Errorf("gpupool uncordoned a node an admin had cordoned")
	}
	if h.node("day-1").Spec.Unschedulable {
		t.Errorf("gpupool left its own cordon on day-1")
	}
	if p.Status.ActiveLayout != "day" {
		t.Errorf("active %q, want day", p.Status.ActiveLayout)
	}
}

func TestPowerOnFailureIsRetriedWithBackoff(t *testing.T) {
	h := newHarness(t, "pof-")
	pool := h.dayNight()
	h.sim.FailTasks("PowerOnVM_Task", 2, &vimtypes.GenericVmConfigFault{Reason: "injected failure"})
	h.clock.SetTime(monday1950)
	h.create(pool)

	sawBackoff := false
	for i := 0; i < 60 && !sawBackoff; i++ {
		res := h.reconcile(pool.Name)
		h.settle()
		p := h.get(pool.Name)
		for _, w := range p.Status.Workers {
			if w.VM == h.prefix+"night-1" && w.Attempts > 0 && w.NextRetryTime != nil {
				sawBackoff = true
				if !strings.Contains(w.Message, "GenericVmConfigFault") {
					t.Errorf("worker message %q does not carry the vSphere fault", w.Message)
				}
				if c := findCondition(p, gpupoolv1.ConditionDegraded); c == nil || c.Reason != ReasonTaskFailed {
					t.Errorf("Degraded %+v, want %s", c, ReasonTaskFailed)
				}
				if res.RequeueAfter < 5*time.Second/2 {
					t.Errorf("requeue %s after a failure, want a backoff", res.RequeueAfter)
				}
			}
		}
		h.clock.Step(min(res.RequeueAfter, 10*time.Second))
	}
	if !sawBackoff {
		t.Fatal("the failed power-on was never recorded with a backoff")
	}
	p := h.converge(pool.Name, "night", 60)
	h.checkNight(p)
	if got := h.sim.Calls("PowerOnVM_Task"); got != 3 {
		t.Errorf("PowerOnVM_Task called %d times, want 3 (2 injected failures, then success)", got)
	}
	containsAll(t, "events", h.events(), "PowerOnFailed")
	if c := findCondition(p, gpupoolv1.ConditionDegraded); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v after recovery, want False", c)
	}
}

func TestOverrideSwitchesAtOnceAndExpires(t *testing.T) {
	h := newHarness(t, "ovr-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)

	cur := h.get(pool.Name)
	until := metav1.NewTime(monday1000.Add(time.Hour))
	cur.Spec.Override = &gpupoolv1.Override{Layout: "night", Until: &until, Reason: "GPU driver maintenance"}
	h.must(k8s.Update(h.ctx, cur))
	p := h.converge(pool.Name, "night", 60)
	if p.Status.DesiredReason != gpupoolv1.DesiredByOverride {
		t.Errorf("desired reason %s, want Override", p.Status.DesiredReason)
	}
	if nt := p.Status.NextTransition; nt == nil || nt.Layout != "day" || !nt.At.Time.Equal(until.Time) {
		t.Errorf("next transition %+v, want day at the override's expiry", nt)
	}
	h.checkNight(p)

	h.clock.SetTime(until.Time)
	p = h.converge(pool.Name, "day", 60)
	if p.Status.DesiredReason != gpupoolv1.DesiredBySchedule {
		t.Errorf("desired reason %s after expiry, want Schedule", p.Status.DesiredReason)
	}
	h.checkDay(p)
}

func TestPausedStopsAllAction(t *testing.T) {
	h := newHarness(t, "pau-")
	pool := h.dayNight()
	pool.Spec.Paused = true
	h.clock.SetTime(monday1950)
	h.create(pool)
	for i := 0; i < 5; i++ {
		h.reconcile(pool.Name)
		h.clock.Step(time.Minute)
	}
	p := h.get(pool.Name)
	if p.Status.Phase != gpupoolv1.PhasePaused || p.Status.DesiredLayout != "night" {
		t.Errorf("phase %s desired %s, want Paused with night desired", p.Status.Phase, p.Status.DesiredLayout)
	}
	if c := findCondition(p, gpupoolv1.ConditionPaused); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Paused condition %+v", c)
	}
	for m, n := range h.opCounts() {
		if n != 0 {
			t.Errorf("%s called %d times while paused", m, n)
		}
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if n := h.node(vm); n.Spec.Unschedulable || n.Labels[LabelPool] != "" {
			t.Errorf("node %s touched while paused", n.Name)
		}
	}
	// Unpausing acts.
	p.Spec.Paused = false
	h.must(k8s.Update(h.ctx, p))
	h.checkNight(h.converge(pool.Name, "night", 60))
}

func TestClusterAPIMachineIsProtectedWhileParked(t *testing.T) {
	h := newHarness(t, "capi-")
	ns := h.prefix + "apps"
	infra := &unstructured.Unstructured{}
	infra.SetAPIVersion("infrastructure.cluster.x-k8s.io/v1beta1")
	infra.SetKind("VSphereMachine")
	infra.SetNamespace(ns)
	infra.SetName("day-1")
	h.must(k8s.Create(h.ctx, infra))
	m := h.machineFor("day-1", "infrastructure.cluster.x-k8s.io", "VSphereMachine")

	annotations := func() (machine, infraMachine map[string]string) {
		var gm clusterv1.Machine
		h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(m), &gm))
		gi := infra.DeepCopy()
		h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(infra), gi))
		return gm.Annotations, gi.GetAnnotations()
	}

	pool := h.dayNight()
	h.clock.SetTime(monday1950)
	h.create(pool)
	h.converge(pool.Name, "night", 60)
	ma, ia := annotations()
	if _, ok := ma[clusterv1.MachineSkipRemediationAnnotation]; !ok {
		t.Errorf("parked node's Machine lacks %s: %v", clusterv1.MachineSkipRemediationAnnotation, ma)
	}
	if _, ok := ia[clusterv1.PausedAnnotation]; !ok {
		t.Errorf("parked node's VSphereMachine lacks %s: %v", clusterv1.PausedAnnotation, ia)
	}

	h.clock.SetTime(tuesday0750)
	h.converge(pool.Name, "day", 60)
	ma, ia = annotations()
	if _, ok := ma[clusterv1.MachineSkipRemediationAnnotation]; ok {
		t.Errorf("Machine keeps %s after its node came back: %v", clusterv1.MachineSkipRemediationAnnotation, ma)
	}
	if _, ok := ia[clusterv1.PausedAnnotation]; ok {
		t.Errorf("VSphereMachine stays paused after its node came back: %v", ia)
	}

	// Park again, then delete the pool: the running nodes are left as gpupool found
	// them; the parked ones keep their protection, so that no MachineHealthCheck
	// replaces a VM that is parked on purpose.
	h.clock.SetTime(tuesday0750.Add(12 * time.Hour))
	h.converge(pool.Name, "night", 60)
	if ma, _ = annotations(); !hasKey(ma, clusterv1.MachineSkipRemediationAnnotation) {
		t.Fatalf("Machine not protected on the second night: %v", ma)
	}
	vmsBefore := map[string]string{}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4", "night-1"} {
		vmsBefore[vm] = h.vm(vm).PowerState
	}
	h.must(k8s.Delete(h.ctx, h.get(pool.Name)))
	h.reconcile(pool.Name)
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: pool.Name}, &gpupoolv1.GPUPoolProfile{}); err == nil {
		t.Fatal("pool still exists after its finalizer ran")
	}
	ma, ia = annotations()
	if !hasKey(ma, clusterv1.MachineSkipRemediationAnnotation) || !hasKey(ia, clusterv1.PausedAnnotation) {
		t.Errorf("deleting the pool lifted the protection of parked day-1: Machine %v, VSphereMachine %v", ma, ia)
	}
	for vm, state := range vmsBefore {
		if got := h.vm(vm).PowerState; got != state {
			t.Errorf("VM %s went from %s to %s when the pool was deleted; VMs must be left as they are", vm, state, got)
		}
		n := h.node(vm)
		h.noMarks("pool deleted", vm)
		if vm != "night-1" {
			if n.Labels[LabelParked] != "true" || !hasTaint(n, TaintParked) {
				t.Errorf("parked node %s lost its parked label or taint when the pool was deleted: %v %v", n.Name, n.Labels, n.Spec.Taints)
			}
			continue
		}
		for k := range n.Labels {
			if strings.HasPrefix(k, gpupoolv1.KeyPrefix+"/") {
				t.Errorf("node %s keeps label %s", n.Name, k)
			}
		}
		for k := range n.Annotations {
			if strings.HasPrefix(k, gpupoolv1.KeyPrefix+"/") && !strings.HasPrefix(k, cluster.SimKeyPrefix) { // the simulator's, not gpupool's
				t.Errorf("node %s keeps annotation %s", n.Name, k)
			}
		}
		if ts := gpupoolTaints(n); len(ts) != 0 {
			t.Errorf("node %s keeps taints %v", n.Name, ts)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// TestRepairIsNotATransition: a label lost on a node of the running layout is put back
// without a transition (no TransitionStarted, the phase stays Steady).
func TestRepairIsNotATransition(t *testing.T) {
	h := newHarness(t, "rep-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	_ = h.events()

	n := h.node("day-3")
	before := n.DeepCopy()
	delete(n.Labels, "lab.example/workload")
	h.must(k8s.Patch(h.ctx, n, client.MergeFrom(before)))
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if p.Status.Phase != gpupoolv1.PhaseSteady || p.Status.Transition != nil {
		t.Errorf("phase %s transition %+v while repairing a label, want Steady and no transition", p.Status.Phase, p.Status.Transition)
	}
	if got := h.node("day-3").Labels["lab.example/workload"]; got != "inference" {
		t.Errorf("label not repaired: %q", got)
	}
	for _, e := range h.events() {
		if strings.Contains(e, "TransitionStarted") {
			t.Errorf("a repair was reported as a transition: %s", e)
		}
	}
	p = h.converge(pool.Name, "day", 5)
	if c := findCondition(p, gpupoolv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v after the repair", c)
	}
}

// TestPreviewChangesNothing: the preview shows the night switch's steps and touches
// neither VMs nor nodes nor the pool's status.
func TestPreviewChangesNothing(t *testing.T) {
	h := newHarness(t, "prv-")
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	h.converge(pool.Name, "day", 30)
	before := h.get(pool.Name)
	calls := h.opCounts()

	pv, err := h.reconciler().Preview(h.ctx, before, monday1950, "")
	if err != nil {
		t.Fatal(err)
	}
	if pv.Decision.Layout != "night" {
		t.Fatalf("preview at 19:50 wants %s, want night", pv.Decision.Layout)
	}
	out := pv.Plan.String()
	for _, want := range []string{"DrainRequired", "ParkRequired", "prv-day-1", "PowerOnRequired", "prv-night-1", "grid_p100-16q"} {
		if !strings.Contains(out, want) {
			t.Errorf("preview lacks %q:\n%s", want, out)
		}
	}
	if got := h.opCounts(); !equalCounts(got, calls) {
		t.Errorf("the preview called vSphere operations: %v -> %v", calls, got)
	}
	after := h.get(pool.Name)
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the preview changed the pool")
	}
	for _, vm := range []string{"day-1", "day-2", "day-3", "day-4"} {
		if n := h.node(vm); n.Spec.Unschedulable {
			t.Errorf("the preview cordoned %s", n.Name)
		}
	}
	if _, err := h.reconciler().Preview(h.ctx, before, monday1000, "weekend"); err == nil {
		t.Error("preview of an unknown layout succeeded")
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
