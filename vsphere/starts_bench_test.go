package vsphere_test

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/gpupool/gpupool/vsphere"
)

// BenchmarkTaskStarts asks vgpusim (in this process) to power off 1,024 VMs of 64 hosts
// and to power them on again, at a number of calls at once: how fast one vCenter session
// takes task starts, the bound of execute.Starts' per-pool limit.
func BenchmarkTaskStarts(b *testing.B) {
	var y strings.Builder
	var names []string
	y.WriteString("datacenter: dc1\nhosts:\n")
	for h := range 64 {
		fmt.Fprintf(&y, "  - name: esx-%02d\n    gpus:\n", h)
		for g := range 4 {
			fmt.Fprintf(&y, "      - {model: Tesla P100, memoryGiB: 16, pciId: \"0000:%02x:00.0\"}\n", 0x10+g)
		}
		y.WriteString("    profiles: [{name: grid_p100-4q}, {name: grid_p100-16q}]\n")
	}
	y.WriteString("vms:\n")
	for h := range 64 {
		for g := range 4 {
			for k := range 4 {
				names = append(names, fmt.Sprintf("day-%02d-%d-%d", h, g, k))
				fmt.Fprintf(&y, "  - {name: %s, host: esx-%02d, profile: grid_p100-4q, powerState: poweredOn}\n", names[len(names)-1], h)
			}
		}
	}
	for _, at := range []int{16, 32, 64} {
		b.Run(fmt.Sprintf("at-once-%d", at), func(b *testing.B) {
			e := newEnv(b, y.String())
			refs := make([]string, len(names))
			for i, n := range names {
				refs[i] = e.ref(n)
			}
			run := func(op func(ref string) (string, error)) {
				ids := make([]string, len(refs))
				workqueue.ParallelizeUntil(e.ctx, at, len(refs), func(i int) {
					id, err := op(refs[i])
					if err != nil {
						b.Error(err)
					}
					ids[i] = id
				})
				var started []string
				for _, id := range ids {
					if id != "" {
						started = append(started, id)
					}
				}
				if len(started) != len(ids) {
					b.Fatalf("%d of %d calls started a task", len(started), len(ids))
				}
				// WaitTasks returns when one ends: wait until every one has.
				for range len(started) + 1 {
					infos, err := e.c.Tasks(e.ctx, started)
					if err != nil {
						b.Fatal(err)
					}
					var pending []string
					for _, id := range started {
						if infos[id].State == vsphere.TaskError {
							b.Fatalf("task %s: %s", id, infos[id].Error)
						}
						if st := infos[id].State; st != vsphere.TaskSuccess {
							pending = append(pending, id)
						}
					}
					if started = pending; len(started) == 0 {
						return
					}
					if err := e.c.WaitTasks(e.ctx, started); err != nil {
						b.Fatal(err)
					}
				}
				b.Fatalf("%d tasks did not end", len(started))
			}
			for b.Loop() {
				run(func(ref string) (string, error) { return e.c.PowerOff(e.ctx, ref) })
				run(func(ref string) (string, error) { return e.c.PowerOn(e.ctx, ref, "") })
			}
		})
	}
}
