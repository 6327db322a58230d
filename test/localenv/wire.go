package localenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/vsphere"
)

// wirePeriod is how often the power wire reads vgpusim (or, when a read takes longer,
// as long again as the read took, at most maxWireBackoff, so that a large inventory does
// not keep vgpusim busy):
// a real kubelet starts within seconds of its VM, and the benchmark's critical-path
// bound includes this lag.
//
// Note: following vgpusim's property collector (WaitForUpdatesEx on a container view of
// every VM) instead was tried and measured slower under load: 17.9 s against 14.1 s for
// a 4-host day -> night switch.
const wirePeriod = 200 * time.Millisecond

// maxWireBackoff caps that back-off: a read that took long because vgpusim or the API
// server was frozen (a fault test stops them for tens of seconds) must not make the next
// read wait as long, or the nodes follow their VMs that much late.
const maxWireBackoff = time.Second

// RunWire is the power wire: until ctx ends it copies every VM's power state from
// vgpusim onto its node, where kwok's stages turn it into node readiness, and plays the
// DRA driver of the Ready nodes (cluster.SyncSlices). Nodes are read
// from a watch-fed cache, so a pass costs one inventory read and a patch per changed
// node, whatever the number of nodes.
func RunWire(ctx context.Context, e *Env) error {
	nodes, err := cache.New(e.rest, cache.Options{Scheme: Scheme(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Node{}: {Transform: cache.TransformStripManagedFields()},
	}})
	if err != nil {
		return err
	}
	go func() { _ = nodes.Start(ctx) }()
	if !nodes.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	c, err := client.New(e.rest, client.Options{Scheme: Scheme(), Cache: &client.CacheOptions{Reader: nodes}})
	if err != nil {
		return err
	}
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	for {
		start := time.Now()
		vc, err := conn.Connect(ctx, e.VCenter)
		if err == nil {
			inv, ierr := vc.Inventory(ctx)
			if ierr == nil {
				_, err = cluster.SyncPower(ctx, c, inv)
				if err == nil {
					// The simulated DRA driver: Ready nodes publish their vGPUs.
					_, err = cluster.SyncSlices(ctx, c, "")
				}
			} else {
				err = ierr
			}
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(e.logOut(), "power wire:", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(wirePeriod, min(time.Since(start), maxWireBackoff))):
		}
	}
}
