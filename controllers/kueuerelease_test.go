package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestKueueReleaseGivesUpOnGpupoolsClock: a deleted pool whose checks cannot be released
// waits deletionTaskWait from the first failure as gpupool's clock saw it, whatever the
// API server's clock stamped as the deletion time, ahead of or behind gpupool's.
func TestKueueReleaseGivesUpOnGpupoolsClock(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*unstructured.UnstructuredList); ok {
				return errors.New("Kueue's API server refuses")
			}
			return cl.List(ctx, list, opts...)
		},
	}).Build()
	now := time.Date(2031, 3, 17, 15, 0, 0, 0, time.UTC)
	for _, offset := range []time.Duration{-time.Hour, 0, time.Hour} {
		t.Run("API server clock "+offset.String(), func(t *testing.T) {
			pool := kueuePool()
			pool.DeletionTimestamp = &metav1.Time{Time: now.Add(offset)}
			pool.Status.Kueue = &gpupoolv1.KueueStatus{}
			r := &GPUPoolProfileReconciler{Client: c, Recorder: events.NewFakeRecorder(100)}
			for _, tc := range []struct {
				after time.Duration
				wait  bool
			}{{0, true}, {9 * time.Minute, true}, {10 * time.Minute, false}} {
				again := r.releaseDeletedKueue(context.Background(), pool, now.Add(tc.after))
				if (again > 0) != tc.wait {
					t.Fatalf("%s after the first failure: look again in %s, want waiting %v", tc.after, again, tc.wait)
				}
				if got := pool.Status.Kueue.ReleaseFailingSince; got == nil || !got.Time.Equal(now) {
					t.Fatalf("releaseFailingSince %v, want the first failure on gpupool's clock %s", got, now)
				}
			}
		})
	}
}
