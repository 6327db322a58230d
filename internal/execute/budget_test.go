package execute

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPassBudgetSettles: a write taken from the budget and refused by the API server
// goes back; one that succeeded is progress; one that may have been made stays spent.
func TestPassBudgetSettles(t *testing.T) {
	status := func(code int32) error {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code}}
	}
	tests := []struct {
		name       string
		err        error
		left       int // node writes left of 2 after one taken and settled with err
		progressed bool
	}{
		{"succeeded", nil, 1, true},
		{"forbidden", apierrors.NewForbidden(corev1.Resource("nodes"), "n", errors.New("no")), 2, false},
		{"conflict", apierrors.NewConflict(corev1.Resource("nodes"), "n", errors.New("changed")), 2, false},
		{"gone", apierrors.NewNotFound(corev1.Resource("nodes"), "n"), 2, false},
		{"refused by a PodDisruptionBudget", apierrors.NewTooManyRequests("budget", 10), 2, false},
		{"request timeout, maybe applied", status(http.StatusRequestTimeout), 1, false},
		{"server error, maybe applied", apierrors.NewInternalError(errors.New("etcd")), 1, false},
		{"no answer", fmt.Errorf("patching node n: %w", context.DeadlineExceeded), 1, false},
		{"wrapped refusal", fmt.Errorf("patching node n: %w", status(http.StatusUnprocessableEntity)), 2, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range []string{"node write", "eviction"} {
				b := NewBudget(2, 2)
				take, done := b.NodeWrite, b.NodeWritten
				if kind == "eviction" {
					take, done = b.TakeEviction, b.EvictionDone
				}
				if !take() {
					t.Fatalf("%s: no budget for the first write", kind)
				}
				done(tc.err)
				left := 0
				for take() {
					left++
				}
				if left != tc.left || b.Progressed() != tc.progressed || !b.Capped() {
					t.Errorf("%s: %d left, progressed %v, capped %v; want %d left, progressed %v, capped", kind, left, b.Progressed(), b.Capped(), tc.left, tc.progressed)
				}
			}
		})
	}

	var none *Budget
	none.NodeWritten(errors.New("x"))
	none.EvictionDone(nil)
	none.NodeUnwritten()
	if !none.NodeWrite() || !none.TakeEviction() || none.Capped() || !none.Progressed() {
		t.Error("a nil budget does not allow everything")
	}

	// Concurrent writes never take more than the cap, and the refused ones come back.
	b := NewBudget(8, 0)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.NodeWrite() && i%2 == 0 {
				b.NodeWritten(apierrors.NewForbidden(corev1.Resource("nodes"), "n", errors.New("no")))
			}
		}()
	}
	wg.Wait()
	if left := b.nodeWrites.Load(); left < 0 || left > 8 {
		t.Errorf("%d node writes left of 8", left)
	}
}

// TestCordonsOwnAllowance: with an allowance of their own, cordons are taken from it
// and still counted as node writes (the node writes left go below none, and no other
// node write is then made); a refused cordon gives both back; without it a cordon is a
// node write; concurrent cordons never take more than the allowance.
func TestCordonsOwnAllowance(t *testing.T) {
	refusal := apierrors.NewForbidden(corev1.Resource("nodes"), "n", errors.New("no"))
	b := NewBudget(2, 0).WithCordons(4)
	for i := range 4 {
		if !b.Cordon() {
			t.Fatalf("cordon %d of an allowance of 4 refused", i+1)
		}
		b.CordonWritten(nil)
	}
	if b.Capped() || !b.Progressed() {
		t.Errorf("after 4 cordons of 4: capped %v, progressed %v; want not capped, progressed", b.Capped(), b.Progressed())
	}
	if b.Cordon() || !b.Capped() {
		t.Error("a fifth cordon was allowed, or did not cap the pass")
	}
	if b.NodeWrite() {
		t.Error("a node write was allowed after cordons beyond the node writes' cap")
	}

	b = NewBudget(2, 0).WithCordons(1)
	if !b.Cordon() {
		t.Fatal("the one cordon refused")
	}
	b.CordonWritten(refusal)
	if !b.Cordon() {
		t.Error("a refused cordon did not go back to the allowance")
	}
	if !b.NodeWrite() || b.NodeWrite() {
		t.Error("one cordon taken: want one node write left of two")
	}
	if b.Progressed() {
		t.Error("a refused cordon counted as progress")
	}

	b = NewBudget(2, 0)
	took := 0
	for range 3 {
		if b.Cordon() {
			took++
		}
	}
	if took != 2 {
		t.Errorf("without an allowance of their own %d cordons of 3 taken with 2 node writes, want 2", took)
	}
	b.CordonWritten(refusal)
	if !b.NodeWrite() {
		t.Error("without an allowance of their own a refused cordon did not go back to the node writes")
	}

	var none *Budget
	none.CordonWritten(refusal)
	if !none.Cordon() {
		t.Error("a nil budget refused a cordon")
	}

	b = NewBudget(0, 0).WithCordons(8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	took = 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Cordon() {
				mu.Lock()
				took++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if took != 8 {
		t.Errorf("%d concurrent cordons taken of an allowance of 8", took)
	}
}
