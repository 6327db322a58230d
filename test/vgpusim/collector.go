package vgpusim

import (
	"sync"

	"github.com/google/uuid"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// specwiseCollector answers a RetrievePropertiesEx of several filter specs as vCenter
// does: each spec's properties for that spec's objects. govmomi's simulator applies the
// properties of every spec to every object any spec selects, so a cheap listing of the
// whole datacenter sent with a full read of a few objects would come back in full, and a
// client that scopes its reads could not be told from one that does not.
// (vSphere Web Services API, PropertyCollector.RetrievePropertiesEx: "specSet: Specifies
// the properties to be retrieved"; PropertyFilterSpec: "propSet: Set of properties to
// include in the filter, specified for each object type", with the objectSet it selects.)
type specwiseCollector struct {
	*simulator.PropertyCollector
}

func (pc specwiseCollector) RetrievePropertiesEx(ctx *simulator.Context, r *types.RetrievePropertiesEx) soap.HasFault {
	if len(r.SpecSet) < 2 && r.Options.MaxObjects <= 0 {
		return pc.PropertyCollector.RetrievePropertiesEx(ctx, r)
	}
	out := &types.RetrieveResult{}
	for _, spec := range r.SpecSet {
		one := *r
		one.SpecSet, one.Options = []types.PropertyFilterSpec{spec}, types.RetrieveOptions{}
		res := pc.PropertyCollector.RetrievePropertiesEx(ctx, &one)
		if res.Fault() != nil {
			return res
		}
		if body, ok := res.(*methods.RetrievePropertiesExBody); ok && body.Res != nil && body.Res.Returnval != nil {
			out.Objects = append(out.Objects, body.Res.Returnval.Objects...)
		}
	}
	out.Objects, out.Token = retrievePages.first(out.Objects, r.Options.MaxObjects)
	return &methods.RetrievePropertiesExBody{Res: &types.RetrievePropertiesExResponse{Returnval: out}}
}

// ContinueRetrievePropertiesEx returns the next page of a read RetrievePropertiesEx
// paged (RetrieveOptions.MaxObjects: "A positive value causes RetrievePropertiesEx to
// suspend the retrieval when the count of objects reaches the specified maximum. [...]
// Any remaining objects may be retrieved with ContinueRetrievePropertiesEx"; "Each token
// may be passed to ContinueRetrievePropertiesEx only once"): the pages are of the one
// answer the first call collected.
func (pc specwiseCollector) ContinueRetrievePropertiesEx(ctx *simulator.Context, r *types.ContinueRetrievePropertiesEx) soap.HasFault {
	objs, token, ok := retrievePages.next(r.Token)
	if !ok {
		return &methods.ContinueRetrievePropertiesExBody{Fault_: simulator.Fault("", &types.InvalidArgument{InvalidProperty: "token"})}
	}
	return &methods.ContinueRetrievePropertiesExBody{Res: &types.ContinueRetrievePropertiesExResponse{
		Returnval: types.RetrieveResult{Objects: objs, Token: token}}}
}

// pagedReads holds the rest of each paged read by token, until it is asked for.
type pagedReads struct {
	mu   sync.Mutex
	rest map[string]pagedRead
}

type pagedRead struct {
	objects []types.ObjectContent
	max     int32
}

var retrievePages = &pagedReads{rest: map[string]pagedRead{}}

// first returns the first page of objects (at most max; all when max <= 0) and the token
// of the rest, "" when there is none.
func (p *pagedReads) first(objects []types.ObjectContent, max int32) ([]types.ObjectContent, string) {
	if max <= 0 || len(objects) <= int(max) {
		return objects, ""
	}
	token := uuid.NewString()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rest[token] = pagedRead{objects: objects[max:], max: max}
	return objects[:max], token
}

// next returns the page after token, once.
func (p *pagedReads) next(token string) ([]types.ObjectContent, string, bool) {
	p.mu.Lock()
	r, ok := p.rest[token]
	delete(p.rest, token)
	p.mu.Unlock()
	if !ok {
		return nil, "", false
	}
	objs, next := p.first(r.objects, r.max)
	return objs, next, true
}

// routeCollector sends RetrievePropertiesEx and ContinueRetrievePropertiesEx to
// specwiseCollector: the session's own collector (the simulator prefers it to what the
// handler returns) is wrapped in place; the shared one is wrapped for the call.
func routeCollector(ctx *simulator.Context, m *simulator.Method) (*specwiseCollector, bool) {
	if (m.Name != "RetrievePropertiesEx" && m.Name != "ContinueRetrievePropertiesEx") || m.This.Type != "PropertyCollector" {
		return nil, false
	}
	if ctx.Session != nil {
		// Session.Get makes the session's own collector on first use.
		if pc, ok := ctx.Session.Get(m.This).(*simulator.PropertyCollector); ok {
			ctx.Session.Registry.Put(&specwiseCollector{PropertyCollector: pc})
			return nil, false
		}
	}
	if pc, ok := ctx.Map.Get(m.This).(*simulator.PropertyCollector); ok {
		return &specwiseCollector{PropertyCollector: pc}, true
	}
	return nil, false
}
