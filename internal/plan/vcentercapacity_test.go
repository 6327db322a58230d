package plan

import (
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// said is a VCenterCapacity that answered for one profile.
func said(profile string, remaining, most int) inventory.VCenterCapacity {
	return inventory.VCenterCapacity{State: inventory.CapacityRead, Profiles: map[string]inventory.ProfileCapacity{
		profile: {Remaining: remaining, Max: most},
	}}
}

func TestVCenterSecondOpinion(t *testing.T) {
	const p16 = "grid_p100-16q"
	tests := []struct {
		name string
		// setup builds the world; layout is the one to check.
		setup  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world)
		layout string
		vc     inventory.VCenterCapacity
		// want is the problem's message, or parts of it; none when empty.
		want []string
	}{
		{
			name:   "agreement: two idle GPUs, vCenter has room for two",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return twoGPUHost(t, "") },
			layout: "night",
			vc:     said(p16, 2, 2),
		},
		{
			name:   "vCenter says no room that gpupool finds",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return twoGPUHost(t, "") },
			layout: "night",
			vc:     said(p16, 1, 2),
			want: []string{"layout night: gpupool's packing finds room for 2 x grid_p100-16q on host esx-01, " +
				"vCenter (DirectPathProfileManager.QueryCapacity) says remaining 1, max 2; gpupool follows vCenter"},
		},
		{
			name:   "not offered: gpupool's packing alone",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return twoGPUHost(t, "") },
			layout: "night",
			vc:     inventory.VCenterCapacity{},
		},
		{
			name:   "query failed: gpupool's packing alone",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return twoGPUHost(t, "") },
			layout: "night",
			vc:     inventory.VCenterCapacity{State: inventory.CapacityFailed, Error: "SystemError"},
		},
		{
			name:   "vCenter could not count the profile: gpupool's packing alone",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return twoGPUHost(t, "") },
			layout: "night",
			vc:     said("grid_p100-4q", 0, 8),
		},
		{
			// Day to night: the four 4Q vGPUs free the GPU, so vCenter's remaining
			// (counted while they run) is not the bound; its max is.
			name:   "room freed by the layout: vCenter's max bounds",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return sample(t, "day") },
			layout: "night",
			vc:     said(p16, 0, 1),
		},
		{
			name:   "room freed by the layout, vCenter says the host never holds it",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return sample(t, "day") },
			layout: "night",
			vc:     said(p16, 0, 0),
			want: []string{"gpupool's packing finds room for 1 x grid_p100-16q on host esx-01, vCenter (DirectPathProfileManager.QueryCapacity) says remaining 0 and at most 0 with no VM running",
				"gpupool follows vCenter"},
		},
		{
			name:   "gpupool refuses where vCenter has room: gpupool's refusal stands",
			setup:  func(t *testing.T) (*gpupoolv1.GPUPoolProfileSpec, *world) { return twoGPUHost(t, "grid_p100-4q") },
			layout: "night",
			vc:     said(p16, 2, 2),
			want:   []string{"(vCenter's DirectPathProfileManager.QueryCapacity says remaining 2 x grid_p100-16q on host esx-01; gpupool keeps its own refusal)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec, w := tc.setup(t)
			w.inv.Hosts[0].VCenterCapacity = tc.vc
			got := Check(spec, tc.layout, w.inv)
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("problems %+v, want none", got)
				}
				p := build(t, spec, w, tc.layout)
				if len(p.Problems) != 0 || len(p.Hosts) == 0 {
					t.Fatalf("plan %v", p)
				}
				return
			}
			if len(got) != 1 || got[0].Reason != ReasonInsufficientGPU {
				t.Fatalf("problems %+v, want one %s", got, ReasonInsufficientGPU)
			}
			for _, part := range tc.want {
				if !strings.Contains(got[0].Message, part) {
					t.Errorf("message %q\nlacks %q", got[0].Message, part)
				}
			}
			// A refused layout plans no step: nothing is drained or parked for it.
			if p := build(t, spec, w, tc.layout); len(p.Problems) != 1 || len(p.Hosts) != 0 {
				t.Fatalf("plan %v", p)
			}
		})
	}
}
