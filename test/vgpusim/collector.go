package vgpusim

import (
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
	if len(r.SpecSet) < 2 || r.Options.MaxObjects > 0 {
		return pc.PropertyCollector.RetrievePropertiesEx(ctx, r)
	}
	out := &types.RetrieveResult{}
	for _, spec := range r.SpecSet {
		one := *r
		one.SpecSet = []types.PropertyFilterSpec{spec}
		res := pc.PropertyCollector.RetrievePropertiesEx(ctx, &one)
		if res.Fault() != nil {
			return res
		}
		if body, ok := res.(*methods.RetrievePropertiesExBody); ok && body.Res != nil && body.Res.Returnval != nil {
			out.Objects = append(out.Objects, body.Res.Returnval.Objects...)
		}
	}
	return &methods.RetrievePropertiesExBody{Res: &types.RetrievePropertiesExResponse{Returnval: out}}
}

// routeCollector sends RetrievePropertiesEx to specwiseCollector: the session's own
// collector (the simulator prefers it to what the handler returns) is wrapped in place;
// the shared one is wrapped for the call.
func routeCollector(ctx *simulator.Context, m *simulator.Method) (*specwiseCollector, bool) {
	if m.Name != "RetrievePropertiesEx" || m.This.Type != "PropertyCollector" {
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
