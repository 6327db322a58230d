package vsphere

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/internal/inventory"
)

// A large pool's scoped read (scope.go) is kept by vCenter rather than read again: the
// session creates a property collector of its own for the pool, with two filters, the
// listing of the datacenter and the scope's hosts and VMs in full (devices included),
// and each read polls it (WaitForUpdatesEx with maxWaitSeconds 0 and the version of the
// last answer), which returns only what changed since: a pass of a quiet 64-host pool
// carries nothing over the wire, a switch's passes the objects its tasks changed. The
// answer to a poll is one version of every filter, so a read is still one consistent
// snapshot (docs/operations.md "One consistent snapshot"), and a pass still checks its
// tasks before it reads.
//
// The view is an optimisation, never a source of truth of its own: any answer it cannot
// apply (a change to part of a property, a fault, a version vCenter no longer knows, a
// collector gone with its session) drops it, and the read is made afresh as for a small
// pool (readScoped). Each view holds one collector on vCenter; a session keeps at most
// maxViews (the pools it reads most recently), and destroys those it drops.

// WatchMinVMs is how many VMs a pool names at least for its reads to be kept by a view
// (WithWatchedInventory); smaller pools are read whole each pass, which costs them less
// than a collector on vCenter.
const WatchMinVMs = 128

// maxViews bounds the views a session keeps (and so the collectors it holds on vCenter).
// A pool read while the session holds maxViews views, none idle for viewIdle, is read
// afresh rather than take another pool's view: more large pools than that on one
// session would otherwise make a collector and drop one at every read.
const maxViews = 8

// viewIdle is how long a view may go unread before the session drops it (a pool deleted,
// or whose VMs changed: views are by the VMs a pool names).
const viewIdle = 10 * time.Minute

// viewBackoff is how long a pool's reads are made afresh after its view was dropped for
// an answer it could not apply, so that a vCenter whose answers the view cannot follow
// does not cost a collector and a full poll on top of each read.
const viewBackoff = 5 * time.Minute

// destroyTimeout bounds the call that destroys a dropped view's collector; it is made
// even when the read that dropped it was cancelled.
const destroyTimeout = 10 * time.Second

// WithWatchedInventory sets how many VMs a pool names at least for its reads to be kept
// by a view (WatchMinVMs); zero or less reads every pool whole.
func WithWatchedInventory(minVMs int) Option {
	return func(c *SessionCache) { c.watchMinVMs = minVMs }
}

// The view's filters, by index.
const (
	listFilter = iota
	detailFilter
)

// inventoryView is a pool's collector on vCenter and what its polls added up to.
type inventoryView struct {
	mu      sync.Mutex // one reader at a time; another falls back to a read
	pc      *property.Collector
	filters [2]types.ManagedObjectReference // listFilter, detailFilter ("" when none)
	scope   inventoryScope                  // what the detail filter reads
	version string
	// objs are each filter's objects: their properties as the polls left them.
	objs [2]map[types.ManagedObjectReference]map[string]types.AnyType
	used time.Time // when last read, for dropping idle views
	// closed: its collector was destroyed (the view was dropped); a reader that still
	// holds it reads afresh.
	closed bool
}

// watchedSpec is detailSpec with the VMs' devices read (the polls carry them only when
// they change) instead of their configuration's version.
func watchedSpec(sc inventoryScope) types.PropertyFilterSpec {
	spec := detailSpec(sc)
	for i := range spec.PropSet {
		if spec.PropSet[i].Type == "VirtualMachine" {
			spec.PropSet[i].PathSet = vmProps
		}
	}
	return spec
}

// readWatched reads the pool of the VMs ids through its view. ok false: no view could
// serve the read (another reader holds it, or it was dropped); the caller reads afresh.
func (c *client) readWatched(ctx context.Context, key string, ids []string) (*inventory.Inventory, bool) {
	v := c.s.view(key, c.clock.Now())
	defer c.s.destroyRetired(ctx)
	if v == nil || !v.mu.TryLock() {
		return nil, false
	}
	defer v.mu.Unlock()
	if v.closed {
		return nil, false
	}
	inv, err := c.readView(ctx, key, v, ids)
	if err != nil {
		c.log.Info("Dropping the pool's inventory view; reading it whole for a while", "err", err.Error(), "for", viewBackoff.String())
		c.s.forget(key, v, c.clock.Now())
		v.destroy(ctx, c.s)
		return nil, false
	}
	return inv, true
}

func (c *client) readView(ctx context.Context, key string, v *inventoryView, ids []string) (*inventory.Inventory, error) {
	if v.pc == nil {
		if err := v.open(ctx, c, c.s.lastScope(key)); err != nil {
			return nil, err
		}
	}
	for attempt := 0; ; attempt++ {
		if err := v.poll(ctx, c); err != nil {
			return nil, err
		}
		o, err := decodeInventory(v.content())
		if err != nil {
			return nil, err
		}
		want := c.scopeOf(ids, o)
		if !v.scope.covers(want) {
			if attempt > 0 {
				// The scope moved again between two polls: read afresh.
				c.s.keepScope(key, want)
				return nil, errors.New("the pool's scope moved between two polls")
			}
			if err := v.rescope(ctx, c, want); err != nil {
				return nil, err
			}
			continue
		}
		c.s.keepScope(key, want)
		detailed := make(map[types.ManagedObjectReference]bool, len(want.hosts))
		for _, h := range want.hosts {
			detailed[h] = true
		}
		inv := c.convert(ctx, o, detailed)
		if !want.covers(v.scope) {
			// The scope shrank (a VM left its hosts): from the next read on, the detail
			// is the scope's only, as readScoped's next read is.
			if err := v.rescope(ctx, c, want); err != nil {
				return nil, err
			}
		}
		return inv, nil
	}
}

// open creates the view's collector with the datacenter's listing and, when the scope
// is known, its detail.
func (v *inventoryView) open(ctx context.Context, c *client, sc inventoryScope) error {
	pc, err := property.DefaultCollector(c.s.vc).Create(ctx)
	if err != nil {
		return c.errorf(err, "create a property collector")
	}
	v.pc = pc
	f, err := pc.CreateFilter(ctx, types.CreateFilter{Spec: listSpec(c.dc.ref)})
	if err != nil {
		return c.errorf(err, "create the inventory's filter")
	}
	v.filters[listFilter] = f.Reference()
	v.objs[listFilter] = map[types.ManagedObjectReference]map[string]types.AnyType{}
	return v.rescope(ctx, c, sc)
}

// rescope replaces the detail filter with one of the scope sc (none when it is empty);
// the next poll brings its objects in whole.
func (v *inventoryView) rescope(ctx context.Context, c *client, sc inventoryScope) error {
	if old := v.filters[detailFilter]; old.Value != "" {
		if _, err := methods.DestroyPropertyFilter(ctx, c.s.vc, &types.DestroyPropertyFilter{This: old}); err != nil {
			return c.errorf(err, "replace the inventory's filter")
		}
	}
	v.filters[detailFilter] = types.ManagedObjectReference{}
	v.objs[detailFilter] = map[types.ManagedObjectReference]map[string]types.AnyType{}
	v.scope = sc
	if len(sc.hosts)+len(sc.vms) == 0 {
		return nil
	}
	f, err := v.pc.CreateFilter(ctx, types.CreateFilter{Spec: watchedSpec(sc)})
	if err != nil {
		return c.errorf(err, "create the inventory's filter")
	}
	v.filters[detailFilter] = f.Reference()
	return nil
}

// poll applies every page of one answer of the collector.
func (v *inventoryView) poll(ctx context.Context, c *client) error {
	for {
		res, err := methods.WaitForUpdatesEx(ctx, c.s.vc, &types.WaitForUpdatesEx{
			This: v.pc.Reference(), Version: v.version,
			Options: &types.WaitOptions{MaxWaitSeconds: types.NewInt32(0), MaxObjectUpdates: readPage},
		})
		if err != nil {
			return c.errorf(err, "read inventory")
		}
		set := res.Returnval
		if set == nil {
			return nil // nothing changed
		}
		for _, fs := range set.FilterSet {
			i := slices.Index(v.filters[:], fs.Filter)
			if i < 0 || fs.Filter.Value == "" {
				continue // a filter replaced since (rescope)
			}
			for _, ou := range fs.ObjectSet {
				if err := applyUpdate(v.objs[i], ou); err != nil {
					return err
				}
			}
		}
		v.version = set.Version
		if set.Truncated == nil || !*set.Truncated {
			return nil
		}
	}
}

// applyUpdate applies one object's update to a filter's objects. A change it cannot
// apply exactly (to part of a property, such as one element of a list, or a property
// vCenter could not read) is an error: the view is dropped rather than kept wrong.
func applyUpdate(objs map[types.ManagedObjectReference]map[string]types.AnyType, ou types.ObjectUpdate) error {
	if len(ou.MissingSet) > 0 {
		return fmt.Errorf("vsphere: %s: property %s could not be read", ou.Obj, ou.MissingSet[0].Path)
	}
	switch ou.Kind {
	case types.ObjectUpdateKindLeave:
		delete(objs, ou.Obj)
		return nil
	case types.ObjectUpdateKindEnter:
		objs[ou.Obj] = make(map[string]types.AnyType, len(ou.ChangeSet))
	}
	props, ok := objs[ou.Obj]
	if !ok {
		return fmt.Errorf("vsphere: %s modified before it entered the view", ou.Obj)
	}
	for _, ch := range ou.ChangeSet {
		if strings.ContainsAny(ch.Name, "[]") {
			return fmt.Errorf("vsphere: %s: change %s of part of a property (%s)", ou.Obj, ch.Op, ch.Name)
		}
		switch ch.Op {
		case types.PropertyChangeOpAssign:
			props[ch.Name] = keptValue(ch.Name, ch.Val)
		case types.PropertyChangeOpRemove, types.PropertyChangeOpIndirectRemove:
			delete(props, ch.Name)
		default:
			return fmt.Errorf("vsphere: %s: change %s of %s", ou.Obj, ch.Op, ch.Name)
		}
	}
	return nil
}

// keptValue is what the view keeps of a property's value: of a VM's devices, its vGPUs
// only (all the inventory reads of them, vgpuDevices), so that the view follows the
// pool's VMs, not their virtual hardware.
func keptValue(name string, val types.AnyType) types.AnyType {
	if name != "config.hardware.device" {
		return val
	}
	if devs, ok := val.(types.ArrayOfVirtualDevice); ok {
		return types.ArrayOfVirtualDevice{VirtualDevice: vgpuDevices(devs.VirtualDevice)}
	}
	return val
}

// content is the view's objects as one read's answer: an object both filters select
// carries the properties of both.
func (v *inventoryView) content() map[types.ManagedObjectReference]*types.ObjectContent {
	out := make(map[types.ManagedObjectReference]*types.ObjectContent, len(v.objs[listFilter])+len(v.objs[detailFilter]))
	for _, objs := range v.objs {
		for ref, props := range objs {
			oc := out[ref]
			if oc == nil {
				oc = &types.ObjectContent{Obj: ref}
				out[ref] = oc
			}
			for name, val := range props {
				oc.PropSet = append(oc.PropSet, types.DynamicProperty{Name: name, Val: val})
			}
		}
	}
	return out
}

// view returns the session's view of key, made (empty) when it has none; nil when the
// key's view was dropped less than viewBackoff ago, or the session holds maxViews views
// all read within viewIdle. Views unread for viewIdle are retired (destroyRetired).
func (s *vcSession) view(key string, now time.Time) *inventoryView {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.views[key]; ok {
		v.used = now
		return v
	}
	if until, ok := s.viewsOff[key]; ok {
		if now.Before(until) {
			return nil
		}
		delete(s.viewsOff, key)
	}
	for k, v := range s.views {
		if now.Sub(v.used) >= viewIdle {
			s.retired = append(s.retired, v)
			delete(s.views, k)
		}
	}
	if len(s.views) >= maxViews {
		return nil
	}
	if s.views == nil {
		s.views = map[string]*inventoryView{}
	}
	v := &inventoryView{used: now}
	s.views[key] = v
	return v
}

// forget drops the view of key when it is still v, and has key's reads made afresh for
// viewBackoff.
func (s *vcSession) forget(key string, v *inventoryView, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.views[key] == v {
		delete(s.views, key)
	}
	s.viewsOff = keepBounded(s.viewsOff, key, now.Add(viewBackoff))
}

// destroyRetired destroys the collectors of the views retired for idleness; one another
// reader still holds is left for a later call.
func (s *vcSession) destroyRetired(ctx context.Context) {
	s.mu.Lock()
	retired := s.retired
	s.retired = nil
	s.mu.Unlock()
	var busy []*inventoryView
	for _, v := range retired {
		if !v.mu.TryLock() {
			busy = append(busy, v)
			continue
		}
		v.destroy(ctx, s)
		v.mu.Unlock()
	}
	if len(busy) > 0 {
		s.mu.Lock()
		s.retired = append(s.retired, busy...)
		s.mu.Unlock()
	}
}

// destroy destroys the view's collector, best effort: one vCenter still holds goes with
// the session. The call is made even when ctx was cancelled (the likeliest reason a poll
// failed), with a deadline of its own. The caller holds v.mu.
func (v *inventoryView) destroy(ctx context.Context, s *vcSession) {
	v.closed = true
	if v.pc == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), destroyTimeout)
	defer cancel()
	if err := v.pc.Destroy(dctx); err != nil {
		s.log.Info("Could not destroy an inventory view's property collector; it goes with the session", "err", err.Error())
	}
	v.pc = nil
}
