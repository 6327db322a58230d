package controllers

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

func readyNode(gpus string, labels map[string]string, conds ...corev1.NodeCondition) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
	n.Status.Conditions = append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, conds...)
	if gpus != "" {
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(gpus)}
	}
	return n
}

func TestReadinessGaps(t *testing.T) {
	str := func(s string) *string { return &s }
	lic := map[string]string{"nvidia.com/vgpu.present": "true"}
	notReady := readyNode("1", nil)
	notReady.Status.Conditions[0].Status = corev1.ConditionUnknown
	cases := []struct {
		name string
		node *corev1.Node
		spec gpupoolv1.ReadinessSpec
		gpus int64
		want []string
	}{
		{"ready with its GPU", readyNode("1", nil), gpupoolv1.ReadinessSpec{}, 1, nil},
		{"more GPUs than needed", readyNode("2", nil), gpupoolv1.ReadinessSpec{}, 1, nil},
		{"no device plugin yet", readyNode("", nil), gpupoolv1.ReadinessSpec{}, 1, []string{"nvidia.com/gpu (allocatable 0 of 1)"}},
		{"plugin gone (0)", readyNode("0", nil), gpupoolv1.ReadinessSpec{}, 1, []string{"nvidia.com/gpu (allocatable 0 of 1)"}},
		{"fewer than the VM's vGPUs", readyNode("1", nil), gpupoolv1.ReadinessSpec{}, 2, []string{"nvidia.com/gpu (allocatable 1 of 2)"}},
		{"not Ready", notReady, gpupoolv1.ReadinessSpec{}, 1, []string{"Ready"}},
		{"other resource", readyNode("1", nil), gpupoolv1.ReadinessSpec{GPUResource: str("example.com/vgpu")}, 1, []string{"example.com/vgpu (allocatable 0 of 1)"}},
		{"GPU wait off", readyNode("", nil), gpupoolv1.ReadinessSpec{GPUResource: str("")}, 1, nil},
		{"label missing", readyNode("1", nil), gpupoolv1.ReadinessSpec{NodeLabels: lic}, 1, []string{"label nvidia.com/vgpu.present=true (missing)"}},
		{"label wrong", readyNode("1", map[string]string{"nvidia.com/vgpu.present": "false"}), gpupoolv1.ReadinessSpec{NodeLabels: lic}, 1, []string{`label nvidia.com/vgpu.present=true (is "false")`}},
		{"label there", readyNode("1", lic), gpupoolv1.ReadinessSpec{NodeLabels: lic}, 1, nil},
		{"condition missing", readyNode("1", nil), gpupoolv1.ReadinessSpec{NodeConditions: []string{"VGPULicensed"}}, 1, []string{"condition VGPULicensed=True (is missing)"}},
		{"condition false", readyNode("1", nil, corev1.NodeCondition{Type: "VGPULicensed", Status: corev1.ConditionFalse}), gpupoolv1.ReadinessSpec{NodeConditions: []string{"VGPULicensed"}}, 1, []string{"condition VGPULicensed=True (is False)"}},
		{"condition true", readyNode("1", nil, corev1.NodeCondition{Type: "VGPULicensed", Status: corev1.ConditionTrue}), gpupoolv1.ReadinessSpec{NodeConditions: []string{"VGPULicensed"}}, 1, nil},
		{"everything missing, in order", readyNode("", nil), gpupoolv1.ReadinessSpec{NodeLabels: map[string]string{"b": "1", "a": "1"}, NodeConditions: []string{"X"}}, 1,
			[]string{"nvidia.com/gpu (allocatable 0 of 1)", "label a=1 (missing)", "label b=1 (missing)", "condition X=True (is missing)"}},
		{"no node", nil, gpupoolv1.ReadinessSpec{}, 1, []string{"node not registered"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := readinessGaps(c.node, c.spec, gpuWant{count: c.gpus}); !reflect.DeepEqual(got, c.want) {
				t.Errorf("readinessGaps = %q, want %q", got, c.want)
			}
		})
	}
	for vgpus, want := range map[int32]int64{0: 1, 1: 1, 2: 2, 16: 16} {
		if got := expectedGPUs(gpupoolv1.Worker{VM: "x", VGPUs: vgpus}); got != want {
			t.Errorf("expectedGPUs(vgpus %d) = %d, want %d", vgpus, got, want)
		}
	}
}

// TestNodeStateValue covers every step, in and out of the layout, on and off, failed
// or not: the label has exactly one value for each, and failed wins.
func TestNodeStateValue(t *testing.T) {
	steps := []gpupoolv1.Step{gpupoolv1.StepNone, gpupoolv1.StepDrainRequired, gpupoolv1.StepParkRequired, gpupoolv1.StepPowerOffRequired,
		gpupoolv1.StepReconfigureRequired, gpupoolv1.StepPowerOnRequired, gpupoolv1.StepWaitNodeReady, gpupoolv1.StepRelabelRequired, gpupoolv1.StepUncordonRequired}
	want := func(f stateFacts) string {
		switch {
		case f.Failed:
			return StateFailed
		case f.Aborted && f.PoweredOn && f.NodeReady:
			return StateReady
		case f.Aborted && f.PoweredOn:
			return StateFailed
		case f.Aborted:
			return StateParked // whatever the stale step says: nothing moves
		case f.Step == gpupoolv1.StepDrainRequired:
			return StateDraining
		case f.Step == gpupoolv1.StepParkRequired:
			return StateParked
		case f.Step == gpupoolv1.StepPowerOffRequired:
			if f.InLayout {
				return StateReconfiguring
			}
			return StateParked
		case f.Step == gpupoolv1.StepReconfigureRequired, f.Step == gpupoolv1.StepPowerOnRequired:
			return StateReconfiguring
		case f.Step != gpupoolv1.StepNone:
			return StatePending
		case f.PoweredOn:
			return StateReady
		}
		return StateParked
	}
	valid := map[string]bool{StatePending: true, StateDraining: true, StateParked: true, StateReconfiguring: true, StateReady: true, StateFailed: true}
	for _, step := range steps {
		for _, in := range []bool{false, true} {
			for _, on := range []bool{false, true} {
				for _, failed := range []bool{false, true} {
					for _, aborted := range []bool{false, true} {
						for _, ready := range []bool{false, true} {
							f := stateFacts{InLayout: in, PoweredOn: on, Step: step, Failed: failed, Aborted: aborted, NodeReady: ready}
							got := nodeStateValue(f)
							if got != want(f) || !valid[got] {
								t.Errorf("nodeStateValue(%+v) = %q, want %q", f, got, want(f))
							}
						}
					}
				}
			}
		}
	}
}

func TestDrainWarnings(t *testing.T) {
	at := time.Date(2026, 11, 30, 7, 50, 0, 0, time.UTC) // the switch starts (boundary 08:00 - leadTime 10m)
	next := &plan.Boundary{Layout: "day", At: at}
	earlier := at.Add(-3 * time.Minute)
	cases := []struct {
		name      string
		now       time.Time
		next      *plan.Boundary
		horizon   time.Duration
		nextD     []string
		curD      []string
		announced map[string]time.Time
		want      map[string]time.Time
	}{
		{"before the horizon", at.Add(-11 * time.Minute), next, 10 * time.Minute, []string{"a"}, nil, nil, map[string]time.Time{}},
		{"at the horizon", at.Add(-10 * time.Minute), next, 10 * time.Minute, []string{"a", "b"}, nil, nil, map[string]time.Time{"a": at, "b": at}},
		{"inside", at.Add(-time.Second), next, 10 * time.Minute, []string{"a"}, nil, nil, map[string]time.Time{"a": at}},
		{"switch started: its drains keep the time announced", at, next, 10 * time.Minute, nil, []string{"a"}, map[string]time.Time{"a": at}, map[string]time.Time{"a": at}},
		{"drain started unannounced: now", at.Add(time.Minute), nil, 10 * time.Minute, nil, []string{"a"}, nil, map[string]time.Time{"a": at.Add(time.Minute)}},
		{"drain started earlier than announced: now", earlier, nil, 10 * time.Minute, nil, []string{"a"}, map[string]time.Time{"a": at}, map[string]time.Time{"a": earlier}},
		{"drained: no warning", at.Add(time.Minute), nil, 10 * time.Minute, nil, nil, map[string]time.Time{"a": at}, map[string]time.Time{}},
		{"cancelled (no next switch)", at.Add(-time.Minute), nil, 10 * time.Minute, []string{"a"}, nil, map[string]time.Time{"a": at}, map[string]time.Time{}},
		{"warnAhead 0: none", at.Add(-time.Second), next, 0, []string{"a"}, nil, nil, map[string]time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := drainWarnings(c.now, c.next, c.horizon, c.nextD, c.curD, c.announced)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("drainWarnings = %v, want %v", got, c.want)
			}
		})
	}
}

func TestWarnAhead(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	cases := []struct {
		sc   *gpupoolv1.Schedule
		want time.Duration
	}{
		{nil, defaultWarnAhead},
		{&gpupoolv1.Schedule{}, defaultWarnAhead},
		{&gpupoolv1.Schedule{LeadTime: d(0)}, defaultWarnAhead},
		{&gpupoolv1.Schedule{LeadTime: d(20 * time.Minute)}, 20 * time.Minute},
		{&gpupoolv1.Schedule{LeadTime: d(20 * time.Minute), WarnAhead: d(time.Hour)}, time.Hour},
		{&gpupoolv1.Schedule{LeadTime: d(20 * time.Minute), WarnAhead: d(0)}, 0},
	}
	for i, c := range cases {
		if got := warnAhead(&gpupoolv1.GPUPoolProfileSpec{Schedule: c.sc}); got != c.want {
			t.Errorf("%d: warnAhead = %s, want %s", i, got, c.want)
		}
	}
}

func TestSetWarningKeepsOtherTaints(t *testing.T) {
	n := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "admin", Effect: corev1.TaintEffectNoSchedule}}}}
	at := time.Date(2026, 11, 30, 7, 50, 0, 0, time.FixedZone("CET", 3600))
	setWarning(n, at, true)
	if !hasWarning(n, at) || n.Annotations[AnnotationDrainAt] != "2026-11-30T06:50:00Z" || len(n.Spec.Taints) != 2 {
		t.Fatalf("after warning: %+v %v", n.Spec.Taints, n.Annotations)
	}
	setWarning(n, at, true) // idempotent
	if len(n.Spec.Taints) != 2 {
		t.Fatalf("warning twice: %+v", n.Spec.Taints)
	}
	setWarning(n, time.Time{}, false)
	if hasAnyWarning(n) || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "admin" {
		t.Fatalf("after removal: %+v %v", n.Spec.Taints, n.Annotations)
	}
}

func TestHoldsUntilDone(t *testing.T) {
	pod := func(owner string, ann map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: ann}}
		if owner != "" {
			yes := true
			p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "o", Controller: &yes}}
		}
		return p
	}
	dnd := map[string]string{AnnotationDoNotDisrupt: "true"}
	for _, owner := range []string{"", "Job", "ReplicaSet", "StatefulSet"} {
		for _, mode := range []gpupoolv1.DrainJobPods{"", gpupoolv1.JobPodsEvict, gpupoolv1.JobPodsWaitCompleted} {
			for _, ann := range []map[string]string{nil, dnd, {AnnotationDoNotDisrupt: "false"}} {
				for _, ready := range []bool{true, false} {
					got := holdsUntilDone(pod(owner, ann), mode, ready)
					// A NotReady node holds nothing: the pod is evicted, as before.
					wantHold := ready && (ann[AnnotationDoNotDisrupt] == "true" || (owner == "Job" && mode == gpupoolv1.JobPodsWaitCompleted))
					if (got != "") != wantHold {
						t.Errorf("owner %q, jobPods %q, annotations %v, node ready %v: holdsUntilDone = %q, want hold %v", owner, mode, ann, ready, got, wantHold)
					}
				}
			}
		}
	}
}

func TestDrainMessageNamesHeldPodsBounded(t *testing.T) {
	var held []string
	for i := range 8 {
		held = append(held, fmt.Sprintf("ns/job-%d (%s)", i, AnnotationDoNotDisrupt))
	}
	msg := drainResult{Holding: held}.message()
	if !strings.Contains(msg, "waiting for 8 pod(s) to finish: ns/job-0") || !strings.Contains(msg, "and 3 more") || strings.Contains(msg, "job-7") {
		t.Errorf("message = %q", msg)
	}
}

func TestPodChanged(t *testing.T) {
	pod := func(phase corev1.PodPhase, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: ann}, Status: corev1.PodStatus{Phase: phase}}
	}
	dnd := map[string]string{AnnotationDoNotDisrupt: "true"}
	off := map[string]string{AnnotationDoNotDisrupt: "false"}
	other := map[string]string{"x": "y"}
	phases := []corev1.PodPhase{"", corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown}
	anns := []map[string]string{nil, dnd, off, other}
	done := func(ph corev1.PodPhase) bool { return ph == corev1.PodSucceeded || ph == corev1.PodFailed }
	pred := podChanged()
	for _, po := range phases {
		for _, pn := range phases {
			for _, ao := range anns {
				for _, an := range anns {
					want := (done(pn) && !done(po)) || ao[AnnotationDoNotDisrupt] != an[AnnotationDoNotDisrupt]
					got := pred.Update(event.UpdateEvent{ObjectOld: pod(po, ao), ObjectNew: pod(pn, an)})
					if got != want {
						t.Errorf("phase %q->%q, annotations %v->%v: update passes %v, want %v", po, pn, ao, an, got, want)
					}
				}
			}
		}
	}
	if !pred.Delete(event.DeleteEvent{Object: pod(corev1.PodRunning, nil)}) || pred.Create(event.CreateEvent{Object: pod("", nil)}) {
		t.Error("deletions must pass, creations not")
	}
}

func TestWarningDue(t *testing.T) {
	at := time.Date(2026, 11, 30, 7, 50, 0, 0, time.UTC)
	next := &plan.Boundary{Layout: "day", At: at}
	h := 10 * time.Minute
	cases := []struct {
		name string
		now  time.Time
		next *plan.Boundary
		due  bool
		at   time.Time
		want bool
	}{
		{"switch under way: kept", at.Add(time.Hour), nil, true, at, true},
		{"next switch, window open: kept", at.Add(-time.Minute), next, false, at, true},
		{"next switch, at the horizon: kept", at.Add(-h), next, false, at, true},
		{"next switch, before the horizon: withdrawn", at.Add(-h - time.Second), next, false, at, false},
		{"switch time passed, none under way: withdrawn", at, next, false, at, false},
		{"announces another time: withdrawn", at.Add(-time.Minute), next, false, at.Add(time.Hour), false},
		{"no next switch: withdrawn", at.Add(-time.Minute), nil, false, at, false},
	}
	for _, c := range cases {
		if got := warningDue(c.now, c.next, h, c.due, c.at); got != c.want {
			t.Errorf("%s: warningDue = %v, want %v", c.name, got, c.want)
		}
	}
	if warningDue(at.Add(-time.Minute), next, 0, false, at) {
		t.Error("warnAhead 0: no warning stands")
	}
}

func TestMarksOf(t *testing.T) {
	node := func(name, owner, pool string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
		if owner != "" {
			n.Annotations[AnnotationMarkedBy] = owner
		}
		if pool != "" {
			n.Labels[LabelPool] = pool
		}
		return n
	}
	workers := map[string]bool{"w": true}
	cases := []struct {
		n    *corev1.Node
		want bool
	}{
		{node("x", "a", ""), true},
		{node("x", "b", ""), false},
		{node("x", "b", "a"), false}, // the owner record wins
		{node("w", "b", ""), false},  // another pool's node, even if a stale status names it
		{node("x", "", "a"), true},
		{node("x", "", "b"), false},
		{node("w", "", "b"), false},
		{node("w", "", ""), true}, // a worker's node never relabelled, marked before owners were recorded
		{node("x", "", ""), false},
	}
	for i, c := range cases {
		if got := marksOf(c.n, "a", workers); got != c.want {
			t.Errorf("%d: marksOf(%s owner %q pool %q) = %v, want %v", i, c.n.Name, c.n.Annotations[AnnotationMarkedBy], c.n.Labels[LabelPool], got, c.want)
		}
	}
}

func TestStripMarksKeepsParkedMarks(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n",
		Labels:      map[string]string{LabelState: StateParked, LabelParked: "true", LabelPool: "a"},
		Annotations: map[string]string{AnnotationMarkedBy: "a", AnnotationCordoned: "true"}}}
	n.Spec.Unschedulable = true
	setWarning(n, time.Now(), true)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: TaintParked, Effect: corev1.TaintEffectNoSchedule})
	stripMarks(n)
	if hasMarks(n) || n.Labels[LabelParked] != "true" || n.Labels[LabelPool] != "a" || !n.Spec.Unschedulable || !hasTaint(n, TaintParked) || n.Annotations[AnnotationCordoned] != "true" {
		t.Errorf("after stripMarks: labels %v annotations %v taints %v unschedulable %v", n.Labels, n.Annotations, n.Spec.Taints, n.Spec.Unschedulable)
	}
}
