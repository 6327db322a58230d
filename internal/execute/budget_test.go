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
