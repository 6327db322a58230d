package demand

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestUnobservedKeepsWhatDemandHoldsForIdleFor: while the demand cannot be read, a
// layout demand holds is kept (one failed read must not drain its work), no longer than
// its idleFor from when the reads began to fail; without a demand hold the schedule
// decides. The pool given is not changed.
func TestUnobservedKeepsWhatDemandHoldsForIdleFor(t *testing.T) {
	pool := testPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn,
		IdleFor: &metav1.Duration{Duration: 5 * time.Minute}}}}
	pool.Status.ActiveLayout, pool.Status.DesiredLayout, pool.Status.DesiredReason = "night", "night", gpupoolv1.DesiredByDemand
	start := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	failed := errors.New("the cache is not synced")
	for i, tc := range []struct {
		after time.Duration
		want  string
	}{{0, "night"}, {4 * time.Minute, "night"}, {5 * time.Minute, "day"}} {
		before := pool.DeepCopy()
		d, st, err := Unobserved(pool, start.Add(tc.after), failed)
		if err != nil {
			t.Fatal(err)
		}
		if d.Layout != tc.want || !strings.Contains(st.Message, "not observed") {
			t.Fatalf("pass %d, %s after the reads failed: %s (%s), message %q; want %s", i, tc.after, d.Layout, d.Reason, st.Message, tc.want)
		}
		if !equality.Semantic.DeepEqual(pool, before) {
			t.Fatal("Unobserved changed the pool's status")
		}
		pool.Status.Demand, pool.Status.DesiredReason = st, d.Reason
	}
	// Without a demand hold, the schedule decides and nothing is kept.
	pool.Status.DesiredReason = gpupoolv1.DesiredByDefault
	if d, _, _ := Unobserved(pool, start, failed); d.Layout != "day" {
		t.Fatalf("without a demand hold: %+v, want the default day", d)
	}
}
