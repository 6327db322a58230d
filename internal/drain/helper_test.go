package drain

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// memCluster is a Cluster over pods held in memory: evictions and deletions remove the
// pod unless refuse names it.
type memCluster struct {
	pods    []corev1.Pod
	refuse  map[string]error // by pod name: the error its eviction gets
	evicted []string
	deleted []string
}

func (m *memCluster) PodsOnNode(_ context.Context, node string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, p := range m.pods {
		if p.Spec.NodeName == node {
			out = append(out, *p.DeepCopy())
		}
	}
	return out, nil
}

func (m *memCluster) Evict(_ context.Context, p *corev1.Pod, ev *policyv1.Eviction) error {
	if ev.Name != p.Name || ev.Namespace != p.Namespace {
		return errors.New("eviction names another pod")
	}
	if err := m.refuse[p.Name]; err != nil {
		return err
	}
	m.evicted = append(m.evicted, p.Name)
	return nil
}

func (m *memCluster) Delete(_ context.Context, p *corev1.Pod, _ *int64) error {
	m.deleted = append(m.deleted, p.Name)
	return nil
}

// budget allows n evictions.
type budget struct{ n int }

func (b *budget) EvictionDone(error) {}

func (b *budget) TakeEviction() bool {
	if b.n == 0 {
		return false
	}
	b.n--
	return true
}

var t0 = time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC)

func readyNode(ready bool) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

// pod is a running pod on n1 owned by a controller of kind owner ("" for none).
func pod(name, owner string, edit ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name)},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "o", Controller: &yes}}
	}
	for _, e := range edit {
		e(&p)
	}
	return p
}

func annotated(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{k: v} }
}

func withEmptyDir(p *corev1.Pod) {
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
}

func terminating(grace int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.DeletionTimestamp = &metav1.Time{Time: t0}
		p.DeletionGracePeriodSeconds = &grace
	}
}

// pdbRefusal is the API server's answer to an eviction a PodDisruptionBudget refuses.
func pdbRefusal() error {
	err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: "DisruptionBudget", Message: "The disruption budget web needs 2 healthy pods and has 2 currently"}}
	return err
}

// TestDrainClasses: each kind of pod a drain meets, alone on a node: what the drain
// does with it, what it reports, and whether the node counts as drained.
func TestDrainClasses(t *testing.T) {
	evictEmptyDir := gpupoolv1.DrainSpec{DeleteEmptyDirData: true}
	waitJobs := gpupoolv1.DrainSpec{JobPods: gpupoolv1.JobPodsWaitCompleted}
	cases := []struct {
		name    string
		pod     corev1.Pod
		spec    gpupoolv1.DrainSpec
		notRdy  bool
		refuse  error
		evicted bool
		want    Result // Evicted and Done are checked through evicted and the lists
	}{
		{name: "ReplicaSet pod: evicted, waited for", pod: pod("web", "ReplicaSet"), evicted: true,
			want: Result{Evicted: 1, Waiting: []string{"ns/web"}}},
		{name: "DaemonSet pod: skipped", pod: pod("agent", "DaemonSet"), want: Result{Done: true}},
		{name: "mirror pod: skipped", pod: pod("static", "", annotated(corev1.MirrorPodAnnotationKey, "x")), want: Result{Done: true}},
		{name: "finished pod: skipped", pod: pod("done", "Job", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), want: Result{Done: true}},
		{name: "no controller: blocked", pod: pod("bare", ""),
			want: Result{Blocked: []string{"ns/bare has no controller and would not come back (delete it, or use drain.onTimeout: Force)"}}},
		{name: "emptyDir: blocked", pod: pod("cache", "ReplicaSet", withEmptyDir),
			want: Result{Blocked: []string{"ns/cache uses emptyDir (set spec.drain.deleteEmptyDirData: true to evict it)"}}},
		{name: "emptyDir with deleteEmptyDirData: evicted", pod: pod("cache", "ReplicaSet", withEmptyDir), spec: evictEmptyDir, evicted: true,
			want: Result{Evicted: 1, Waiting: []string{"ns/cache"}}},
		{name: "do-not-disrupt: held until done", pod: pod("train", "ReplicaSet", annotated(gpupoolv1.AnnotationDoNotDisrupt, "true")),
			want: Result{Holding: []string{"ns/train (" + gpupoolv1.AnnotationDoNotDisrupt + ")"}}},
		{name: "do-not-disrupt on a NotReady node: evicted", pod: pod("train", "ReplicaSet", annotated(gpupoolv1.AnnotationDoNotDisrupt, "true")),
			notRdy: true, evicted: true, want: Result{Evicted: 1, Waiting: []string{"ns/train"}}},
		{name: "Job pod, WaitCompleted: held", pod: pod("job", "Job"), spec: waitJobs,
			want: Result{Holding: []string{"ns/job (Job pod, drain.jobPods: WaitCompleted)"}}},
		{name: "Job pod, Evict: evicted", pod: pod("job", "Job"), evicted: true, want: Result{Evicted: 1, Waiting: []string{"ns/job"}}},
		{name: "PodDisruptionBudget refuses: blocked, names the budget", pod: pod("web", "ReplicaSet"), refuse: pdbRefusal(),
			want: Result{Blocked: []string{"ns/web (eviction refused: The disruption budget web needs 2 healthy pods and has 2 currently)"}}},
		{name: "eviction fails: blocked", pod: pod("web", "ReplicaSet"), refuse: apierrors.NewInternalError(errors.New("two budgets")),
			want: Result{Blocked: []string{"ns/web (eviction failed: two budgets)"}}},
		{name: "pod gone meanwhile: nothing left", pod: pod("web", "ReplicaSet"), refuse: apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web"),
			want: Result{Done: true}},
		{name: "terminating within its grace period: waited for", pod: pod("web", "ReplicaSet", terminating(30)),
			want: Result{Waiting: []string{"ns/web"}}},
		{name: "terminating on a NotReady node: not waited for", pod: pod("web", "ReplicaSet", terminating(30)), notRdy: true,
			want: Result{Done: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mc := &memCluster{pods: []corev1.Pod{c.pod}, refuse: map[string]error{c.pod.Name: c.refuse}}
			h := &Helper{Cluster: mc, Terminating: &TerminatingClock{}}
			got, err := h.Drain(context.Background(), readyNode(!c.notRdy), c.spec, t0, t0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Drain = %+v, want %+v", got, c.want)
			}
			if (len(mc.evicted) == 1) != c.evicted {
				t.Errorf("evicted %v, want evicted %v", mc.evicted, c.evicted)
			}
			if len(mc.deleted) > 0 {
				t.Errorf("a drain deleted %v: only ForceDelete deletes", mc.deleted)
			}
		})
	}
}

// TestTerminatingPodPastItsGrace: a terminating pod holds the drain for its grace
// period plus TerminatingMargin from when the drain first saw it, then no longer.
func TestTerminatingPodPastItsGrace(t *testing.T) {
	mc := &memCluster{pods: []corev1.Pod{pod("web", "ReplicaSet", terminating(30))}}
	h := &Helper{Cluster: mc, Terminating: &TerminatingClock{}}
	for _, c := range []struct {
		after   time.Duration
		waiting bool
	}{{0, true}, {30*time.Second + TerminatingMargin - time.Second, true}, {30*time.Second + TerminatingMargin, false}} {
		res, err := h.Drain(context.Background(), readyNode(true), gpupoolv1.DrainSpec{}, t0, t0.Add(c.after), nil)
		if err != nil {
			t.Fatal(err)
		}
		if waiting := len(res.Waiting) == 1; waiting != c.waiting || res.Done == c.waiting {
			t.Errorf("after %s: %+v (%s), want waiting %v", c.after, res, res.Message(), c.waiting)
		}
		pods, _ := mc.PodsOnNode(context.Background(), "n1")
		if h.AnyToEvict(pods, true, t0.Add(c.after)) != c.waiting {
			t.Errorf("after %s: AnyToEvict = %v, want %v", c.after, !c.waiting, c.waiting)
		}
	}
}

// TestBudgetExhausted: a drain asks for no more evictions than its budget has; the rest
// are deferred to the next pass, and the node is not drained until they are evicted.
func TestBudgetExhausted(t *testing.T) {
	mc := &memCluster{pods: []corev1.Pod{pod("a", "ReplicaSet"), pod("b", "ReplicaSet"), pod("c", "ReplicaSet"), pod("agent", "DaemonSet")}}
	h := &Helper{Cluster: mc, Terminating: &TerminatingClock{}}
	res, err := h.Drain(context.Background(), readyNode(true), gpupoolv1.DrainSpec{}, t0, t0, &budget{n: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Evicted != 1 || res.Deferred != 2 || res.Done || !reflect.DeepEqual(mc.evicted, []string{"a"}) {
		t.Errorf("Drain = %+v, evicted %v: want a evicted, b and c deferred", res, mc.evicted)
	}
	if msg := res.Message(); msg != "waiting for 1 terminating pod(s): ns/a; requested eviction of 1 pod(s); 2 eviction(s) in the next pass" {
		t.Errorf("Message = %q", msg)
	}
	res, _ = h.Drain(context.Background(), readyNode(true), gpupoolv1.DrainSpec{}, t0, t0, &budget{n: 0})
	if res.Evicted != 0 || res.Deferred != 2 || !reflect.DeepEqual(res.Waiting, []string{"ns/a"}) {
		t.Errorf("with no budget left: %+v, want a waited for (evicted before) and b and c deferred", res)
	}
}

// TestNoSecondEvictionFromALaggingRead: a pod whose eviction was granted and that a
// read behind the API server still lists as running (a pod watch that lags) counts as
// terminating: every later drain of the node, at any time and whatever its budget, waits
// for it and never asks to evict it again, while it evicts the other pods once each.
func TestNoSecondEvictionFromALaggingRead(t *testing.T) {
	mc := &memCluster{pods: []corev1.Pod{pod("a", "ReplicaSet"), pod("b", "ReplicaSet"), pod("c", "Job")}}
	h := &Helper{Cluster: mc, Terminating: &TerminatingClock{}}
	// The memCluster never removes an evicted pod: every read lags.
	for i, after := range []time.Duration{0, time.Second, 30 * time.Second, TerminatingMargin - time.Second, TerminatingMargin, time.Hour} {
		res, err := h.Drain(context.Background(), readyNode(true), gpupoolv1.DrainSpec{}, t0, t0.Add(after), &budget{n: 1 + i%2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Done && after < TerminatingMargin {
			t.Errorf("after %s: done while evicted pods are still listed within their wait: %+v", after, res)
		}
	}
	if !reflect.DeepEqual(mc.evicted, []string{"a", "b", "c"}) {
		t.Errorf("evicted %v, want each pod once, in order", mc.evicted)
	}
}

// TestForceDelete: drain.onTimeout: Force deletes what a drain would evict, blocked or
// held pods included, and leaves what a drain skips and pods already terminating.
func TestForceDelete(t *testing.T) {
	mc := &memCluster{pods: []corev1.Pod{
		pod("bare", ""), pod("held", "ReplicaSet", annotated(gpupoolv1.AnnotationDoNotDisrupt, "true")),
		pod("agent", "DaemonSet"), pod("going", "ReplicaSet", terminating(30)),
		pod("elsewhere", "ReplicaSet", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }),
	}}
	h := &Helper{Cluster: mc}
	n, err := h.ForceDelete(context.Background(), "n1", gpupoolv1.DrainSpec{})
	if err != nil || n != 2 || !reflect.DeepEqual(mc.deleted, []string{"bare", "held"}) {
		t.Errorf("ForceDelete = %d, %v; deleted %v, want bare and held", n, err, mc.deleted)
	}
}

func TestMessage(t *testing.T) {
	if got := (Result{Done: true}).Message(); got != "drained" {
		t.Errorf("a drained node: %q", got)
	}
	r := Result{Blocked: []string{"ns/a (eviction refused: x)"}, Holding: []string{"ns/b (gpupool.dev/do-not-disrupt)"}}
	if got := r.Message(); !strings.HasPrefix(got, "blocked: ns/a (eviction refused: x); waiting for 1 pod(s) to finish: ns/b") {
		t.Errorf("Message = %q", got)
	}
}
