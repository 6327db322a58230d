package controllers

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
)

// TestFlushBesidePasses (run with -race): the flusher carries pools on and writes their
// days while passes add to the same ledgers; every second is counted once, and what is
// written at the end is what the ledger holds. A flusher whose day was made afresh
// under a name already persisted merges it, never writes it over.
func TestFlushBesidePasses(t *testing.T) {
	s := runtime.NewScheme()
	_ = gpupoolv1.AddToScheme(s)
	start := time.Date(2026, 6, 1, 8, 0, 0, 0, time.UTC)
	// A day persisted before: 1,000 GPU-seconds offered, through 08:00.
	prev := accounting.New(time.UTC, start.Add(-1000*time.Second))
	prev.Advance(start.Add(-1000*time.Second), []accounting.Item{{Key: "node/n", Kind: accounting.Offered, Layout: "day", Profile: "p", GPUs: 1}})
	prev.Advance(start, nil)
	old := accounting.ToUsage("lab", time.UTC, prev.Days["2026-06-01"])
	old.OwnerReferences = ownerRef("lab", "uid-lab")
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(old).Build()
	clock := clocktesting.NewFakeClock(start)
	r := &GPUPoolProfileReconciler{Client: c, APIReader: c, Clock: clock, UsageInterval: time.Minute}

	// A ledger that could not read the day back: it starts afresh at 08:00.
	l := accounting.New(time.UTC, time.Time{})
	st := &usageState{ledger: l, pool: "lab", uid: "uid-lab", keep: 35, versions: map[string]string{}, claimGPUs: map[types.UID]int64{}}
	r.usage.remember(&gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "lab", UID: "uid-lab"}}, st)
	node := []accounting.Item{{Key: "node/n", Kind: accounting.Offered, Layout: "day", Profile: "p", GPUs: 1}}
	st.mu.Lock()
	l.Advance(start, node)
	st.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // passes, one a simulated second apart
		defer wg.Done()
		for i := 1; i <= 200; i++ {
			st.mu.Lock()
			l.Advance(start.Add(time.Duration(i)*time.Second), node)
			st.mu.Unlock()
		}
	}()
	go func() { // flushes
		defer wg.Done()
		for range 20 {
			r.flushUsage(context.Background())
		}
	}()
	wg.Wait()
	end := start.Add(200 * time.Second)
	clock.SetTime(end)
	r.flushUsage(context.Background()) // a merge, if any, is written by the next flush
	r.flushUsage(context.Background())

	var u gpupoolv1.GPUPoolUsage
	if err := c.Get(context.Background(), client.ObjectKey{Name: old.Name}, &u); err != nil {
		t.Fatal(err)
	}
	var offered int64
	for _, row := range u.Rows {
		offered += row.OfferedGPUSeconds
	}
	// 1,000 persisted before, and 200 s since, whatever the flushes carried on past the
	// passes (a flush at most carries the last pass on to the clock, which stood at 08:00
	// until the end).
	if offered != 1200 {
		t.Errorf("offered %d GPU-seconds, want the 1,000 persisted and the 200 since", offered)
	}
}

func ownerRef(pool string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: gpupoolv1.GroupVersion.String(), Kind: "GPUPoolProfile", Name: pool, UID: uid, Controller: ptr.To(true)}}
}
