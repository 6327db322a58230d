package execute

import (
	"testing"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
)

// TestPowerOnHost: a power-on the plan moved to a host the inventory does not hold is an
// error, never "" (which powers the VM on on its own, unavailable, host).
func TestPowerOnHost(t *testing.T) {
	inv := &inventory.Inventory{Hosts: []inventory.Host{{Name: "esx-01", Ref: "host-1"}, {Name: "esx-02", Ref: "host-2"}}}
	vm := &inventory.VM{Name: "vm-1", Host: "esx-01"}
	for _, tc := range []struct {
		step    string
		want    string
		wantErr bool
	}{{"", "", false}, {"esx-01", "", false}, {"esx-02", "host-2", false}, {"esx-09", "", true}} {
		got, err := powerOnHost(inv, vm, plan.Step{Action: plan.PowerOn, VM: "vm-1", Host: tc.step})
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("step host %q: %q, %v; want %q, error %v", tc.step, got, err, tc.want, tc.wantErr)
		}
	}
}
