package localenv

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/vsphere"
)

// The count demo (make demo-count-demand) runs on test/vgpusim/testdata/count.yaml: one
// host with two P100s, four 4Q day VMs on each, and two 16Q night VMs. Night is day with
// GPUs converted to 16Q, as many as demand asks for (1 or 2): one pending 1-GPU Job
// converts one GPU, and the other GPU's day VMs keep running.
const (
	// CountInventory is the count demo's vgpusim inventory, under the repository root.
	CountInventory = "test/vgpusim/testdata/count.yaml"
	// countDayVMs is how many 4Q day VMs the inventory has (gpu-day-1..8).
	countDayVMs = 8
	// nightProfile is what the converted GPUs run: one VM takes a whole 16 GB P100.
	nightProfile = "grid_p100-16q"
)

// CountNightVMs are the count demo's night candidates, in the order given.
var CountNightVMs = []string{"gpu-night-1", "gpu-night-2"}

// CountDemandResult is what the count demo observed, for the end-to-end test.
type CountDemandResult struct {
	DemandResult
	// DayGPUs are the day VMs on each GPU (PCI id) by day, as vCenter places them.
	DayGPUs map[string][]string
	// ActiveCount is status.activeCount when night was first seen Steady.
	ActiveCount int32
	// Chosen are the GPUs status.plan.conversion chose while the switch to night ran.
	Chosen []string
	// The rest is read once, while the Job runs on the night node and night is Steady:
	// ConvertedGPU is the GPU the Job's VM runs on (vCenter); ParkedDay the day nodes
	// parked; KeptDay the day nodes Ready and schedulable; KeptVMGPUs the GPUs the kept
	// day VMs run on; KeptShape each kept node's layout label, workload label and taints
	// (the labels and taints a layout by count gives its base workers); NightNodes the
	// night nodes Ready.
	ConvertedGPU                   string
	ParkedDay, KeptDay, NightNodes []string
	KeptVMGPUs                     map[string]string
	KeptShape                      map[string]string
	// InferenceByDay are the inference pods on the day nodes when the Job was submitted
	// (pod -> node); InferenceUndisturbed those of them on kept nodes still Running there
	// at night.
	InferenceByDay       map[string]string
	InferenceUndisturbed []string
	// Cordoned are the day nodes seen cordoned during the whole run (a watch).
	Cordoned []string
}

// CountDemandPoolSpec is DemandPoolSpec on the count inventory: day lists the eight 4Q
// VMs; night is day with GPUs converted to 16Q from the two night VMs (convert.count 2,
// what the distant night window or an override makes), its count sized by demand
// between 1 and 2; maxEvictions 0 (the inference pods request no GPU, so emptying a GPU
// evicts no GPU pod: the limit holds without a forced choice).
func (e *Env) CountDemandPoolSpec(now time.Time) *gpupoolv1.GPUPoolProfile {
	p := e.DemandPoolSpec(now)
	day, night := &p.Spec.Layouts[0], &p.Spec.Layouts[1]
	day.Workers = nil
	for i := 1; i <= countDayVMs; i++ {
		day.Workers = append(day.Workers, gpupoolv1.Worker{VM: fmt.Sprintf("gpu-day-%d", i), Profile: "grid_p100-4q"})
	}
	conv := &gpupoolv1.Conversion{Base: day.Name, Count: 2, Profile: nightProfile}
	for _, vm := range CountNightVMs {
		conv.Candidates = append(conv.Candidates, gpupoolv1.Candidate{VM: vm})
	}
	night.Workers, night.Convert = nil, conv
	p.Spec.Demand.Rules[0].CountFromDemand = &gpupoolv1.CountFromDemand{Min: 1, Max: 2}
	p.Spec.Demand.MaxEvictions = ptr.To(int32(0))
	return p
}

// cordonSet records every day node a watch sees cordoned.
type cordonSet struct {
	mu    sync.Mutex
	nodes map[string]bool
}

func (c *cordonSet) observe(ev watch.Event) {
	n, ok := ev.Object.(*corev1.Node)
	if !ok || !strings.HasPrefix(n.Name, "gpu-day-") || !n.Spec.Unschedulable {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[n.Name] = true
}

func (c *cordonSet) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.nodes))
}

// countRun is the count demo's state: the demand demo's, and what it reads of the
// partial switch.
type countRun struct {
	*demandRun
	res *CountDemandResult
	// seenNight says the night snapshot was taken; sawCount that the transition's count
	// was printed.
	seenNight, sawCount bool
}

// RunCountDemandDemo shows demand sizing a partial switch: with the pool on day, the
// demand demo's 1-GPU training Job is submitted; once its demand has held for `for`,
// demand brings night in with ONE GPU converted (the count its one GPU needs), parking
// only that GPU's four day VMs while the other GPU's keep running; the Job runs on the
// one night node and completes, and day comes back once night is idle. It prints a
// timeline and returns what it saw.
func RunCountDemandDemo(ctx context.Context, e *Env, out io.Writer, timeout time.Duration) (*CountDemandResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := &CountDemandResult{}
	r := &countRun{res: res, demandRun: &demandRun{e: e, log: newDemoLog(out), res: &res.DemandResult, pw: newPodWatch()}}
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	go e.follow(ctx, &corev1.PodList{}, []client.ListOption{client.InNamespace(DemoNamespace)}, r.pw.onEvent)
	cw, cs := &cordonWatch{}, &cordonSet{nodes: map[string]bool{}}
	go e.follow(ctx, &corev1.NodeList{}, nil, func(ev watch.Event) { cw.observe(ev); cs.observe(ev) })

	if err := e.pollUntilCycled(ctx, fmt.Sprintf("no day -> night (by count) -> day cycle by demand within %s", timeout), r.observe); err != nil {
		return res, err
	}
	res.TrainingSucceeded = e.trainingSucceeded(ctx)
	if err := r.readHistory(ctx); err != nil {
		return res, err
	}
	res.MinReadyInference = r.pw.minReady()
	res.Cordoned = cs.list()
	r.sayHistory()
	r.measureLatency(ctx, cw)
	r.log.say("cycle complete: layouts %s; night brought in by %s with transition count %d, activeCount %d (GPU %s converted); parked day nodes %v, kept %v; training ran on %s (succeeded: %v); day nodes ever cordoned %v; day back by %s",
		strings.Join(res.Layouts, " -> "), res.DesiredNight, transitionCount(res.TransitionToNight), res.ActiveCount,
		res.ConvertedGPU, res.ParkedDay, res.KeptDay, res.TrainingNode, res.TrainingSucceeded, res.Cordoned, res.DesiredDayBack)
	return res, nil
}

// setUp creates the pool at day, applies the inference workload and reads where vCenter
// placed the day VMs.
func (r *countRun) setUp(ctx context.Context) error {
	pool := r.e.CountDemandPoolSpec(time.Now())
	r.res.NightWindow = pool.Spec.Schedule.Windows[0].Start
	r.log.say("applying GPUPoolProfile %s: day (%d x grid_p100-4q) by default, night window %q (UTC, hours away); night = day with GPUs converted to %s from %v (convert.count 2); demand: night BringIn for %s, countFromDemand {min 1, max 2}, idleFor %s, minDwell %s, cooldown %s, maxEvictions 0",
		pool.Name, countDayVMs, r.res.NightWindow, nightProfile, CountNightVMs, DemandFor, DemandIdleFor, DemandMinDwell, DemandCooldown)
	if err := r.e.createPoolAtDay(ctx, pool); err != nil {
		return err
	}
	gpus, err := r.e.vmGPUs(ctx)
	if err != nil {
		return err
	}
	r.res.DayGPUs = map[string][]string{}
	for vm, g := range gpus {
		if strings.HasPrefix(vm, "gpu-day-") {
			r.res.DayGPUs[g] = append(r.res.DayGPUs[g], vm)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(r.res.DayGPUs)) {
		sort.Strings(r.res.DayGPUs[g])
		r.log.say("vCenter by day: GPU %s runs %v", g, r.res.DayGPUs[g])
	}
	r.log.say("applying Deployment %s/%s (%d replicas, no GPU requests, PDB maxUnavailable 1, prefers day nodes, can fall back to the CPU node)",
		DemoNamespace, inferenceApp, inferenceSize)
	return r.e.applyInference(ctx)
}

// observe is the demand demo's observe, then what the count demo reads besides: the
// inference pods' nodes when the Job goes in, the conversion chosen, the count night
// runs with, and the night snapshot.
func (r *countRun) observe(ctx context.Context, p *gpupoolv1.GPUPoolProfile) ([]string, error) {
	submitted := r.submitted
	layouts, err := r.demandRun.observe(ctx, p)
	if err != nil {
		return layouts, err
	}
	st := &p.Status
	if t := r.res.TransitionToNight; t != nil && !r.sawCount {
		r.sawCount = true
		r.log.say("  status.transition.count %d (fromCount %d): the GPUs the switch converts, sized by demand", t.Count, t.FromCount)
	}
	if !submitted && r.submitted {
		r.res.InferenceByDay = r.e.inferencePods(ctx)
	}
	if pl := st.Plan; pl != nil && pl.Conversion != nil && st.DesiredLayout == "night" && r.res.Chosen == nil {
		for _, c := range pl.Conversion.Chosen {
			r.res.Chosen = append(r.res.Chosen, c.GPU)
			r.log.say("  status.plan.conversion: %d GPU(s) to %s, evicting %d GPU pods; chosen %s %s: %s",
				pl.Conversion.Count, pl.Conversion.Profile, pl.Conversion.Evicted, c.Host, c.GPU, c.Why)
		}
	}
	if st.Phase == gpupoolv1.PhaseSteady && st.ActiveLayout == "night" && r.res.ActiveCount == 0 {
		r.res.ActiveCount = st.ActiveCount
		r.log.say("  night Steady: status.activeCount %d", st.ActiveCount)
	}
	// Once, while night is active and the Job has run (within a second of it running).
	if !r.seenNight && r.res.ActiveCount > 0 && r.res.TrainingRan && st.ActiveLayout == "night" {
		r.seenNight = true
		return layouts, r.nightSnapshot(ctx)
	}
	return layouts, nil
}

// nightSnapshot reads the partial switch while the Job runs: the day nodes parked and
// kept (with their labels and taints), the night nodes, where vCenter runs the VMs, and
// which inference pods on kept nodes ran on undisturbed.
func (r *countRun) nightSnapshot(ctx context.Context) error {
	res := r.res
	var nodes corev1.NodeList
	if err := r.e.Client.List(ctx, &nodes); err != nil {
		return err
	}
	res.KeptShape = map[string]string{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		switch {
		case strings.HasPrefix(n.Name, "gpu-day-") && n.Labels[gpupoolv1.LabelParked] == "true":
			res.ParkedDay = append(res.ParkedDay, n.Name)
		case strings.HasPrefix(n.Name, "gpu-day-") && cluster.Ready(n) && !n.Spec.Unschedulable:
			res.KeptDay = append(res.KeptDay, n.Name)
			res.KeptShape[n.Name] = fmt.Sprintf("layout=%s workload=%s taints=%s", n.Labels[gpupoolv1.LabelLayout], n.Labels["lab.example/workload"], taintsOf(n))
		case strings.HasPrefix(n.Name, "gpu-night-") && cluster.Ready(n) && n.Labels[gpupoolv1.LabelParked] != "true":
			res.NightNodes = append(res.NightNodes, n.Name)
		}
	}
	gpus, err := r.e.vmGPUs(ctx)
	if err != nil {
		return err
	}
	res.ConvertedGPU = gpus[res.TrainingNode]
	res.KeptVMGPUs = map[string]string{}
	for _, vm := range res.KeptDay {
		res.KeptVMGPUs[vm] = gpus[vm]
	}
	now := r.e.inferencePods(ctx)
	for pod, node := range res.InferenceByDay {
		if now[pod] == node && slices.Contains(res.KeptDay, node) {
			res.InferenceUndisturbed = append(res.InferenceUndisturbed, pod+"@"+node)
		}
	}
	sort.Strings(res.InferenceUndisturbed)
	r.log.say("  night with the Job running on %s (GPU %s): day nodes parked %v; kept, Ready and schedulable %v on GPUs %v; night nodes Ready %v",
		res.TrainingNode, res.ConvertedGPU, res.ParkedDay, res.KeptDay, slices.Compact(slices.Sorted(maps.Values(res.KeptVMGPUs))), res.NightNodes)
	for _, n := range res.KeptDay {
		r.log.say("  kept node %s: %s", n, res.KeptShape[n])
	}
	r.log.say("  inference pods on kept nodes since before the Job, undisturbed: %v", res.InferenceUndisturbed)
	return nil
}

// inferencePods are the Running inference pods (pod -> node), nil when unreadable.
func (e *Env) inferencePods(ctx context.Context) map[string]string {
	var pods corev1.PodList
	if err := e.Client.List(ctx, &pods, client.InNamespace(DemoNamespace), client.MatchingLabels{"app": inferenceApp}); err != nil {
		return nil
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out[p.Name] = p.Spec.NodeName
		}
	}
	return out
}

// vmGPUs reads from vCenter the GPU (PCI id) each running VM's vGPU runs on: vSphere,
// not gpupool, places vGPUs, so which day VMs share a GPU is known only there.
func (e *Env) vmGPUs(ctx context.Context) (map[string]string, error) {
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	vc, err := conn.Connect(ctx, e.VCenter)
	if err != nil {
		return nil, err
	}
	inv, err := vc.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, vm := range inv.VMs {
		if vm.GPU != "" {
			out[vm.Name] = vm.GPU
		}
	}
	return out, nil
}

func taintsOf(n *corev1.Node) string {
	var ts []string
	for _, t := range n.Spec.Taints {
		ts = append(ts, fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
	}
	if len(ts) == 0 {
		return "none"
	}
	return strings.Join(ts, ",")
}

func transitionCount(t *gpupoolv1.TransitionStatus) int32 {
	if t == nil {
		return 0
	}
	return t.Count
}
