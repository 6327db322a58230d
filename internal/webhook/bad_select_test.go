package webhook_test

import (
	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// selectCases are select layouts admission refuses: each names the field with its
// index, the value and what to write.
func selectCases() []badCase {
	sel := func(mutate func(s *gpupoolv1.Selection)) func(p *gpupoolv1.GPUPoolProfile) {
		return func(p *gpupoolv1.GPUPoolProfile) {
			s := &gpupoolv1.Selection{Profile: "grid_p100-16q", VMSelector: gpupoolv1.VMSelector{NamePattern: "bad-night-*"}}
			if mutate != nil {
				mutate(s)
			}
			p.Spec.Layouts[1] = gpupoolv1.Layout{Name: "night", Select: s}
		}
	}
	return []badCase{
		{name: "select and workers", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			sel(nil)(p)
			p.Spec.Layouts[1].Workers = []gpupoolv1.Worker{{VM: "bad-c", Profile: "grid_p100-16q"}}
		}, path: "spec.layouts[1].workers", fix: "remove workers or select"},
		{name: "select and convert", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			sel(nil)(p)
			p.Spec.Layouts[1].Convert = &gpupoolv1.Conversion{Base: "day", Count: 1, Profile: "grid_p100-16q",
				Candidates: []gpupoolv1.Candidate{{VM: "bad-n1"}}}
		}, path: "spec.layouts[1].select", fix: "not both"},
		{name: "select no source", mutate: sel(func(s *gpupoolv1.Selection) { s.NamePattern = "" }),
			path: "spec.layouts[1].select", fix: "namePattern (such as gpu-day-*)"},
		{name: "select profile", mutate: sel(func(s *gpupoolv1.Selection) { s.Profile = "p100-16q" }),
			path: "spec.layouts[1].select.profile", value: `"p100-16q"`, fix: "grid_p100-4q"},
		{name: "select vgpus", mutate: sel(func(s *gpupoolv1.Selection) { s.VGPUs = 17 }),
			path: "spec.layouts[1].select.vgpus", value: "17"},
		{name: "select bad glob", mutate: sel(func(s *gpupoolv1.Selection) { s.NamePattern = "bad-[night" }),
			path: "spec.layouts[1].select.namePattern", value: `"bad-[night"`, fix: "a [ needs its ]"},
		{name: "select glob with a folder", mutate: sel(func(s *gpupoolv1.Selection) { s.NamePattern = "gpu/night/bad-*" }),
			path: "spec.layouts[1].select.namePattern", value: `"gpu/night/bad-*"`, fix: `write folder: "gpu/night", and the name's glob in namePattern: "bad-*"`},
		{name: "select folder outside the vm folder", mutate: sel(func(s *gpupoolv1.Selection) { s.Folder = "/DC0/host/gpu" }),
			path: "spec.layouts[1].select.folder", value: `"/DC0/host/gpu"`, fix: "relative to the vm folder, such as gpu/day, or as /DC0/vm/gpu/day"},
		{name: "select folder with dot-dot", mutate: sel(func(s *gpupoolv1.Selection) { s.Folder = "gpu/../night" }),
			path: "spec.layouts[1].select.folder", value: `"gpu/../night"`, fix: `write it such as "night"`},
		{name: "select tag category with whitespace", mutate: sel(func(s *gpupoolv1.Selection) {
			s.Tag = &gpupoolv1.TagReference{Category: "gpupool\n", Name: "night"}
		}), path: "spec.layouts[1].select.tag.category", value: `"gpupool\n"`, fix: `write "gpupool"`},
		{name: "select tag name blank", mutate: sel(func(s *gpupoolv1.Selection) {
			s.NamePattern = ""
			s.Tag = &gpupoolv1.TagReference{Category: "gpupool", Name: "  "}
		}), path: "spec.layouts[1].select.tag.name", fix: "as vCenter shows it"},
		{name: "select machineDeployment name", mutate: sel(func(s *gpupoolv1.Selection) {
			s.MachineDeployment = &gpupoolv1.MachineDeploymentReference{Namespace: "capi", Name: "GPU_Night"}
		}), path: "spec.layouts[1].select.machineDeployment.name", value: `"GPU_Night"`, fix: "is not a MachineDeployment name"},
	}
}
