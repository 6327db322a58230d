package localenv

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// BenchOptions describe one run of the transition benchmark.
type BenchOptions struct {
	// Hosts and GPUs per host (16 GiB P100s): by day four 4Q VMs per GPU, by night one
	// 16Q VM per GPU.
	Hosts, GPUs int
	// Pods puts one light pod per day node (a Deployment that falls back to the CPU node).
	Pods bool
	// TaskDelays are vgpusim's task durations by method, such as SuspendVM_Task=2s.
	TaskDelays map[string]time.Duration
	// SequentialHosts is how many hosts the sequential script switches (0: none); its
	// time is extrapolated to all hosts.
	SequentialHosts int
	// Idle is how long the manager's CPU use is measured at rest after the transitions.
	Idle time.Duration
}

// BenchResult is one row of the benchmark's table.
type BenchResult struct {
	Hosts, GPUs, ChangedVMs          int
	DayToNight, NightToDay           time.Duration
	BoundDayToNight, BoundNightToDay time.Duration
	NodeReadyLatency                 time.Duration
	EvictionLatency                  time.Duration
	EvictionsPerPod                  float64
	CallsPerChangedVM                float64
	// CallsByMethod are vgpusim's calls during the two switches, by SOAP method.
	CallsByMethod              map[string]int
	Reconciles                 int
	ReconcileP50, ReconcileP99 time.Duration
	RSSPeakMiB                 float64
	// IdleCPUPercent is the manager's CPU over Idle from the moment night -> day is
	// Steady, while the cluster still settles the switch (the node lifecycle controller
	// marks the parked nodes NotReady a lease after they stop); IdleCPUPercentLater over
	// the Idle after that.
	IdleCPUPercent, IdleCPUPercentLater float64
	Sequential                          time.Duration // extrapolated to all hosts
	SequentialMeasured                  time.Duration
	SequentialHosts                     int
	// Reactions are gpupool's reaction times by kind (React*), over both switches, and
	// the breakdowns each switch's critical path, from the watches and vgpusim's task
	// log (reaction.go).
	Reactions                                map[string]Percentiles
	BreakdownDayToNight, BreakdownNightToDay Breakdown
	// Once checks each switch did each VM's operations and each node's cordon once.
	Once []OnceCheck
	// Phases are where the manager's passes spent their time during the two switches,
	// by phase of the pass (gpupool_pass_phase_duration_seconds).
	Phases map[string]PhaseStat
	// StartStages split the task starts asked past the passes (parks, drains, mark, queue, ask:
	// gpupool_task_start_stage_seconds), over the two switches.
	StartStages map[string]PhaseStat
	// CPUSeconds are the CPU seconds each process of the environment used during the two
	// switches, by name (benchcpu.go); NodeLease is kwok's node lease in the run.
	CPUSeconds map[string]float64
	NodeLease  time.Duration
	// ControlPlaneQPS is the controller manager's and the scheduler's client QPS in the
	// run (0: their defaults).
	ControlPlaneQPS int
	// Floor is the environment's own time for a day -> night switch's cordons and
	// evictions (benchfloor.go); zero without pods.
	Floor Floor
}

// WriteBenchInventory writes a vgpusim inventory of hosts x gpus P100s with the day VMs
// running and the night VMs off, plus one spare VM outside the pool (on a host of its
// own) whose node measures how long a node takes to come up.
func WriteBenchInventory(path string, hosts, gpus int) error {
	var b strings.Builder
	b.WriteString("datacenter: dc1\nhosts:\n")
	for h := 0; h < hosts; h++ {
		fmt.Fprintf(&b, "  - name: esx-%02d\n    policy: performance\n    gpus:\n", h)
		for g := 0; g < gpus; g++ {
			fmt.Fprintf(&b, "      - {model: Tesla P100, memoryGiB: 16, pciId: \"0000:%02x:00.0\"}\n", 0x10+g)
		}
		b.WriteString("    profiles:\n      - {name: grid_p100-4q, frameBufferGiB: 4, suspendSupported: true}\n      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}\n")
	}
	// The spare VM's own host, so that no placement of the pool's VMs takes its GPU.
	b.WriteString("  - name: esx-spare\n    policy: performance\n    gpus:\n      - {model: Tesla P100, memoryGiB: 16, pciId: \"0000:10:00.0\"}\n")
	b.WriteString("    profiles:\n      - {name: grid_p100-16q, frameBufferGiB: 16, suspendSupported: true}\n")
	b.WriteString("vms:\n")
	for h := 0; h < hosts; h++ {
		for g := 0; g < gpus; g++ {
			for k := 1; k <= 4; k++ {
				fmt.Fprintf(&b, "  - {name: %s, host: esx-%02d, profile: grid_p100-4q, powerState: poweredOn}\n", benchDay(h, g, k), h)
			}
			fmt.Fprintf(&b, "  - {name: %s, host: esx-%02d, profile: grid_p100-16q, powerState: poweredOff}\n", benchNight(h, g), h)
		}
	}
	b.WriteString("  - {name: spare-1, host: esx-spare, profile: grid_p100-16q, powerState: poweredOff}\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func benchDay(h, g, k int) string { return fmt.Sprintf("day-%02d-%d-%d", h, g, k) }
func benchNight(h, g int) string  { return fmt.Sprintf("night-%02d-%d", h, g) }

// BenchPool is the benchmark's pool name.
const BenchPool = "bench"

func (e *Env) benchPool(b BenchOptions) *gpupoolv1.GPUPoolProfile {
	var day, night []gpupoolv1.Worker
	for h := 0; h < b.Hosts; h++ {
		for g := 0; g < b.GPUs; g++ {
			for k := 1; k <= 4; k++ {
				day = append(day, gpupoolv1.Worker{VM: benchDay(h, g, k), Profile: "grid_p100-4q"})
			}
			night = append(night, gpupoolv1.Worker{VM: benchNight(h, g), Profile: "grid_p100-16q"})
		}
	}
	return &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: BenchPool},
		Spec: gpupoolv1.GPUPoolProfileSpec{
			VCenter: gpupoolv1.VCenterSpec{Server: e.VCenter.Server, Datacenter: e.VCenter.Datacenter, Thumbprint: e.Thumbprint,
				CredentialsSecretRef: gpupoolv1.SecretReference{Name: credentialsSecret, Namespace: credentialsNamespace}},
			Layouts: []gpupoolv1.Layout{
				{Name: "day", Workers: day, NodeLabels: map[string]string{"lab.example/workload": "inference"}},
				{Name: "night", Workers: night, NodeLabels: map[string]string{"lab.example/workload": "training"}},
			},
			DefaultLayout: "day",
			MaxParallel:   int32(b.Hosts),
			Drain:         gpupoolv1.DrainSpec{Timeout: &metav1.Duration{Duration: 10 * time.Minute}, OnTimeout: gpupoolv1.DrainAbort},
		},
	}
}

// RunBench runs the benchmark on a started environment: day -> night -> day with the
// pool, then the sequential script on a subset of hosts, and reports the table row.
func RunBench(ctx context.Context, e *Env, b BenchOptions) (*BenchResult, error) {
	r := &BenchResult{Hosts: b.Hosts, GPUs: b.GPUs, ChangedVMs: 5 * b.Hosts * b.GPUs, NodeLease: e.NodeLease, ControlPlaneQPS: e.ControlPlaneQPS}
	if r.NodeLease <= 0 {
		r.NodeLease = DefaultNodeLease
	}
	if err := e.benchBound(ctx, b, r); err != nil {
		return nil, err
	}
	if b.Pods {
		var err error
		if r.Floor, err = e.benchFloor(ctx, 4*b.Hosts*b.GPUs); err != nil {
			return nil, err
		}
		e.logf("==> the environment alone, %d at a time (task starts %d at a time): %d node patches in %s, %d cordons in %s; %d pods evicted, all gone after %s; %d suspends asked in %s, %d power-ons in %s; the pool's inventory read in %s",
			execute.MaxConcurrentWrites, e.startsAtOnce(), r.Floor.N, r.Floor.NodePatches.Round(10*time.Millisecond), r.Floor.N, r.Floor.Cordons.Round(10*time.Millisecond),
			r.Floor.N, r.Floor.EvictionsOut.Round(10*time.Millisecond),
			r.Floor.N, r.Floor.Suspends.Round(10*time.Millisecond), r.Floor.N, r.Floor.PowerOns.Round(10*time.Millisecond), r.Floor.InventoryRead.Round(10*time.Millisecond))
	}
	pods, err := e.benchSetUp(ctx, b)
	if err != nil {
		return nil, err
	}
	if err := e.benchSwitches(ctx, r, pods); err != nil {
		return nil, err
	}
	if err := e.benchManagerCost(ctx, b, r); err != nil {
		return nil, err
	}
	if b.SequentialHosts > 0 {
		n := min(b.SequentialHosts, b.Hosts)
		if r.SequentialMeasured, err = e.sequential(ctx, b, n); err != nil {
			return nil, err
		}
		r.SequentialHosts = n
		r.Sequential = time.Duration(float64(r.SequentialMeasured) * float64(b.Hosts) / float64(n))
	}
	return r, nil
}

// benchBound measures, in this environment, what the critical path of one GPU is made
// of: drain (one eviction), suspend, power on and node ready for work (on the spare),
// relabel. Power-ons of one profile start together, so one of each is on the path.
func (e *Env) benchBound(ctx context.Context, b BenchOptions, r *BenchResult) error {
	var err error
	if r.NodeReadyLatency, err = e.spareNodeLatency(ctx, b); err != nil {
		return err
	}
	if r.EvictionLatency, err = e.evictionLatency(ctx); err != nil {
		return err
	}
	path := r.EvictionLatency + b.TaskDelays["SuspendVM_Task"] + r.NodeReadyLatency + 100*time.Millisecond
	r.BoundDayToNight, r.BoundNightToDay = path, path
	return nil
}

// benchSetUp creates the pool, waits for day to be active and starts the workload on
// the day nodes; it returns how many pods run.
func (e *Env) benchSetUp(ctx context.Context, b BenchOptions) (int, error) {
	if err := e.Client.Create(ctx, e.benchPool(b)); err != nil {
		return 0, err
	}
	if err := e.waitPool(ctx, BenchPool, "day active", func(p *gpupoolv1.GPUPoolProfile) bool {
		return p.Status.ActiveLayout == "day" && p.Status.Phase == gpupoolv1.PhaseSteady
	}); err != nil {
		return 0, err
	}
	if !b.Pods {
		return 0, nil
	}
	return e.benchWorkload(ctx, b)
}

// benchSwitches runs day -> night -> day and records the makespans, the evictions per
// pod, the reactions and critical paths, the passes' phases and the vCenter calls.
func (e *Env) benchSwitches(ctx context.Context, r *BenchResult, pods int) error {
	callsBefore, _ := e.vgpusimCalls()
	// Evictions per pod: the manager's evictions during the switch
	// (gpupool_pod_evictions_total), per pod that ran on the nodes it drains when it
	// started (a pod evicted, rescheduled onto a node drained later and evicted again
	// counts twice). A watch of pod deletions would do, but the API server drops a watch
	// whose reader falls behind, as the benchmark's does on a saturated machine.
	onDay, err := e.podsOnNodes(ctx, "day-")
	if err != nil {
		return err
	}
	e.logf("==> %d of the %d pods run on the day nodes", onDay, pods)
	evictedBefore, err := e.managerCounter("gpupool_pod_evictions_total")
	if err != nil {
		return err
	}
	phasesBefore, err := e.scrapeLines()
	if err != nil {
		return err
	}
	pidsBefore := e.processPIDs()
	cpuBefore := cpuByProcess(pidsBefore)
	var toNight, toDay *switchTrace
	if r.DayToNight, toNight, err = e.switchTo(ctx, "night"); err != nil {
		return err
	}
	if pods > 0 {
		evictedAfter, err := e.managerCounter("gpupool_pod_evictions_total")
		if err != nil {
			return err
		}
		r.EvictionsPerPod = (evictedAfter - evictedBefore) / float64(max(onDay, 1))
	}
	if r.NightToDay, toDay, err = e.switchTo(ctx, ""); err != nil {
		return err
	}
	pidsAfter := e.processPIDs()
	r.CPUSeconds = cpuUsed(cpuBefore, cpuByProcess(pidsAfter), pidsBefore, pidsAfter)
	if phasesAfter, err := e.scrapeLines(); err == nil {
		r.Phases = phaseStats(phasesBefore, phasesAfter)
		r.StartStages = startStageStats(phasesBefore, phasesAfter)
	}
	r.Reactions = reactionPercentiles(toNight, toDay)
	r.Once = []OnceCheck{onceCheck("day>night", toNight, r.ChangedVMs), onceCheck("night>day", toDay, r.ChangedVMs)}
	r.BreakdownDayToNight, r.BreakdownNightToDay = toNight.criticalPath(), toDay.criticalPath()
	callsAfter, _ := e.vgpusimCalls()
	changes := 0
	r.CallsByMethod = map[string]int{}
	for m, n := range callsAfter {
		if n > callsBefore[m] {
			r.CallsByMethod[m] = n - callsBefore[m]
		}
		if m == "RetrieveProperties" || m == "RetrievePropertiesEx" || m == "ContinueRetrievePropertiesEx" || m == vgpusim.PollMethod {
			continue // the shared inventory reads, and the polls that keep them
		}
		changes += n - callsBefore[m]
	}
	r.CallsPerChangedVM = float64(changes) / float64(2*r.ChangedVMs)
	return nil
}

// benchManagerCost records the manager's CPU at rest (over b.Idle, twice: right after
// the switch and then), its peak RSS and its reconciles.
func (e *Env) benchManagerCost(ctx context.Context, b BenchOptions, r *BenchResult) error {
	pid, _ := e.managerPID()
	if b.Idle > 0 && pid > 0 {
		at, _ := cpuSeconds(pid)
		for _, into := range []*float64{&r.IdleCPUPercent, &r.IdleCPUPercentLater} {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(b.Idle):
			}
			now, _ := cpuSeconds(pid)
			*into = 100 * (now - at) / b.Idle.Seconds()
			at = now
		}
	}
	if pid > 0 {
		r.RSSPeakMiB, _ = rssPeakMiB(pid)
	}
	r.Reconciles, r.ReconcileP50, r.ReconcileP99, _ = e.reconcileStats()
	return nil
}

// switchTo sets (or, with "", removes) the override and returns how long the pool took
// to be Steady with that layout active, and the switch's trace.
func (e *Env) switchTo(ctx context.Context, layout string) (time.Duration, *switchTrace, error) {
	var p gpupoolv1.GPUPoolProfile
	if err := e.Client.Get(ctx, client.ObjectKey{Name: BenchPool}, &p); err != nil {
		return 0, nil, err
	}
	want := layout
	if layout == "" {
		p.Spec.Override, want = nil, "day"
	} else {
		p.Spec.Override = &gpupoolv1.Override{Layout: layout, Reason: "benchmark"}
	}
	label := "inference"
	if want == "night" {
		label = "training"
	}
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	tl, err := e.watchTimeline(tctx, label)
	if err != nil {
		return 0, nil, err
	}
	start := time.Now()
	if err := e.Client.Update(ctx, &p); err != nil {
		return 0, nil, err
	}
	err = e.waitPool(ctx, BenchPool, want+" active", func(p *gpupoolv1.GPUPoolProfile) bool {
		return p.Status.ActiveLayout == want && p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ObservedGeneration == p.Generation
	})
	took := time.Since(start)
	e.logf("==> switch to %s: Steady after %s; last node %s", want, took.Round(100*time.Millisecond), tl)
	if err != nil {
		return took, nil, err
	}
	tasks, err := e.finishedTasks(ctx, start)
	tr := tl.trace(start, tasks)
	b := tr.criticalPath()
	e.logf("==> switch to %s: critical path %s vSphere, %s Kubernetes, %s gpupool", want,
		b.VSphere.Round(100*time.Millisecond), b.Kubernetes.Round(100*time.Millisecond), b.Gpupool.Round(100*time.Millisecond))
	for _, r := range []struct {
		kind string
		slow []string
	}{{ReactPark, tr.slowestParks(3)}, {ReactFreed, tr.slowestFreed(3)}, {ReactRelabel, tr.slowestRelabels(3)}} {
		if len(r.slow) > 0 {
			e.logf("==> switch to %s: slowest %s: %s", want, strings.Replace(r.kind, ">", " -> ", 1), strings.Join(r.slow, "; "))
		}
	}
	return took, tr, err
}

// finishedTasks reads vgpusim's task log (rewritten four times a second) until every
// task started since start has finished in it.
func (e *Env) finishedTasks(ctx context.Context, start time.Time) ([]vgpusim.TaskRecord, error) {
	var tasks []vgpusim.TaskRecord
	err := e.pollFor(ctx, 100*time.Millisecond, 10*time.Second, "vgpusim's task log", func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(e.Dir, "vgpusim-tasks.json"))
		if err != nil {
			return false, nil //nolint:nilerr // not written yet
		}
		tasks = nil
		if err := json.Unmarshal(b, &tasks); err != nil {
			return false, nil //nolint:nilerr // being replaced
		}
		for _, t := range tasks {
			if !t.Start.Before(start) && t.Finish.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
	return tasks, err
}

// spareNodeLatency powers the spare VM on and off through vCenter and measures how long
// its node takes to be Ready after the power-on task finished: the kubelet's share of the
// critical path in this environment.
func (e *Env) spareNodeLatency(ctx context.Context, b BenchOptions) (time.Duration, error) {
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	vc, err := conn.Connect(ctx, e.VCenter)
	if err != nil {
		return 0, err
	}
	inv, err := vc.Inventory(ctx)
	if err != nil {
		return 0, err
	}
	vm, ok := inv.FindVM("spare-1")
	if !ok {
		return 0, fmt.Errorf("no spare VM in the inventory")
	}
	id, err := vc.PowerOn(ctx, vm.Ref, "")
	if err != nil {
		return 0, err
	}
	for id != "" {
		info, err := vc.Task(ctx, id)
		if err != nil {
			return 0, err
		}
		if info.State == vsphere.TaskSuccess || info.State == vsphere.TaskError {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	done := time.Now()
	if err := e.waitReadyForWork(ctx, "spare-1", 5*time.Minute); err != nil {
		return 0, err
	}
	latency := time.Since(done)
	// The spare's GPU is its own host's: powering it off again is best effort.
	_, _ = vc.PowerOff(ctx, vm.Ref)
	return latency + b.TaskDelays["PowerOnVM_Task"], nil
}

// evictionLatency evicts one pod through the eviction API, as a drain does, and
// measures how long it takes to be gone: the drain's share of the critical path in this
// environment (kwok plays the kubelet that stops it).
func (e *Env) evictionLatency(ctx context.Context) (time.Duration, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-eviction-probe-", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "cpu-1", Containers: []corev1.Container{{Name: "c", Image: "probe"}},
			Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}}},
	}
	if err := e.Client.Create(ctx, pod); err != nil {
		return 0, err
	}
	key := client.ObjectKeyFromObject(pod)
	running := func() (bool, error) {
		err := e.Client.Get(ctx, key, pod)
		return err == nil && pod.Status.Phase == corev1.PodRunning, client.IgnoreNotFound(err)
	}
	if err := e.pollFor(ctx, 20*time.Millisecond, time.Minute, "the eviction probe to run", running); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := e.Client.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{}); err != nil {
		return 0, fmt.Errorf("evicting the probe pod: %w", err)
	}
	gone := func() (bool, error) {
		err := e.Client.Get(ctx, key, &corev1.Pod{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	if err := e.pollFor(ctx, 20*time.Millisecond, time.Minute, "the evicted probe to be gone", gone); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// pollFor checks done every period until it is true, fails, or timeout passes.
func (e *Env) pollFor(ctx context.Context, period, timeout time.Duration, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(period):
		}
	}
	return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
}

// waitReadyForWork waits until the node is ready for work as gpupool counts it: Ready and
// advertising its GPUs (the simulated device plugin adds them a few seconds after Ready),
// so that the critical-path bound includes that wait too.
func (e *Env) waitReadyForWork(ctx context.Context, name string, timeout time.Duration) error {
	return e.pollFor(ctx, 50*time.Millisecond, timeout, "node "+name+" to be Ready with its GPUs", func() (bool, error) {
		var n corev1.Node
		err := e.Client.Get(ctx, client.ObjectKey{Name: name}, &n)
		return err == nil && cluster.Ready(&n) && cluster.AdvertisedGPUs(&n) != "0", nil
	})
}

// benchWorkload runs one light pod per day node, spread one per node, that may fall back
// to the CPU node; it returns how many pods run.
func (e *Env) benchWorkload(ctx context.Context, b BenchOptions) (int, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}
	if err := e.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return 0, err
	}
	n := int32(4 * b.Hosts * b.GPUs)
	labels := map[string]string{"app": "bench"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: ns.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:  []corev1.Container{{Name: "c", Image: "bench"}},
					Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
							Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
								Key: "lab.example/workload", Operator: corev1.NodeSelectorOpIn, Values: []string{"inference"}}}}}}}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
				},
			},
		},
	}
	if err := e.Client.Create(ctx, d); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var pods corev1.PodList
		if err := e.Client.List(ctx, &pods, client.InNamespace(ns.Name)); err != nil {
			return 0, err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		if running == int(n) {
			return running, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return 0, fmt.Errorf("the benchmark's pods did not all run")
}

// podsOnNodes counts the benchmark's pods on the nodes whose name starts with prefix.
func (e *Env) podsOnNodes(ctx context.Context, prefix string) (int, error) {
	var pods corev1.PodList
	if err := e.Client.List(ctx, &pods, client.InNamespace("bench")); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Spec.NodeName, prefix) {
			n++
		}
	}
	return n, nil
}

// sequential pauses the pool and runs hack/sequential-switch.sh for the first n hosts:
// the day -> night switch as a person would script it.
func (e *Env) sequential(ctx context.Context, b BenchOptions, n int) (time.Duration, error) {
	var p gpupoolv1.GPUPoolProfile
	if err := e.Client.Get(ctx, client.ObjectKey{Name: BenchPool}, &p); err != nil {
		return 0, err
	}
	p.Spec.Paused = true
	if err := e.Client.Update(ctx, &p); err != nil {
		return 0, err
	}
	var day, night []string
	for h := 0; h < n; h++ {
		for g := 0; g < b.GPUs; g++ {
			for k := 1; k <= 4; k++ {
				day = append(day, benchDay(h, g, k))
			}
			night = append(night, benchNight(h, g))
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.Root, "hack", "sequential-switch.sh"), strings.Join(day, " "), strings.Join(night, " "))
	vars, err := readEnvFile(filepath.Join(e.Dir, "govc.env"))
	if err != nil {
		return 0, err
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.Kubeconfig, "PATH="+e.BinDir+":"+os.Getenv("PATH"))
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := os.Create(filepath.Join(e.Dir, "logs", "sequential.log"))
	if err != nil {
		return 0, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("the sequential script failed (see %s): %w", out.Name(), err)
	}
	return time.Since(start), nil
}
