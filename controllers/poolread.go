package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// readPool reads the pool a pass starts from. A pass must never act on a status older
// than this reconciler's own last write of the pool: that status may lack the intent of
// a task the last pass asked for, and the pass would ask again. The manager's cache
// serves the read when it holds a version of the pool this reconciler knows is at least
// that new: the resourceVersion its last write returned, or one it read from the API
// server since (fresh). Any other version (the cache behind, or showing another writer's
// change; a manager just started; a write whose outcome is unknown) is read from the API
// server. A cache that has not shown another writer's change yet may still serve the
// pass, as any controller's cache does: the pass's own intents are never older. A pool
// of 1,280 workers is a third of a megabyte that the API server reads from etcd and
// decodes for every uncached read.
//
// A pool with spec.kueue (or a status.kueue left to release) is read from the API server
// on every pass, as before: the Kueue controller writes its status.kueue, and a pass that
// started from the cache before the cache showed that write would have its status write
// (optimistically locked when it carries task intents: writeStatus) refused, and start
// nothing that pass.
//
// Note: resourceVersions are compared for equality only; their order is the API
// server's.
func (r *GPUPoolProfileReconciler) readPool(ctx context.Context, key client.ObjectKey) (*gpupoolv1.GPUPoolProfile, error) {
	cached := &gpupoolv1.GPUPoolProfile{}
	if err := r.Client.Get(ctx, key, cached); err == nil && cached.ResourceVersion != "" && !kueueWrites(cached) &&
		r.fresh.last(cached) == cached.ResourceVersion {
		return cached, nil
	}
	pool := &gpupoolv1.GPUPoolProfile{}
	if err := r.APIReader.Get(ctx, key, pool); err != nil {
		return nil, err
	}
	r.fresh.remember(pool, pool.ResourceVersion)
	return pool, nil
}

// wrote records the outcome of a write of pool (the object the client decoded the API
// server's answer into): on success its resourceVersion is the newest this reconciler
// knows; on failure the write may or may not have happened, and the next pass reads the
// pool from the API server.
func (r *GPUPoolProfileReconciler) wrote(pool *gpupoolv1.GPUPoolProfile, err error) {
	if err != nil || pool.ResourceVersion == "" {
		r.fresh.forget(pool.Name)
		return
	}
	r.fresh.remember(pool, pool.ResourceVersion)
}

// kueueWrites tells whether the Kueue controller may write the pool's status
// (status.kueue): while spec.kueue is set, and until the status it left is released.
func kueueWrites(pool *gpupoolv1.GPUPoolProfile) bool {
	return pool.Spec.Kueue != nil || pool.Status.Kueue != nil
}
