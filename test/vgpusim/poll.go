package vgpusim

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// pollingCollector answers a poll of a property collector's filters (WaitForUpdatesEx
// with maxWaitSeconds 0) as vCenter does: with what changed since the version the client
// passes, at a cost that follows the changes, not the objects the filters select.
// (vSphere Web Services API, PropertyCollector.WaitForUpdatesEx: "version: the data
// version currently known to the client. The value must be either the special initial
// version (an empty string) or a data version returned from PropertyCollector.
// CheckForUpdates or PropertyCollector.WaitForUpdates"; WaitOptions.maxWaitSeconds: "a
// value of 0 causes WaitForUpdatesEx to do one update calculation and return any
// results"; maxObjectUpdates: "the maximum number of ObjectUpdate entries that should be
// returned in a single result", the rest with UpdateSet.truncated and a version that
// continues it; ObjectUpdate.kind enter, modify and leave.)
//
// govmomi's simulator answers each update of each modified object by collecting every
// object of the filter again, which makes a poll of a pool's 1,280 VMs cost more than
// reading them. Here a tracker, told of every object the simulator puts, updates or
// removes (Registry.AddHandler), keeps which objects changed since the last poll; a poll
// collects those only, compares them with what it last returned, and recomputes which
// objects a filter selects only when something its traversal follows changed or an
// object of a type it reads came or went. Long polls (maxWaitSeconds unset or above 0,
// as task waits use) are govmomi's simulator's.
type pollingCollector struct {
	*simulator.PropertyCollector
	t *changeTracker
	// ts are the simulator's trackers, which t leaves when the collector is destroyed.
	ts *trackers
	// mu serialises the calls that read or change the collector's filters and what its
	// polls returned: govmomi's simulator does not lock a collector (it embeds a no-op
	// locker), and a client may call it from several goroutines.
	mu sync.Mutex
}

// defaultMaxObjectUpdates is the page size of a poll that asks for none: vCenter's own
// policy (govmomi's simulator uses the same).
const defaultMaxObjectUpdates = 100

// changeTracker is one collector's record of what changed, and what its polls returned.
type changeTracker struct {
	self types.ManagedObjectReference

	mu    sync.Mutex // guards what the handler records
	dirty map[types.ManagedObjectReference]bool
	came  map[string]bool // types of the objects put or removed
	names map[string]bool // properties updated, as type/name

	// What the polls returned, guarded by pollingCollector.mu.
	version int
	last    string            // the version of the answer returned last
	pages   []types.UpdateSet // the rest of a truncated answer
	filters map[types.ManagedObjectReference]*filterSnapshot
}

// filterSnapshot is what the polls returned of one filter: each object's properties.
type filterSnapshot struct {
	objects map[types.ManagedObjectReference]map[string]types.AnyType
}

var trackerSeq struct {
	sync.Mutex
	n int
}

func newChangeTracker() *changeTracker {
	trackerSeq.Lock()
	trackerSeq.n++
	n := trackerSeq.n
	trackerSeq.Unlock()
	return &changeTracker{
		self:    types.ManagedObjectReference{Type: "VgpusimChangeTracker", Value: "tracker-" + strconv.Itoa(n)},
		filters: map[types.ManagedObjectReference]*filterSnapshot{},
	}
}

func (t *changeTracker) Reference() types.ManagedObjectReference { return t.self }

func (t *changeTracker) PutObject(_ *simulator.Context, o mo.Reference) {
	t.record(o.Reference(), true, nil)
}

func (t *changeTracker) UpdateObject(_ *simulator.Context, o mo.Reference, changes []types.PropertyChange) {
	t.record(o.Reference(), false, changes)
}

func (t *changeTracker) RemoveObject(_ *simulator.Context, ref types.ManagedObjectReference) {
	t.record(ref, true, nil)
}

func (t *changeTracker) record(ref types.ManagedObjectReference, cameOrWent bool, changes []types.PropertyChange) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dirty == nil {
		t.dirty, t.came, t.names = map[types.ManagedObjectReference]bool{}, map[string]bool{}, map[string]bool{}
	}
	t.dirty[ref] = true
	if cameOrWent {
		t.came[ref.Type] = true
	}
	for _, c := range changes {
		t.names[ref.Type+"/"+c.Name] = true
	}
}

// take returns what was recorded since the last take, and forgets it.
func (t *changeTracker) take() (map[types.ManagedObjectReference]bool, map[string]bool, map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, c, n := t.dirty, t.came, t.names
	t.dirty, t.came, t.names = nil, nil, nil
	return d, c, n
}

// trackers are the change trackers of each session (by session key), so that they stop
// when it ends: a tracker is told of every change the simulator makes.
type trackers struct {
	mu sync.Mutex
	by map[string][]*changeTracker
}

func (ts *trackers) add(session string, t *changeTracker) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.by == nil {
		ts.by = map[string][]*changeTracker{}
	}
	ts.by[session] = append(ts.by[session], t)
}

// remove stops one tracker (its collector was destroyed).
func (ts *trackers) remove(r *simulator.Registry, t *changeTracker) {
	ts.mu.Lock()
	for k, list := range ts.by {
		ts.by[k] = slices.DeleteFunc(list, func(x *changeTracker) bool { return x == t })
	}
	ts.mu.Unlock()
	r.RemoveHandler(t)
}

// stop removes the trackers of the session (of every session when session is "") from
// the registry.
func (ts *trackers) stop(r *simulator.Registry, session string) {
	ts.mu.Lock()
	var stopped []*changeTracker
	for k, list := range ts.by {
		if session == "" || k == session {
			stopped = append(stopped, list...)
			delete(ts.by, k)
		}
	}
	ts.mu.Unlock()
	for _, t := range stopped {
		r.RemoveHandler(t)
	}
}

// PollTrackers is how many collectors' polls the simulator answers from its change
// tracking (their sessions have not ended).
func (s *Sim) PollTrackers() int {
	s.trackers.mu.Lock()
	defer s.trackers.mu.Unlock()
	n := 0
	for _, list := range s.trackers.by {
		n += len(list)
	}
	return n
}

// wrapPolling puts a pollingCollector in place of a collector the session created, the
// first time a poll is asked of it; a session's Logout stops its trackers.
func (s *Sim) wrapPolling(ctx *simulator.Context, m *simulator.Method) {
	if ctx.Session == nil {
		return
	}
	if m.Name == "Logout" {
		s.trackers.stop(ctx.Map, ctx.Session.Key)
		return
	}
	if m.Name != "WaitForUpdatesEx" || m.This.Type != "PropertyCollector" {
		return
	}
	r, ok := m.Body.(*types.WaitForUpdatesEx)
	if !ok || !isPoll(r) {
		return
	}
	// The service's own collector is shared (ctx.Map holds it); those a client creates
	// are its session's.
	if pc, ok := ctx.Session.Get(m.This).(*simulator.PropertyCollector); ok && ctx.Map.Get(m.This) == nil {
		t := newChangeTracker()
		ctx.Map.AddHandler(t)
		s.trackers.add(ctx.Session.Key, t)
		ctx.Session.Registry.Put(&pollingCollector{PropertyCollector: pc, t: t, ts: &s.trackers})
	}
}

func isPoll(r *types.WaitForUpdatesEx) bool {
	return r.Options != nil && r.Options.MaxWaitSeconds != nil && *r.Options.MaxWaitSeconds == 0
}

// WaitForUpdatesEx answers a poll from the tracker; other waits as govmomi's simulator.
func (pc *pollingCollector) WaitForUpdatesEx(ctx *simulator.Context, r *types.WaitForUpdatesEx) soap.HasFault {
	if !isPoll(r) {
		return pc.PropertyCollector.WaitForUpdatesEx(ctx, r)
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	set, fault := pc.poll(ctx, r)
	if fault != nil {
		return &methods.WaitForUpdatesExBody{Fault_: simulator.Fault("", fault)}
	}
	return &methods.WaitForUpdatesExBody{Res: &types.WaitForUpdatesExResponse{Returnval: set}}
}

// CreateFilter adds a filter, serialised with the polls that read the filters.
func (pc *pollingCollector) CreateFilter(ctx *simulator.Context, c *types.CreateFilter) soap.HasFault {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.PropertyCollector.CreateFilter(ctx, c)
}

// DestroyPropertyCollector stops the tracker, then destroys the collector.
func (pc *pollingCollector) DestroyPropertyCollector(ctx *simulator.Context, c *types.DestroyPropertyCollector) soap.HasFault {
	pc.ts.remove(ctx.Map, pc.t)
	return pc.PropertyCollector.DestroyPropertyCollector(ctx, c)
}

// poll computes one answer: the next page of a truncated one, or what changed since
// r.Version (everything for the initial version ""). nil: nothing changed.
func (pc *pollingCollector) poll(ctx *simulator.Context, r *types.WaitForUpdatesEx) (*types.UpdateSet, types.BaseMethodFault) {
	t := pc.t
	switch {
	case r.Version == "":
		clear(t.filters) // every filter is read whole: what was recorded does not matter
		t.pages = nil
	case r.Version != t.last:
		return nil, &types.InvalidCollectorVersion{} // not the version this collector returned last
	case len(t.pages) > 0:
		return t.nextPage(), nil
	}
	dirty, came, names := t.take()
	var sets []types.PropertyFilterUpdate
	seen := map[types.ManagedObjectReference]bool{}
	for _, fref := range pc.Filter {
		f, ok := ctx.Session.Get(fref).(*simulator.PropertyFilter)
		if !ok {
			continue
		}
		seen[fref] = true
		snap := t.filters[fref]
		fresh := snap == nil
		if fresh {
			snap = &filterSnapshot{objects: map[types.ManagedObjectReference]map[string]types.AnyType{}}
			t.filters[fref] = snap
		}
		updates, fault := snap.update(ctx, pc.PropertyCollector, f.Spec, dirty, fresh || structural(f.Spec, came, names))
		if fault != nil {
			// What was recorded is taken and some snapshots moved on: no version
			// returned so far can be continued from (InvalidCollectorVersion), and the
			// client starts over from the initial version.
			t.last = "\x00"
			return nil, fault
		}
		if len(updates) > 0 {
			sets = append(sets, types.PropertyFilterUpdate{Filter: fref, ObjectSet: updates})
		}
	}
	for fref := range t.filters {
		if !seen[fref] {
			delete(t.filters, fref) // a filter destroyed since
		}
	}
	if len(sets) == 0 && r.Version != "" {
		return nil, nil
	}
	t.version++
	size := defaultMaxObjectUpdates
	if r.Options.MaxObjectUpdates > 0 {
		size = int(r.Options.MaxObjectUpdates)
	}
	t.pages = paginate(sets, size, t.version)
	return t.nextPage(), nil
}

// nextPage returns the next page of the answer being paged, and remembers its version.
func (t *changeTracker) nextPage() *types.UpdateSet {
	next := t.pages[0]
	t.pages = t.pages[1:]
	t.last = next.Version
	return &next
}

// pageVersion is the version of page i of answer v's truncated pages (the last page
// carries v itself).
func pageVersion(v, i int) string { return fmt.Sprintf("%d.%d", v, i) }

// paginate splits an answer into pages of at most max object updates; every page but
// the last is truncated and carries a version that asks for the next.
func paginate(sets []types.PropertyFilterUpdate, size, version int) []types.UpdateSet {
	var pages []types.UpdateSet
	cur := types.UpdateSet{}
	n := 0
	for _, fs := range sets {
		for len(fs.ObjectSet) > 0 {
			if n == size {
				pages = append(pages, cur)
				cur, n = types.UpdateSet{}, 0
			}
			take := min(size-n, len(fs.ObjectSet))
			cur.FilterSet = append(cur.FilterSet, types.PropertyFilterUpdate{Filter: fs.Filter, ObjectSet: fs.ObjectSet[:take]})
			fs.ObjectSet = fs.ObjectSet[take:]
			n += take
		}
	}
	pages = append(pages, cur)
	for i := range pages {
		if i < len(pages)-1 {
			pages[i].Version = pageVersion(version, i+1)
			pages[i].Truncated = types.NewBool(true)
		} else {
			pages[i].Version = strconv.Itoa(version)
		}
	}
	return pages
}

// update computes the filter's object updates since the snapshot and keeps the new one.
// With list set, the objects the filter selects are listed again (structural: an object
// of a type it reads came or went, or a property its traversal follows changed);
// otherwise they are the snapshot's, and only the dirty ones are read again.
func (s *filterSnapshot) update(ctx *simulator.Context, pc *simulator.PropertyCollector, spec types.PropertyFilterSpec,
	dirty map[types.ManagedObjectReference]bool, list bool) ([]types.ObjectUpdate, types.BaseMethodFault) {
	members := make(map[types.ManagedObjectReference]bool, len(s.objects))
	if list {
		var fault types.BaseMethodFault
		if members, fault = selected(ctx, pc, spec); fault != nil {
			return nil, fault
		}
	} else {
		for ref := range s.objects {
			members[ref] = true
		}
	}
	var ask []types.ManagedObjectReference
	for ref := range members {
		if _, had := s.objects[ref]; !had || dirty[ref] {
			ask = append(ask, ref)
		}
	}
	now, fault := properties(ctx, pc, spec, ask)
	if fault != nil {
		return nil, fault
	}
	var out []types.ObjectUpdate
	for _, ref := range ask {
		props, ok := now[ref]
		if !ok {
			continue // gone since it was listed: it leaves below
		}
		if old, had := s.objects[ref]; !had {
			out = append(out, types.ObjectUpdate{Obj: ref, Kind: types.ObjectUpdateKindEnter, ChangeSet: changes(nil, props)})
		} else if cs := changes(old, props); len(cs) > 0 {
			out = append(out, types.ObjectUpdate{Obj: ref, Kind: types.ObjectUpdateKindModify, ChangeSet: cs})
		}
		s.objects[ref] = props
	}
	for ref := range s.objects {
		if _, read := now[ref]; members[ref] && (read || !dirty[ref]) {
			continue
		}
		out = append(out, types.ObjectUpdate{Obj: ref, Kind: types.ObjectUpdateKindLeave})
		delete(s.objects, ref)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Obj.Value < out[j].Obj.Value })
	return out, nil
}

// structural tells whether what changed may change which objects the filter selects.
func structural(spec types.PropertyFilterSpec, came, names map[string]bool) bool {
	for _, p := range spec.PropSet {
		if came[p.Type] {
			return true
		}
	}
	for _, o := range spec.ObjectSet {
		if came[o.Obj.Type] {
			return true
		}
		for _, sel := range o.SelectSet {
			ts, ok := sel.(*types.TraversalSpec)
			if !ok {
				continue
			}
			// A traversal spec's type covers its subtypes (vSphere Web Services API,
			// TraversalSpec.type); the one the inventory's traversals meet.
			if names[ts.Type+"/"+ts.Path] || (ts.Type == "ComputeResource" && names["ClusterComputeResource/"+ts.Path]) {
				return true
			}
		}
	}
	return false
}

// selected lists the objects the filter selects (those it reads properties of).
func selected(ctx *simulator.Context, pc *simulator.PropertyCollector, spec types.PropertyFilterSpec) (map[types.ManagedObjectReference]bool, types.BaseMethodFault) {
	list := spec
	list.ReportMissingObjectsInResults = types.NewBool(true)
	list.PropSet = make([]types.PropertySpec, len(spec.PropSet))
	for i, p := range spec.PropSet {
		list.PropSet[i] = types.PropertySpec{Type: p.Type}
	}
	res, fault := retrieveOne(ctx, pc, list)
	if fault != nil {
		return nil, fault
	}
	out := make(map[types.ManagedObjectReference]bool, len(res))
	for _, oc := range res {
		out[oc.Obj] = true
	}
	return out, nil
}

// properties reads the filter's properties of the objects refs.
func properties(ctx *simulator.Context, pc *simulator.PropertyCollector, spec types.PropertyFilterSpec,
	refs []types.ManagedObjectReference) (map[types.ManagedObjectReference]map[string]types.AnyType, types.BaseMethodFault) {
	out := make(map[types.ManagedObjectReference]map[string]types.AnyType, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	read := types.PropertyFilterSpec{ReportMissingObjectsInResults: types.NewBool(true), PropSet: spec.PropSet}
	for _, r := range refs {
		read.ObjectSet = append(read.ObjectSet, types.ObjectSpec{Obj: r})
	}
	res, fault := retrieveOne(ctx, pc, read)
	if fault != nil {
		return nil, fault
	}
	for _, oc := range res {
		props := make(map[string]types.AnyType, len(oc.PropSet))
		for _, p := range oc.PropSet {
			props[p.Name] = p.Val
		}
		out[oc.Obj] = props
	}
	return out, nil
}

// retrieveOne runs one filter spec through the simulator's own collector (each object
// it returns is a copy: vcsim copies an object while it holds its lock).
func retrieveOne(ctx *simulator.Context, pc *simulator.PropertyCollector, spec types.PropertyFilterSpec) ([]types.ObjectContent, types.BaseMethodFault) {
	res := pc.RetrievePropertiesEx(ctx, &types.RetrievePropertiesEx{SpecSet: []types.PropertyFilterSpec{spec}})
	if f := res.Fault(); f != nil {
		if mf, ok := f.VimFault().(types.BaseMethodFault); ok {
			return nil, mf
		}
		return nil, &types.SystemError{Reason: f.String}
	}
	body, ok := res.(*methods.RetrievePropertiesExBody)
	if !ok || body.Res == nil || body.Res.Returnval == nil {
		return nil, nil
	}
	return body.Res.Returnval.Objects, nil
}

// changes are the property changes from old to now: an assign for each property added
// or changed, a remove for each one gone, in name order.
func changes(old, now map[string]types.AnyType) []types.PropertyChange {
	var out []types.PropertyChange
	for name, v := range now {
		if o, ok := old[name]; !ok || !reflect.DeepEqual(o, v) {
			out = append(out, types.PropertyChange{Name: name, Op: types.PropertyChangeOpAssign, Val: v})
		}
	}
	for name := range old {
		if _, ok := now[name]; !ok {
			out = append(out, types.PropertyChange{Name: name, Op: types.PropertyChangeOpRemove})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
