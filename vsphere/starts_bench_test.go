package vsphere_test

import (
	"fmt"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/gpupool/gpupool/vsphere"
)

// BenchmarkTaskStarts asks vgpusim (in this process) to power off 1,024 VMs of 64 hosts
// and to power them on again, at a number of calls at once: how fast one vCenter session
// takes task starts, the bound of execute.Starts' per-pool limit.
func BenchmarkTaskStarts(b *testing.B) {
	y, names := sixtyFourHosts(false)
	for _, at := range []int{16, 32, 64} {
		b.Run(fmt.Sprintf("at-once-%d", at), func(b *testing.B) {
			e := newEnv(b, y)
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
