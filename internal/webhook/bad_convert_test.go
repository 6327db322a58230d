package webhook_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// convertCases are layouts by count admission refuses: each names the field with its
// index, the value and what to write.
func convertCases() []badCase {
	conv := func(mutate func(c *gpupoolv1.Conversion)) func(p *gpupoolv1.GPUPoolProfile) {
		return func(p *gpupoolv1.GPUPoolProfile) {
			c := &gpupoolv1.Conversion{Base: "day", Count: 2, Profile: "grid_p100-16q",
				Candidates: []gpupoolv1.Candidate{{VM: "bad-n1"}, {VM: "bad-n2"}, {VM: "bad-n3"}}}
			if mutate != nil {
				mutate(c)
			}
			p.Spec.Layouts[1] = gpupoolv1.Layout{Name: "night", Convert: c}
		}
	}
	return []badCase{
		{name: "convert and workers", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			conv(nil)(p)
			p.Spec.Layouts[1].Workers = []gpupoolv1.Worker{{VM: "bad-c", Profile: "grid_p100-16q"}}
		}, path: "spec.layouts[1].workers", fix: "remove workers or convert"},
		{name: "convert base unknown", mutate: conv(func(c *gpupoolv1.Conversion) { c.Base = "dya" }),
			path: "spec.layouts[1].convert.base", value: `"dya"`, fix: `write one of "day"`},
		{name: "convert base is itself", mutate: conv(func(c *gpupoolv1.Conversion) { c.Base = "night" }),
			path: "spec.layouts[1].convert.base", value: `"night"`, fix: "is the layout itself"},
		{name: "convert base is by count", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			conv(nil)(p)
			p.Spec.Layouts = append(p.Spec.Layouts, gpupoolv1.Layout{Name: "late", Convert: &gpupoolv1.Conversion{
				Base: "night", Count: 1, Profile: "grid_p100-8q", Candidates: []gpupoolv1.Candidate{{VM: "bad-l1"}}}})
		}, path: "spec.layouts[2].convert.base", value: `"night"`, fix: `write the layout "night" converts from instead`},
		{name: "convert count zero", mutate: conv(func(c *gpupoolv1.Conversion) { c.Count = 0 }),
			path: "spec.layouts[1].convert.count", value: "0", fix: "to convert none, use the base layout"},
		{name: "convert count more than candidates", mutate: conv(func(c *gpupoolv1.Conversion) { c.Count = 4 }),
			path: "spec.layouts[1].convert.count", value: "4", fix: "lower count to at most 3, or list more candidates"},
		{name: "convert profile", mutate: conv(func(c *gpupoolv1.Conversion) { c.Profile = "p100-16q" }),
			path: "spec.layouts[1].convert.profile", value: `"p100-16q"`, fix: "grid_"},
		{name: "convert no candidates", mutate: conv(func(c *gpupoolv1.Conversion) { c.Candidates = nil }),
			path: "spec.layouts[1].convert.candidates", fix: "Required value"},
		{name: "convert candidate twice", mutate: conv(func(c *gpupoolv1.Conversion) { c.Candidates[2].VM = "bad-n1" }),
			path: "spec.layouts[1].convert.candidates[2].vm", value: `"bad-n1"`, fix: "list each candidate once"},
		{name: "convert candidate relative path", mutate: conv(func(c *gpupoolv1.Conversion) { c.Candidates[1].VM = "vm/bad-n2" }),
			path: "spec.layouts[1].convert.candidates[1].vm", value: `"vm/bad-n2"`, fix: "absolute inventory path"},
		{name: "convert candidate node and noNode", mutate: conv(func(c *gpupoolv1.Conversion) { c.Candidates[0].Node, c.Candidates[0].NoNode = "n1", true }),
			path: "spec.layouts[1].convert.candidates[0]", fix: "not both"},
		{name: "convert vgpus", mutate: conv(func(c *gpupoolv1.Conversion) { c.VGPUs = 17 }),
			path: "spec.layouts[1].convert.vgpus", value: "17"},
		{name: "convert candidates and candidatesFrom", mutate: conv(func(c *gpupoolv1.Conversion) {
			c.CandidatesFrom = &gpupoolv1.VMSelector{NamePattern: "bad-n*"}
		}), path: "spec.layouts[1].convert.candidatesFrom", fix: "not both"},
		{name: "convert candidatesFrom with no source", mutate: conv(func(c *gpupoolv1.Conversion) {
			c.Candidates, c.CandidatesFrom = nil, &gpupoolv1.VMSelector{}
		}), path: "spec.layouts[1].convert.candidatesFrom", fix: "namePattern (such as gpu-night-*)"},
		{name: "convert candidatesFrom bad folder", mutate: conv(func(c *gpupoolv1.Conversion) {
			c.Candidates, c.CandidatesFrom = nil, &gpupoolv1.VMSelector{Folder: "/DC0/host/gpu"}
		}), path: "spec.layouts[1].convert.candidatesFrom.folder", value: `"/DC0/host/gpu"`, fix: "relative to the vm folder"},
		{name: "convert disruption weight negative", mutate: conv(func(c *gpupoolv1.Conversion) {
			c.Disruption = &gpupoolv1.DisruptionWeights{DoNotDisrupt: -1}
		}), path: "spec.layouts[1].convert.disruption.doNotDisrupt", value: "-1"},
		{name: "countFromDemand on a layout with workers", mutate: sizedBy(gpupoolv1.DemandBringIn, 1, 2),
			path: "spec.demand.rules[0].countFromDemand", value: "{min: 1, max: 2}", fix: "give layout \"night\" convert"},
		{name: "countFromDemand on a Skip rule", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			conv(nil)(p)
			sizedBy(gpupoolv1.DemandSkip, 1, 2)(p)
		}, path: "spec.demand.rules[0].countFromDemand", fix: "set action: BringIn"},
		{name: "countFromDemand max below min", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			conv(nil)(p)
			sizedBy(gpupoolv1.DemandBringIn, 3, 2)(p)
		}, path: "spec.demand.rules[0].countFromDemand", fix: "raise max, or lower min"},
		{name: "countFromDemand max more than candidates", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			conv(nil)(p)
			sizedBy(gpupoolv1.DemandBringIn, 1, 4)(p)
		}, path: "spec.demand.rules[0].countFromDemand.max", value: "4", fix: "write max: 3 or fewer"},
		{name: "countFromDemand min zero", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			conv(nil)(p)
			sizedBy(gpupoolv1.DemandBringIn, 1, 2)(p)
		}, raw: func(u map[string]any) {
			rule := u["spec"].(map[string]any)["demand"].(map[string]any)["rules"].([]any)[0].(map[string]any)
			rule["countFromDemand"].(map[string]any)["min"] = int64(0)
		}, path: "spec.demand.rules[0].countFromDemand.min", fix: "leave it out for at least 1"},
	}
}

// sizedBy gives the pool a demand rule of action for layout night with countFromDemand.
func sizedBy(action gpupoolv1.DemandAction, lo, hi int32) func(p *gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{
			{Layout: "night", Action: action, CountFromDemand: &gpupoolv1.CountFromDemand{Min: lo, Max: hi}}}}
	}
}
