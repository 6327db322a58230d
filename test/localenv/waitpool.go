package localenv

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// waitPool waits until cond holds for the named pool, or ctx ends. It watches the pool
// (follow: a watch from no version starts with the pool as it is, and resumes from the
// last version seen when the API server ends it) instead of reading it again and again:
// a 64-host bench's pool is half a megabyte, and a read every 100 ms (served from etcd)
// was a tenth of the API server's CPU during the switches: the bench's own load on the
// environment it measures. A watch also sees the change when it happens, not at the next
// read.
func (e *Env) waitPool(ctx context.Context, name, what string, cond func(*gpupoolv1.GPUPoolProfile) bool) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	met := false // follow runs in this goroutine and calls on one event at a time
	e.follow(wctx, &gpupoolv1.GPUPoolProfileList{}, []client.ListOption{client.MatchingFields{"metadata.name": name}}, func(ev watch.Event) {
		if p, ok := ev.Object.(*gpupoolv1.GPUPoolProfile); ok && !met && (ev.Type == watch.Added || ev.Type == watch.Modified) && cond(p) {
			met = true
			cancel()
		}
	})
	if met {
		return nil
	}
	return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
}
