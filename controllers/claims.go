package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// checkClaims is the final guard against two pools driving one VM. The webhook refuses
// a pool that claims another pool's VM, but it lists and then admits, so two pools
// created at the same moment can both get through, and it cannot see that two spellings
// of a server (a name and an address, an alias) are one vCenter. Here the VMs are
// compared as the objects this pool's vCenter resolves them to, and vCenters by their
// instance UUID. The younger pool (later creationTimestamp, then the greater name) is
// held with Stalled=ConflictingClaim before it acts; the older goes on.
func (r *GPUPoolProfileReconciler) checkClaims(ctx context.Context, s *scope, w *world.World) (time.Duration, bool) {
	pool := s.pool
	var pools gpupoolv1.GPUPoolProfileList
	if err := r.Client.List(ctx, &pools); err != nil {
		// Not knowing the other claims is no reason to act on a VM that may be theirs.
		s.facts.vcenter = "listing GPUPoolProfiles to check VM claims: " + err.Error()
		return requeueBlocked, false
	}
	mine := map[string]string{} // VM moref -> the name this pool gives it
	for _, id := range world.PoolVMs(&pool.Spec) {
		if vm, ok := w.Index.FindVM(id); ok {
			mine[vm.Ref] = vm.Name
		}
	}
	for i := range pools.Items {
		o := &pools.Items[i]
		if o.Name == pool.Name || !olderThan(o, pool) || !mayShareDatacenter(&o.Spec.VCenter, &pool.Spec.VCenter) {
			continue
		}
		var shared []string
		for _, id := range world.PoolVMs(&o.Spec) {
			if vm, ok := w.Index.FindVM(id); ok && mine[vm.Ref] != "" {
				shared = append(shared, mine[vm.Ref])
			}
		}
		if len(shared) == 0 || !r.sameVCenter(ctx, s, &o.Spec.VCenter) {
			continue
		}
		sort.Strings(shared)
		s.facts.conflict = fmt.Sprintf("VM(s) %s are also claimed by the older GPUPoolProfile %q on the same vCenter (instance %s); this pool does nothing until one of them gives them up",
			strings.Join(shared, ", "), o.Name, s.vc.InstanceUUID())
		return requeueBlocked, false
	}
	return 0, true
}

// olderThan orders pools by creation, then by name: of two pools created in the same
// second, exactly one is older.
func olderThan(a, b *gpupoolv1.GPUPoolProfile) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// mayShareDatacenter: an empty datacenter means vCenter's only one, which may be the
// other pool's named one.
func mayShareDatacenter(a, b *gpupoolv1.VCenterSpec) bool {
	return a.Datacenter == b.Datacenter || a.Datacenter == "" || b.Datacenter == ""
}

// sameVCenter tells whether the other pool's server is this pool's vCenter: by the
// canonical server name, else by instance UUID, read without credentials. A server
// that cannot be identified now is not this one: its pool cannot act on it either.
func (r *GPUPoolProfileReconciler) sameVCenter(ctx context.Context, s *scope, other *gpupoolv1.VCenterSpec) bool {
	mine := &s.pool.Spec.VCenter
	if vsphere.CanonicalServer(mine.Server) == vsphere.CanonicalServer(other.Server) {
		return true
	}
	id, ok := r.VSphere.(vsphere.Identifier)
	if !ok {
		return false
	}
	uuid, err := id.Identify(ctx, vsphere.Config{Server: other.Server, Thumbprint: other.Thumbprint, CABundle: other.CABundle, Insecure: other.Insecure})
	if err != nil {
		log.FromContext(ctx).V(1).Info("Cannot identify another pool's vCenter", "server", displayServer(other.Server), "error", err.Error())
		return false
	}
	return uuid != "" && uuid == s.vc.InstanceUUID()
}
