package main

import (
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestSelectionDescription: completion and switch describe a select layout by what it
// selects (its workers are found by the operator on every pass).
func TestSelectionDescription(t *testing.T) {
	for _, tc := range []struct {
		sel  gpupoolv1.Selection
		want string
	}{
		{gpupoolv1.Selection{Profile: "grid_p100-4q", VMSelector: gpupoolv1.VMSelector{NamePattern: "gpu-day-*", Folder: "gpu/day"}},
			"the grid_p100-4q VMs named gpu-day-*, in folder gpu/day"},
		{gpupoolv1.Selection{Profile: "grid_a100-40c", VGPUs: 2, VMSelector: gpupoolv1.VMSelector{
			MachineDeployment: &gpupoolv1.MachineDeploymentReference{Namespace: "capi", Name: "gpu-training"}}},
			"the 2x grid_a100-40c VMs of MachineDeployment capi/gpu-training"},
	} {
		if got := selection(&tc.sel); got != tc.want {
			t.Errorf("selection(%+v) = %q, want %q", tc.sel, got, tc.want)
		}
	}
}
