package demand

import (
	"maps"
	"slices"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// DrainedBySwitch is, for every other layout, the nodes a switch from the active layout
// to it drains: those of the active layout's workers that the other layout does not list
// with the same profile and number of vGPUs.
func DrainedBySwitch(pool *gpupoolv1.GPUPoolProfile) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	active := pool.Spec.LayoutNamed(pool.Status.ActiveLayout)
	if active == nil {
		return out
	}
	nodeOf := workerNodes(pool)
	for i := range pool.Spec.Layouts {
		to := &pool.Spec.Layouts[i]
		if to.Name == active.Name {
			continue
		}
		set := map[string]bool{}
		for _, w := range active.Workers {
			if n := nodeOf[w.VM]; n != "" && !keeps(to, w) {
				set[n] = true
			}
		}
		out[to.Name] = set
	}
	return out
}

// KeptByEveryOther is, for every layout, the nodes of its workers that every other
// layout lists with the same profile and number of vGPUs: shared nodes that no switch
// away from the layout drains.
func KeptByEveryOther(pool *gpupoolv1.GPUPoolProfile) map[string]map[string]bool {
	nodeOf := workerNodes(pool)
	out := map[string]map[string]bool{}
	for i := range pool.Spec.Layouts {
		l := &pool.Spec.Layouts[i]
		set := map[string]bool{}
		for _, w := range l.Workers {
			n := nodeOf[w.VM]
			if n == "" || len(pool.Spec.Layouts) < 2 {
				continue
			}
			all := true
			for j := range pool.Spec.Layouts {
				if j != i && !keeps(&pool.Spec.Layouts[j], w) {
					all = false
					break
				}
			}
			if all {
				set[n] = true
			}
		}
		out[l.Name] = set
	}
	return out
}

// workerNodes maps the pool's VMs to their nodes, as status.workers records them.
func workerNodes(pool *gpupoolv1.GPUPoolProfile) map[string]string {
	nodeOf := map[string]string{}
	for _, w := range pool.Status.Workers {
		nodeOf[w.VM] = w.Node
	}
	return nodeOf
}

func keeps(l *gpupoolv1.Layout, w gpupoolv1.Worker) bool {
	for _, o := range l.Workers {
		if o.VM == w.VM {
			return o.Profile == w.Profile && max(o.VGPUs, 1) == max(w.VGPUs, 1)
		}
	}
	return false
}

// nodesRead are the nodes whose pods demand reads, sorted: those serving a layout of the
// pool and those a switch would drain.
func nodesRead(layoutOf map[string]string, drained map[string]map[string]bool) []string {
	set := map[string]bool{}
	for n := range layoutOf {
		set[n] = true
	}
	for _, ns := range drained {
		for n := range ns {
			set[n] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}
