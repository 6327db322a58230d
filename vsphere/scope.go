package vsphere

import (
	"context"
	"path"
	"slices"
	"strings"

	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// A scoped inventory read costs one RetrievePropertiesEx, like the whole read, but
// carries the device lists (the bulk of an answer) of the pool's part of the datacenter
// only. The call holds two filter specs:
//
//   - a listing of the whole datacenter with cheap properties: every VM's name, folder,
//     host and power state, every folder, host and compute resource by name and members;
//   - the full properties of the hosts and VMs the pool's scope held at the last read.
//
// The scope is computed from the listing: the hosts of the compute resources that the
// pool's VMs are on (a power-on may be moved to any of them) and every VM on those hosts.
// When it grew since the last read (a VM moved, a host joined), the full properties of
// the new scope are read at once in a second call; the session keeps the scope for the
// next read.

var (
	listVMProps   = []string{"name", "parent", "runtime.host", "runtime.powerState"}
	listHostProps = []string{"name", "parent"}
)

// inventoryScope is what a scoped read reads in full.
type inventoryScope struct {
	hosts, vms []types.ManagedObjectReference
}

func (a inventoryScope) covers(b inventoryScope) bool {
	have := make(map[types.ManagedObjectReference]bool, len(a.hosts)+len(a.vms))
	for _, r := range a.hosts {
		have[r] = true
	}
	for _, r := range a.vms {
		have[r] = true
	}
	for _, r := range append(slices.Clone(b.hosts), b.vms...) {
		if !have[r] {
			return false
		}
	}
	return true
}

// listSpec is inventorySpec with cheap properties only.
func listSpec(dc types.ManagedObjectReference) types.PropertyFilterSpec {
	spec := inventorySpec(dc)
	spec.PropSet = []types.PropertySpec{
		{Type: "VirtualMachine", PathSet: listVMProps},
		{Type: "HostSystem", PathSet: listHostProps},
		{Type: "Folder", PathSet: folderProps},
		{Type: "ComputeResource", PathSet: computeProps},
		{Type: "ClusterComputeResource", PathSet: computeProps},
	}
	// The host's recent tasks are read for the scope's hosts only.
	for _, sel := range spec.ObjectSet[0].SelectSet {
		if ts, ok := sel.(*types.TraversalSpec); ok && ts.Name == "crToHost" {
			ts.SelectSet = nil
		}
	}
	return spec
}

// detailSpec reads the scope's hosts (with their recent tasks) and VMs in full, but for
// the VMs' devices, of which it reads the version (devicememo.go).
func detailSpec(sc inventoryScope) types.PropertyFilterSpec {
	var objs []types.ObjectSpec
	for _, h := range sc.hosts {
		objs = append(objs, types.ObjectSpec{Obj: h, Skip: types.NewBool(false), SelectSet: []types.BaseSelectionSpec{&types.TraversalSpec{
			SelectionSpec: types.SelectionSpec{Name: "hostToTask"}, Type: "HostSystem", Path: "recentTask", Skip: types.NewBool(false),
		}}})
	}
	for _, vm := range sc.vms {
		objs = append(objs, types.ObjectSpec{Obj: vm})
	}
	return types.PropertyFilterSpec{
		// A VM or host deleted since the scope was kept comes back as missing rather
		// than failing the whole read (retrieve drops it; the listing no longer has it).
		ReportMissingObjectsInResults: types.NewBool(true),
		ObjectSet:                     objs,
		PropSet: []types.PropertySpec{
			{Type: "VirtualMachine", PathSet: detailVMProps},
			{Type: "HostSystem", PathSet: hostProps},
			{Type: "Task", PathSet: hostTaskProps},
		},
	}
}

// readScoped reads the inventory scoped to the pool of the VMs ids: see the top of the
// file, and devicememo.go for the VMs' devices.
func (c *client) readScoped(ctx context.Context, ids []string) (*inventory.Inventory, error) {
	key := c.dc.ref.Value + "\x00" + strings.Join(slices.Sorted(slices.Values(ids)), "\x00")
	if c.watchMinVMs > 0 && len(ids) >= c.watchMinVMs {
		if inv, ok := c.readWatched(ctx, key, ids); ok {
			return inv, nil
		}
	}
	last := c.s.lastScope(key)
	torn := false
	for attempt := 0; ; attempt++ {
		specs := []types.PropertyFilterSpec{listSpec(c.dc.ref)}
		if len(last.hosts)+len(last.vms) > 0 {
			specs = append(specs, detailSpec(last))
		}
		content, err := c.retrieve(ctx, specs...)
		if err != nil && len(specs) > 1 && attempt == 0 && fault.Is(err, &types.ManagedObjectNotFound{}) {
			// An object of the kept scope is gone and vCenter refused the whole read
			// anyway: read the listing alone and compute the scope afresh rather than
			// fail every pass. (Other errors, such as a refused login, are not retried
			// here.)
			c.s.keepScope(key, inventoryScope{})
			last = inventoryScope{}
			continue
		}
		if err != nil {
			return nil, err
		}
		o, err := decodeInventory(content)
		if err != nil {
			return nil, err
		}
		want := c.scopeOf(ids, o)
		if !last.covers(want) {
			if attempt == 0 {
				last = want
				continue
			}
			// The scope moved again between two reads: read the whole datacenter
			// rather than plan on VMs read by name only; the next pass starts from the
			// scope seen last.
			c.s.keepScope(key, want)
			return c.Inventory(ctx)
		}
		c.s.keepScope(key, want)
		whole, err := c.fillDevices(ctx, key, o.vms)
		if err != nil {
			return nil, err
		}
		if !whole {
			if !torn {
				torn = true
				continue // a configuration changed between the two calls: read again
			}
			// Configurations keep changing under the read: read the whole datacenter
			// in one call, devices included.
			return c.Inventory(ctx)
		}
		detailed := make(map[types.ManagedObjectReference]bool, len(want.hosts))
		for _, h := range want.hosts {
			detailed[h] = true
		}
		return c.convert(ctx, o, detailed), nil
	}
}

// scopeOf computes the scope of the VMs ids from a listing: the hosts of the compute
// resources their VMs are on (every VM an id may name, should a name be ambiguous) and
// every VM on those hosts.
func (c *client) scopeOf(ids []string, o inventoryObjects) inventoryScope {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	paths := folderPaths(c.dc, o.folders)
	parentOf := map[types.ManagedObjectReference]types.ManagedObjectReference{}
	for _, h := range o.hosts {
		if h.Parent != nil {
			parentOf[h.Self] = *h.Parent
		}
	}
	membersOf := map[types.ManagedObjectReference][]types.ManagedObjectReference{}
	for _, cr := range o.crs {
		membersOf[cr.Self] = cr.Host
	}
	hosts := map[types.ManagedObjectReference]bool{}
	var sc inventoryScope
	for _, vm := range o.vms {
		p := ""
		if vm.Parent != nil {
			if fp, ok := paths[*vm.Parent]; ok {
				p = path.Join(fp, vm.Name)
			}
		}
		if !want[vm.Name] && (p == "" || !want[p]) {
			continue
		}
		sc.vms = append(sc.vms, vm.Self)
		if vm.Runtime.Host == nil {
			continue
		}
		hosts[*vm.Runtime.Host] = true
		for _, h := range membersOf[parentOf[*vm.Runtime.Host]] {
			hosts[h] = true
		}
	}
	for h := range hosts {
		sc.hosts = append(sc.hosts, h)
	}
	inScope := make(map[types.ManagedObjectReference]bool, len(sc.vms))
	for _, vm := range sc.vms {
		inScope[vm] = true
	}
	for _, vm := range o.vms {
		if vm.Runtime.Host != nil && hosts[*vm.Runtime.Host] && !inScope[vm.Self] {
			sc.vms = append(sc.vms, vm.Self)
		}
	}
	return sc
}

// maxScopes bounds the scopes a session remembers (one per pool and spec).
const maxScopes = 256

func (s *vcSession) lastScope(key string) inventoryScope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scopes[key]
}

func (s *vcSession) keepScope(key string, sc inventoryScope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scopes = keepBounded(s.scopes, key, sc)
}

// keepBounded sets m[key] to v and returns m, started afresh when it already holds
// maxScopes keys (one per pool and spec): what a session remembers per scope stays
// bounded however many specs it has seen.
func keepBounded[T any](m map[string]T, key string, v T) map[string]T {
	if m == nil || len(m) >= maxScopes {
		m = map[string]T{}
	}
	m[key] = v
	return m
}
