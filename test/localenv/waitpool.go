package localenv

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// waitPool waits until cond holds for the named pool, or ctx ends. It watches the pool
// instead of reading it again and again: a 64-host bench's pool is half a megabyte,
// and a read every 100 ms (served from etcd) was a tenth of the API server's CPU during
// the switches: the bench's own load on the environment it measures. A watch also sees
// the change when it happens, not at the next read. every is the pause before listing
// again when the pool cannot be listed or the watch ends.
func (e *Env) waitPool(ctx context.Context, name string, every time.Duration, what string, cond func(*gpupoolv1.GPUPoolProfile) bool) error {
	only := client.MatchingFields{"metadata.name": name}
	for {
		var list gpupoolv1.GPUPoolProfileList
		if err := e.Client.List(ctx, &list, only); err == nil {
			for i := range list.Items {
				if cond(&list.Items[i]) {
					return nil
				}
			}
			if e.watchPoolUntil(ctx, list.ResourceVersion, only, cond) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(every):
		}
	}
}

// watchPoolUntil watches the pool from resourceVersion rv and tells whether cond came
// to hold before the watch ended.
func (e *Env) watchPoolUntil(ctx context.Context, rv string, only client.MatchingFields, cond func(*gpupoolv1.GPUPoolProfile) bool) bool {
	w, err := e.Client.Watch(ctx, &gpupoolv1.GPUPoolProfileList{}, only, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
	if err != nil {
		return false
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Added, watch.Modified:
			if p, ok := ev.Object.(*gpupoolv1.GPUPoolProfile); ok && cond(p) {
				return true
			}
		case watch.Error:
			return false
		}
	}
	return false
}
