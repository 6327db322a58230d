package execute

import (
	"reflect"
	"testing"

	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/vsphere"
)

// TestStartGroups: the power-ons of one host stay together in the plan's order, every
// other start is a group of its own, and every queued start is in exactly one group.
func TestStartGroups(t *testing.T) {
	q := func(host string, op vsphere.Op) queuedStart { return queuedStart{host: host, op: op} }
	cases := []struct {
		name   string
		queued []queuedStart
		want   [][]int
	}{
		{"nothing", nil, nil},
		{"parks of one host run apart", []queuedStart{q("h1", vsphere.OpSuspend), q("h1", vsphere.OpSuspend), q("h1", vsphere.OpPowerOff)},
			[][]int{{0}, {1}, {2}}},
		{"power-ons of one host in order", []queuedStart{q("h1", vsphere.OpPowerOn), q("h2", vsphere.OpPowerOn), q("h1", vsphere.OpPowerOn)},
			[][]int{{0, 2}, {1}}},
		{"a power-on moved to another host goes with that host's", []queuedStart{q("h1", vsphere.OpPowerOn), {host: "h2", op: vsphere.OpPowerOn, step: plan.Step{Host: "h1"}}, q("h2", vsphere.OpPowerOn)},
			[][]int{{0, 1}, {2}}},
		{"mixed", []queuedStart{q("h1", vsphere.OpReconfigure), q("h1", vsphere.OpPowerOn), q("h1", vsphere.OpSuspend), q("h1", vsphere.OpPowerOn)},
			[][]int{{0}, {1, 3}, {2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := startGroups(c.queued)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("startGroups = %v, want %v", got, c.want)
			}
			seen := map[int]int{}
			for _, g := range got {
				for _, i := range g {
					seen[i]++
				}
			}
			for i := range c.queued {
				if seen[i] != 1 {
					t.Errorf("start %d is in %d groups, want 1", i, seen[i])
				}
			}
		})
	}
}
