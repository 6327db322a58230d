package drain

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func maxHold(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestHoldExpired(t *testing.T) {
	five := gpupoolv1.DrainSpec{MaxHold: maxHold(5 * time.Minute)}
	cases := []struct {
		name    string
		spec    gpupoolv1.DrainSpec
		started time.Time
		now     time.Time
		want    bool
	}{
		{"no maxHold: never", gpupoolv1.DrainSpec{}, t0, t0.Add(24 * time.Hour), false},
		{"before maxHold", five, t0, t0.Add(5*time.Minute - time.Second), false},
		{"at maxHold", five, t0, t0.Add(5 * time.Minute), true},
		{"past maxHold", five, t0, t0.Add(time.Hour), true},
		{"maxHold 0s: at once", gpupoolv1.DrainSpec{MaxHold: maxHold(0)}, t0, t0, true},
		{"no start stamped: not expired", five, time.Time{}, t0, false},
		// A clock stepped back (started after now): the hold lasts longer, never shorter.
		{"clock stepped back", five, t0.Add(time.Hour), t0, false},
	}
	for _, c := range cases {
		if got := HoldExpired(c.spec, c.started, c.now); got != c.want {
			t.Errorf("%s: HoldExpired = %v, want %v", c.name, got, c.want)
		}
	}
}

// heldPods are one pod of each kind that holds a drain, in two namespaces.
func heldPods() []corev1.Pod {
	inNS := func(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }
	return []corev1.Pod{
		pod("train", "ReplicaSet", annotated(gpupoolv1.AnnotationDoNotDisrupt, "true"), inNS("tenant-a")),
		pod("batch", "Job", inNS("tenant-a")),
		pod("bare", "", inNS("tenant-b")),
		pod("cache", "ReplicaSet", withEmptyDir, inNS("tenant-b")),
		pod("web", "ReplicaSet", inNS("tenant-c")), // holds nothing: evicted at once
	}
}

// TestMaxHoldBoundsEveryHold: each kind of pod that holds a drain (do-not-disrupt,
// a Job's pod with jobPods: WaitCompleted, a pod without a controller, an emptyDir pod)
// on a Ready node. Without maxHold it holds the drain however long the clock runs (the
// caller's drain.timeout then decides, as before). With maxHold it holds until maxHold
// after the drain started, then is evicted through the eviction API, and Overridden
// counts it under its namespace.
func TestMaxHoldBoundsEveryHold(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		name := map[bool]string{false: "without maxHold", true: "with maxHold 5m"}[bounded]
		t.Run(name, func(t *testing.T) {
			spec := gpupoolv1.DrainSpec{JobPods: gpupoolv1.JobPodsWaitCompleted}
			if bounded {
				spec.MaxHold = maxHold(5 * time.Minute)
			}
			clk := clocktesting.NewFakeClock(t0)
			started := clk.Now()
			mc := &memCluster{pods: heldPods()}
			h := &Helper{Cluster: mc, Terminating: &TerminatingClock{}}
			drain := func() Result {
				t.Helper()
				res, err := h.Drain(context.Background(), readyNode(true), spec, started, clk.Now(), nil)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}

			res := drain()
			if !reflect.DeepEqual(mc.evicted, []string{"web"}) || len(res.Holding) != 2 || len(res.Blocked) != 2 || res.Overridden != nil {
				t.Fatalf("at the start: evicted %v, %+v; want only web evicted, 2 held and 2 blocked, nothing overridden", mc.evicted, res)
			}
			mc.pods = mc.pods[:4] // web is gone
			clk.Step(5*time.Minute - time.Second)
			if res = drain(); len(mc.evicted) != 1 || len(res.Holding)+len(res.Blocked) != 4 || res.Done || res.Overridden != nil {
				t.Fatalf("a second before maxHold: evicted %v, %+v; want the holds honoured", mc.evicted, res)
			}
			clk.Step(time.Second)
			res = drain()
			if !bounded {
				if len(mc.evicted) != 1 || len(res.Holding)+len(res.Blocked) != 4 || res.Done {
					t.Fatalf("without maxHold, 5m in: evicted %v, %+v; want the holds honoured", mc.evicted, res)
				}
				clk.Step(24 * time.Hour)
				if res = drain(); len(mc.evicted) != 1 || res.Overridden != nil {
					t.Fatalf("without maxHold, a day in: evicted %v, %+v; want the holds honoured (drain.timeout decides)", mc.evicted, res)
				}
				return
			}
			want := []string{"web", "batch", "train", "bare", "cache"}
			if !reflect.DeepEqual(mc.evicted, want) || len(res.Holding)+len(res.Blocked) != 0 || res.Evicted != 4 {
				t.Fatalf("at maxHold: evicted %v, %+v; want every held pod evicted (%v)", mc.evicted, res, want)
			}
			if !reflect.DeepEqual(res.Overridden, map[string]int{"tenant-a": 2, "tenant-b": 2}) {
				t.Errorf("Overridden = %v, want tenant-a: 2, tenant-b: 2 (web held nothing)", res.Overridden)
			}
			if n, byNS := res.OverriddenCount(); n != 4 || byNS != "tenant-a: 2, tenant-b: 2" {
				t.Errorf("OverriddenCount = %d, %q", n, byNS)
			}
			if len(mc.deleted) > 0 {
				t.Errorf("deleted %v: past maxHold pods are evicted, not deleted", mc.deleted)
			}
		})
	}
}

// TestMaxHoldEvictionStillMeetsBudgets: past maxHold a held pod is evicted through the
// eviction API, so a PodDisruptionBudget that refuses it still blocks the drain (and
// counts toward drain.timeout); it is not counted as overridden.
func TestMaxHoldEvictionStillMeetsBudgets(t *testing.T) {
	mc := &memCluster{pods: []corev1.Pod{pod("train", "ReplicaSet", annotated(gpupoolv1.AnnotationDoNotDisrupt, "true"))},
		refuse: map[string]error{"train": pdbRefusal()}}
	h := &Helper{Cluster: mc, Terminating: &TerminatingClock{}}
	spec := gpupoolv1.DrainSpec{MaxHold: maxHold(time.Minute)}
	res, err := h.Drain(context.Background(), readyNode(true), spec, t0, t0.Add(time.Minute), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ns/train (eviction refused: The disruption budget web needs 2 healthy pods and has 2 currently)"}
	if !reflect.DeepEqual(res.Blocked, want) || res.Done || res.Overridden != nil || len(mc.evicted) != 0 {
		t.Errorf("Drain = %+v, evicted %v; want the budget's refusal blocking, nothing overridden", res, mc.evicted)
	}
}
