package replay

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/trace"
)

// pod is a recorded pod in the replay.
type pod struct {
	name    string
	gpus    int64
	layouts map[string]bool
	counts  bool
	dnd     bool
	arrive  time.Time
	// leave is when a service went (zero: it stayed to the end); work is a batch pod's
	// recorded run, remaining what is left of it.
	leave           time.Time
	work, remaining time.Duration
	running, gone   bool
	started         time.Time
	everStarted     bool
	// A Workload (workload) waits, taking no GPU, until the replay admits it (its layouts
	// ready); admitted is when the recording's was; members are its pods, which arrive
	// (and leave) offset after the replay's admission. group is the UID of the controller
	// (a Job) a Workload or pod is of.
	workload bool
	group    string
	admitted time.Time
	members  []*pod
	offset   time.Duration
}

// batch: the pod ran to its end in the recording, so its run is work to be done.
func (p *pod) batch() bool { return p.work > 0 }

// waits: what the replay measures waiting of (queued GPU-hours, waits): batch pods and
// Workloads.
func (p *pod) waits() bool { return p.batch() || p.workload }

// ready: gpupool's check would pass the Workload now: every layout it reserved is the
// active one, with no switch in flight.
func (p *pod) ready(active string, settled bool) bool {
	if !settled {
		return false
	}
	for l, ok := range p.layouts {
		if ok && l != active {
			return false
		}
	}
	return p.layouts[active]
}

// stop evicts a running pod: a batch pod starts over, a service waits to run again.
func (p *pod) stop() { p.running, p.remaining = false, p.work }

// podsOf are the trace's pods in the order they arrived, each with the layouts of spec
// that could take it: its recorded constraints matched against spec's layouts' node
// shapes (demand's matcher), or, for a layout with no shape in spec (one that selects
// or converts its VMs) or a pod recorded without constraints, the layouts recorded.
func podsOf(t *trace.Trace, spec *gpupoolv1.GPUPoolProfileSpec) ([]*pod, error) {
	shapes := demand.ShapesOf(&gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: t.Header.Pool}, Spec: *spec})
	byName := map[string]*pod{}
	starts := map[string]time.Time{}
	var out []*pod
	for _, ev := range t.Events {
		switch ev.Kind {
		case trace.Arrive:
			p := &pod{name: ev.Pod, gpus: ev.GPUs, counts: ev.Counts, dnd: ev.DoNotDisrupt, arrive: ev.At, layouts: map[string]bool{},
				workload: ev.Workload, group: ev.Group}
			for _, l := range spec.Layouts {
				switch {
				case ev.Constraints != nil && len(shapes[l.Name]) > 0:
					p.layouts[l.Name] = shapes.Serves(l.Name, ev.Constraints.Pod())
				default:
					p.layouts[l.Name] = slices.Contains(ev.Layouts, l.Name)
				}
			}
			byName[ev.Pod] = p // a pod of a name that came back is another pod
			delete(starts, ev.Pod)
			out = append(out, p)
		case trace.Start:
			starts[ev.Pod] = ev.At
		case trace.End:
			p := byName[ev.Pod]
			if p == nil {
				return nil, fmt.Errorf("pod %s ends without arriving", ev.Pod)
			}
			switch s, ok := starts[ev.Pod]; {
			case p.workload:
				p.admitted = ev.At
			case ok && ev.Outcome != trace.Deleted && ev.At.After(s):
				p.work, p.remaining = ev.At.Sub(s), ev.At.Sub(s)
			default:
				p.leave = ev.At
			}
		}
	}
	return deferMembers(out), nil
}

// deferMembers takes out of the arrivals the pods of a Workload admitted in the
// recording (Kueue created them on its admission): they arrive when the replay admits
// the Workload, as long after it as they did after the recorded admission. A pod belongs
// to the latest Workload of its group admitted at or before it arrived (a Job preempted
// and held again has a Workload each time); others arrive as recorded.
func deferMembers(pods []*pod) []*pod {
	byGroup := map[string][]*pod{}
	for _, p := range pods {
		if p.workload && p.group != "" && !p.admitted.IsZero() {
			byGroup[p.group] = append(byGroup[p.group], p)
		}
	}
	if len(byGroup) == 0 {
		return pods
	}
	out := pods[:0:0]
	for _, p := range pods {
		var wl *pod
		if !p.workload {
			for _, c := range byGroup[p.group] {
				if !c.admitted.After(p.arrive) && (wl == nil || c.admitted.After(wl.admitted)) {
					wl = c
				}
			}
		}
		if wl == nil {
			out = append(out, p)
			continue
		}
		p.offset = p.arrive.Sub(wl.admitted)
		wl.members = append(wl.members, p)
	}
	return out
}

// capacities are what each of spec's layouts offers: from its workers (each vGPU a GPU
// for pods, worth its frame buffer over its board's), or, for a layout that selects or
// converts its VMs, the trace header's. A layout neither gives is an error.
func capacities(spec *gpupoolv1.GPUPoolProfileSpec, recorded map[string]trace.Capacity) (map[string]trace.Capacity, error) {
	out := map[string]trace.Capacity{}
	for i, l := range spec.Layouts {
		if c, ok := LayoutCapacity(&l); ok {
			out[l.Name] = c
			continue
		}
		c, ok := recorded[l.Name]
		if !ok {
			return nil, fmt.Errorf("spec.layouts[%d] (%s): its capacity is not in its workers (it selects or converts its VMs) nor in the trace's header: add header.capacity.%s", i, l.Name, l.Name)
		}
		out[l.Name] = c
	}
	return out, nil
}

// LayoutCapacity is what a layout's listed workers offer, false for a layout that
// lists none (it selects or converts its VMs).
func LayoutCapacity(l *gpupoolv1.Layout) (trace.Capacity, bool) {
	if len(l.Workers) == 0 || l.Convert != nil || l.Select != nil {
		return trace.Capacity{}, false
	}
	var c trace.Capacity
	for _, wk := range l.Workers {
		if wk.NoNode {
			continue
		}
		n := int64(max(wk.VGPUs, 1))
		mem := int64(0)
		if b, ok := inventory.ProfileBoard(wk.Profile); ok {
			mem = b.MemGiB * 1024
		}
		c.GPUs += n
		c.Equivalents += float64(n) * accounting.VGPUShare(wk.Profile, mem)
	}
	return c, true
}

// learnSwitchTimes are how long switches take: fixed when positive, else the median
// of the trace's completed switches per target layout, and overall for the others.
func learnSwitchTimes(t *trace.Trace, fixed time.Duration) (map[string]time.Duration, time.Duration) {
	if fixed > 0 {
		return nil, fixed
	}
	by := map[string][]time.Duration{}
	var all []time.Duration
	for _, ev := range t.Events {
		if ev.Kind != trace.Switch || ev.Aborted || ev.Finished.IsZero() || !ev.Finished.After(ev.At) {
			continue
		}
		d := ev.Finished.Sub(ev.At)
		by[ev.To] = append(by[ev.To], d)
		all = append(all, d)
	}
	out := map[string]time.Duration{}
	for l, ds := range by {
		out[l] = median(ds)
	}
	if len(all) == 0 {
		return out, DefaultSwitchTime
	}
	return out, median(all)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func (w *world) switchTime(layout string) time.Duration {
	if d, ok := w.switchTimes[layout]; ok {
		return d
	}
	return w.defaultSwitch
}

// observe is what demand would see now, as internal/demand's Pods source counts it:
// a pod waiting that the active layout could not take is pending for every other layout
// that could (the active layout is the one switched from until a switch completes, as
// status.activeLayout is); a pod running keeps the active layout and would be evicted by
// a switch to any other.
func (w *world) observe() map[string]plan.LayoutDemand {
	obs := map[string]plan.LayoutDemand{}
	for _, p := range w.live {
		if p.gone {
			continue
		}
		if p.running {
			if p.counts {
				o := obs[w.active]
				o.RunningGPUs += p.gpus
				obs[w.active] = o
			}
			for _, l := range w.spec.Layouts {
				if l.Name == w.active {
					continue
				}
				o := obs[l.Name]
				o.Evictions++
				if p.dnd {
					o.DoNotDisrupt = append(o.DoNotDisrupt, "pod "+p.name)
				}
				obs[l.Name] = o
			}
			continue
		}
		// A pod the active layout could take waits for no other (internal/demand's Pods);
		// a Workload waits for each of its layouts but the active one (its Workloads).
		if !p.counts || (!p.workload && p.layouts[w.active]) {
			continue
		}
		for _, l := range w.spec.Layouts {
			if !p.layouts[l.Name] || l.Name == w.active {
				continue
			}
			o := obs[l.Name]
			o.PendingGPUs += p.gpus
			o.Pending = append(o.Pending, "pod "+p.name)
			obs[l.Name] = o
		}
	}
	for l, o := range obs {
		slices.Sort(o.Pending)
		slices.Sort(o.DoNotDisrupt)
		obs[l] = o
	}
	return obs
}
