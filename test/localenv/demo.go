package localenv

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/test/cluster"
)

func (o *Options) logOut() io.Writer {
	if o.Log == nil {
		return io.Discard
	}
	return o.Log
}

// Demo names.
const (
	DemoNamespace = "demo"
	DemoPool      = "daynight"
	inferenceApp  = "inference"
	inferenceSize = 4
	trainingJob   = "training"
)

// DemoResult is what a demo run observed, for the end-to-end test.
type DemoResult struct {
	// Layouts is the sequence of active layouts seen.
	Layouts []string
	// MinReadyInference is the fewest Ready inference pods seen at any moment after
	// the workloads were up (the PDB allows one unavailable of four).
	MinReadyInference int
	// InferenceNodesByDay are the nodes inference pods ran on before the night.
	InferenceNodesByDay []string
	// InferenceNodesAtNight are the nodes inference pods ran on at night.
	InferenceNodesAtNight []string
	// TrainingNode is the node the training Job's pod ran on.
	TrainingNode string
	// TrainingSucceeded says whether the training Job completed.
	TrainingSucceeded bool
	// WaitedForGPUs are the workers seen waiting for their node's nvidia.com/gpu (the
	// simulated device plugin advertises it a few seconds after the node is Ready).
	WaitedForGPUs []string
	// Warned are the nodes seen carrying gpupool.dev/draining-soon while still
	// schedulable: warned before their drain.
	Warned []string

	// With Options.Kueue, the training Job goes through Kueue:
	// KueueHeld is the first "waiting for layout night: the switch to it starts at ..." message of gpupool's check
	// on its Workload, by day.
	KueueHeld string
	// KueueAdmittedWith is the state of the night nodes read just after its Workload was
	// first seen admitted ("night nodes ready for work: ...").
	KueueAdmittedWith string
	// DayQuotaDroppedBeforeDrain says whether the day flavor's quota was seen at 0 while,
	// read after it, day was active with no switch started and its nodes ready for work
	// (the drop at warnAhead, before the drain).
	DayQuotaDroppedBeforeDrain bool
	// LateAdmittedWith is the state of the day nodes read just after the day Job submitted
	// after that drop was first seen admitted, and the layouts seen by then ("" if it
	// never was).
	LateAdmittedWith string
}

// DemoPoolSpec is the day/night sample with a compressed schedule: day is the default,
// and a night window of nightFor opens at the first full minute at least a minute from
// now, so a whole day -> night -> day cycle fits in a few minutes.
func (e *Env) DemoPoolSpec(now time.Time, nightFor time.Duration) *gpupoolv1.GPUPoolProfile {
	start := now.UTC().Add(time.Minute).Truncate(time.Minute).Add(time.Minute)
	w := func(profile string, vms ...string) []gpupoolv1.Worker {
		var out []gpupoolv1.Worker
		for _, vm := range vms {
			out = append(out, gpupoolv1.Worker{VM: vm, Profile: profile})
		}
		return out
	}
	return &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: DemoPool},
		Spec: gpupoolv1.GPUPoolProfileSpec{
			VCenter: gpupoolv1.VCenterSpec{Server: e.VCenter.Server, Datacenter: e.VCenter.Datacenter, Thumbprint: e.Thumbprint,
				CredentialsSecretRef: gpupoolv1.SecretReference{Name: credentialsSecret, Namespace: credentialsNamespace}},
			Layouts: []gpupoolv1.Layout{
				{Name: "day", Workers: w("grid_p100-4q", "gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4"),
					NodeLabels: map[string]string{"lab.example/workload": "inference"}},
				{Name: "night", Workers: w("grid_p100-16q", "gpu-night-1"),
					NodeLabels: map[string]string{"lab.example/workload": "training"},
					NodeTaints: []corev1.Taint{{Key: "lab.example/training", Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
			},
			Schedule: &gpupoolv1.Schedule{TimeZone: "UTC", Windows: []gpupoolv1.Window{{
				Layout: "night", Start: fmt.Sprintf("%d %d * * *", start.Minute(), start.Hour()),
				Duration: metav1.Duration{Duration: nightFor}}},
				// The schedulers are warned 20s before the switch: after the workloads
				// are placed, so that they land on the day nodes first.
				WarnAhead: &metav1.Duration{Duration: 20 * time.Second}},
			DefaultLayout: "day",
			Drain:         gpupoolv1.DrainSpec{Timeout: &metav1.Duration{Duration: 3 * time.Minute}, OnTimeout: gpupoolv1.DrainAbort},
			Kueue:         e.demoKueue(),
		},
	}
}

func (e *Env) demoKueue() *gpupoolv1.KueueSpec {
	if !e.Kueue {
		return nil
	}
	return demoKueue()
}

// applyWorkloads creates the demo workloads: an inference Deployment that prefers the
// day (GPU) nodes and can fall back to the CPU node, with a PodDisruptionBudget, and a
// training Job that needs the night node (with Kueue: submitted through its LocalQueue,
// after Kueue's objects).
func (e *Env) applyWorkloads(ctx context.Context) error {
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: trainingJob, Namespace: DemoNamespace},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "train", Image: "training:demo"}},
			NodeSelector:  map[string]string{"lab.example/workload": "training"},
			Tolerations:   []corev1.Toleration{{Key: "lab.example/training", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
		}}},
	}
	if !e.Kueue {
		return e.applyInference(ctx, job)
	}
	if err := e.applyInference(ctx); err != nil {
		return err
	}
	if err := e.Apply(ctx, []byte(demoKueueObjects()), nil); err != nil {
		return fmt.Errorf("creating the demo's Kueue objects: %w", err)
	}
	return e.Client.Create(ctx, queued(job))
}

// applyInference creates the demo's namespace, its inference Deployment with its
// PodDisruptionBudget, and more objects.
func (e *Env) applyInference(ctx context.Context, more ...client.Object) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: DemoNamespace}}
	if err := e.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	labels := map[string]string{"app": inferenceApp}
	replicas := int32(inferenceSize)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: inferenceApp, Namespace: DemoNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "server", Image: "inference:demo"}},
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
							{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "lab.example/workload", Operator: corev1.NodeSelectorOpIn, Values: []string{"inference"}}}},
							{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "node.gpupool.dev/cpu-only", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}},
						}},
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
							MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "lab.example/workload", Operator: corev1.NodeSelectorOpIn, Values: []string{"inference"}}}}}},
					}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
						WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}},
				},
			},
		},
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: inferenceApp, Namespace: DemoNamespace},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	for _, o := range append([]client.Object{dep, pdb}, more...) {
		if err := e.Client.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// podWatch keeps the inference pods' readiness from a watch, so that the PDB check sees
// every change, not just samples.
type podWatch struct {
	mu       sync.Mutex
	ready    map[string]bool
	min      int
	counting bool
}

// newPodWatch is a podWatch that has seen no pod.
func newPodWatch() *podWatch {
	return &podWatch{ready: map[string]bool{}, min: inferenceSize}
}

// follow observes the pods of a watch's events until its channel closes.
func (w *podWatch) follow(events <-chan watch.Event) {
	for ev := range events {
		w.onEvent(ev)
	}
}

// onEvent observes the pod of a watch event.
func (w *podWatch) onEvent(ev watch.Event) {
	if p, ok := ev.Object.(*corev1.Pod); ok {
		w.observe(p, ev.Type == watch.Deleted)
	}
}

// minReady is the fewest Ready inference pods seen since the PDB check started.
func (w *podWatch) minReady() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.min
}

// isCounting says whether the PDB check has started.
func (w *podWatch) isCounting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counting
}

func (w *podWatch) observe(p *corev1.Pod, deleted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.Labels["app"] != inferenceApp {
		return
	}
	r := !deleted && p.DeletionTimestamp == nil && podReady(p)
	w.ready[p.Name] = r
	if w.counting {
		w.min = min(w.min, w.readyLocked())
	}
}

// readyLocked counts the Ready inference pods; the caller holds w.mu.
func (w *podWatch) readyLocked() int {
	n := 0
	for _, ok := range w.ready {
		if ok {
			n++
		}
	}
	return n
}

// startCounting starts the PDB check once all inference pods are Ready together, and
// says whether it started now.
func (w *podWatch) startCounting() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.counting || w.readyLocked() != inferenceSize {
		return false
	}
	w.counting, w.min = true, inferenceSize
	return true
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// RunDemo applies the workloads and the compressed day/night pool, prints a timeline
// until the pool has gone day -> night -> day, and returns what it saw.
func RunDemo(ctx context.Context, e *Env, out io.Writer, nightFor, timeout time.Duration) (*DemoResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	log := newDemoLog(out)

	pool := e.DemoPoolSpec(time.Now(), nightFor)
	log.say("applying GPUPoolProfile %s: day by default, night window %q (UTC) for %s", pool.Name, pool.Spec.Schedule.Windows[0].Start, nightFor)
	if err := e.createPoolAtDay(ctx, pool); err != nil {
		return nil, err
	}
	log.say("applying workloads: Deployment %s/%s (%d replicas, PDB maxUnavailable 1, prefers day nodes, can fall back to the CPU node), Job %s/%s (needs the night node)",
		DemoNamespace, inferenceApp, inferenceSize, DemoNamespace, trainingJob)
	if err := e.applyWorkloads(ctx); err != nil {
		return nil, err
	}

	pw := newPodWatch()
	w, err := e.Client.Watch(ctx, &corev1.PodList{}, client.InNamespace(DemoNamespace))
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	go pw.follow(w.ResultChan())

	r := &demoRun{e: e, log: log, pw: pw, kq: &kueueDemo{}, res: &DemoResult{}}
	res := r.res
	if err := e.pollUntilCycled(ctx, fmt.Sprintf("no day -> night -> day cycle within %s", timeout), r.observe); err != nil {
		return res, err
	}
	if e.Kueue {
		if err := r.kq.untilLateAdmitted(ctx, e, res, log.say); err != nil {
			return res, err
		}
	}
	res.TrainingSucceeded = e.trainingSucceeded(ctx)
	res.MinReadyInference = pw.minReady()
	log.say("cycle complete: layouts %s; fewest Ready inference pods at any time: %d of %d (PDB allows 1 unavailable); training ran on %s (succeeded: %v)",
		strings.Join(res.Layouts, " -> "), res.MinReadyInference, inferenceSize, res.TrainingNode, res.TrainingSucceeded)
	return res, nil
}

// demoRun is the demo's state while it follows the pool through its cycle.
type demoRun struct {
	e   *Env
	log *demoLog
	pw  *podWatch
	kq  *kueueDemo
	res *DemoResult
}

// observe prints what changed in the pool, its workers, Kueue's objects, the nodes and
// the pods since the last look, and records it in r.res. It returns the layouts seen.
func (r *demoRun) observe(ctx context.Context, p *gpupoolv1.GPUPoolProfile) ([]string, error) {
	st := p.Status
	line := fmt.Sprintf("pool %s: phase %s, active %q, desired %q (%s)", p.Name, st.Phase, st.ActiveLayout, st.DesiredLayout, st.DesiredReason)
	if st.NextTransition != nil {
		line += fmt.Sprintf(", next %s at %s", st.NextTransition.Layout, st.NextTransition.At.Format(time.TimeOnly))
	}
	r.log.sayChanged(&r.log.line, line, "%s")
	r.res.Layouts = r.log.noteActive(r.res.Layouts, &st)
	r.log.sayWorkers(st.Workers, r.stepKey)
	if r.e.Kueue {
		if err := r.kq.observe(ctx, r.e, p, r.res, r.log.say); err != nil {
			return r.res.Layouts, err
		}
	}
	if err := r.e.sayNodesAndPods(ctx, r.log, r.res); err != nil {
		return r.res.Layouts, err
	}
	r.notePlacement(ctx, st.ActiveLayout)
	return r.res.Layouts, nil
}

// stepKey is what a worker's line is printed again for when it changes: its step s and,
// while it waits for its node, what the node is waited for (not its time). It records
// the workers seen waiting for their node's nvidia.com/gpu.
func (r *demoRun) stepKey(wk *gpupoolv1.WorkerStatus, s string) string {
	key := s
	if wk.Step == gpupoolv1.StepWaitNodeReady {
		// A line each time what the node is waited for changes (not its time).
		what, _, _ := strings.Cut(wk.Message, " (")
		key += " " + what
		if strings.Contains(wk.Message, "nvidia.com/gpu") && !slices.Contains(r.res.WaitedForGPUs, wk.VM) {
			r.res.WaitedForGPUs = append(r.res.WaitedForGPUs, wk.VM)
		}
	}
	return key
}

// notePlacement starts the PDB check once all inference pods were Ready together and
// records where the workloads run then (by day) and while active is night.
func (r *demoRun) notePlacement(ctx context.Context, active string) {
	// The PDB check starts once all inference pods were Ready together.
	if r.pw.startCounting() {
		// Where the workloads run by day, once they all are up.
		if infer, _, ok := r.e.placement(ctx); ok {
			r.res.InferenceNodesByDay = infer
		}
	}
	if active == "night" {
		if infer, train, ok := r.e.placement(ctx); ok {
			r.res.InferenceNodesAtNight = infer
			if train != "" {
				r.res.TrainingNode = train
			}
		}
	}
}

// demoLog prints a demo's timeline: each line stamped with the time since the demo
// started, and the pool's, its workers', the nodes' and the pods' state only when it
// changed since the last line about it.
type demoLog struct {
	out   io.Writer
	start time.Time
	// line, nodes and pods are the pool's, the nodes' and the pods' lines last printed;
	// steps the key of each worker's (see sayWorkers).
	line, nodes, pods string
	steps             map[string]string
}

// newDemoLog starts a timeline now.
func newDemoLog(out io.Writer) *demoLog {
	return &demoLog{out: out, start: time.Now(), steps: map[string]string{}}
}

// say prints a line stamped with the time since the demo started.
func (l *demoLog) say(format string, args ...any) {
	fmt.Fprintf(l.out, "[%6s] %s\n", time.Since(l.start).Round(time.Second), fmt.Sprintf(format, args...))
}

// sayChanged prints now with format when it differs from *last, and keeps it in *last.
func (l *demoLog) sayChanged(last *string, now, format string) {
	if now != *last {
		l.say(format, now)
		*last = now
	}
}

// noteActive announces the active layout and appends it to layouts when the pool is
// Steady in a layout other than the last seen, and returns layouts.
func (l *demoLog) noteActive(layouts []string, st *gpupoolv1.GPUPoolProfileStatus) []string {
	if st.ActiveLayout != "" && st.Phase == gpupoolv1.PhaseSteady && (len(layouts) == 0 || layouts[len(layouts)-1] != st.ActiveLayout) {
		layouts = append(layouts, st.ActiveLayout)
		l.say("*** layout %s is active", st.ActiveLayout)
	}
	return layouts
}

// sayWorkers prints a worker's step and message each time its key changes (nothing
// while it has no step). The key is its step ("-" for none), or what keyOf makes of it.
func (l *demoLog) sayWorkers(workers []gpupoolv1.WorkerStatus, keyOf func(wk *gpupoolv1.WorkerStatus, step string) string) {
	for i := range workers {
		wk := &workers[i]
		s := string(wk.Step)
		if s == "" {
			s = "-"
		}
		key := s
		if keyOf != nil {
			key = keyOf(wk, s)
		}
		if l.steps[wk.VM] != key {
			if s != "-" {
				l.say("  %-12s %-20s %s", wk.VM, s, wk.Message)
			}
			l.steps[wk.VM] = key
		}
	}
}

// sayNodesAndPods prints the nodes' and the demo pods' lines of snapshot when they changed.
func (e *Env) sayNodesAndPods(ctx context.Context, log *demoLog, res *DemoResult) error {
	nodes, pods, err := e.snapshot(ctx, res)
	if err != nil {
		return err
	}
	log.sayChanged(&log.nodes, nodes, "  nodes: %s")
	log.sayChanged(&log.pods, pods, "  pods:  %s")
	return nil
}

// createPoolAtDay creates the pool and waits until it is Steady in the day layout.
func (e *Env) createPoolAtDay(ctx context.Context, pool *gpupoolv1.GPUPoolProfile) error {
	if err := e.Client.Create(ctx, pool); err != nil {
		return fmt.Errorf("creating the pool: %w", err)
	}
	return e.waitPool(ctx, DemoPool, "the day layout to be active", func(p *gpupoolv1.GPUPoolProfile) bool {
		return p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout == "day"
	})
}

// pollUntilCycled reads the demo pool every second and hands it to observe, which
// returns the layouts seen so far, until they end with day, night, day. When ctx ends
// first, it fails with what and the layouts seen.
func (e *Env) pollUntilCycled(ctx context.Context, what string, observe func(context.Context, *gpupoolv1.GPUPoolProfile) ([]string, error)) error {
	for {
		var p gpupoolv1.GPUPoolProfile
		if err := e.Client.Get(ctx, client.ObjectKey{Name: DemoPool}, &p); err != nil {
			return err
		}
		layouts, err := observe(ctx, &p)
		if err != nil {
			return err
		}
		if n := len(layouts); n >= 3 && strings.Join(layouts[n-3:], ",") == "day,night,day" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s; layouts seen: %v", what, layouts)
		case <-time.After(time.Second):
		}
	}
}

// trainingSucceeded says whether the training Job has completed (false when it cannot
// be read).
func (e *Env) trainingSucceeded(ctx context.Context) bool {
	var job batchv1.Job
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: DemoNamespace, Name: trainingJob}, &job); err == nil {
		return job.Status.Succeeded > 0
	}
	return false
}

// snapshot renders the nodes and where the demo pods run, one line each.
func (e *Env) snapshot(ctx context.Context, res *DemoResult) (string, string, error) {
	var nodes corev1.NodeList
	if err := e.Client.List(ctx, &nodes); err != nil {
		return "", "", err
	}
	var ns []string
	for _, n := range nodes.Items {
		s := n.Name + "="
		if cluster.Ready(&n) {
			s += "Ready"
		} else {
			s += "NotReady"
		}
		if n.Spec.Unschedulable {
			s += ",cordoned"
		}
		if l := n.Labels[gpupoolv1.LabelLayout]; l != "" {
			s += "," + l
		}
		if n.Labels[gpupoolv1.LabelParked] == "true" {
			s += ",parked"
		}
		if g := cluster.AdvertisedGPUs(&n); g != "0" {
			s += ",gpus=" + g
		}
		if st := n.Labels[gpupoolv1.LabelState]; st != "" {
			s += ",state=" + st
		}
		if at := n.Annotations[gpupoolv1.AnnotationDrainAt]; at != "" {
			s += ",draining-soon@" + at
			if !n.Spec.Unschedulable && !slices.Contains(res.Warned, n.Name) {
				res.Warned = append(res.Warned, n.Name)
			}
		}
		ns = append(ns, s)
	}
	sort.Strings(ns)
	var pods corev1.PodList
	if err := e.Client.List(ctx, &pods, client.InNamespace(DemoNamespace)); err != nil {
		return "", "", err
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		node := p.Spec.NodeName
		if node == "" {
			node = "(pending)"
		}
		app := p.Labels["app"]
		if app == "" {
			app = p.Labels["job-name"]
		}
		name := app
		if p.Status.Phase == corev1.PodSucceeded {
			name += "(done)"
		}
		byNode[node] = append(byNode[node], name)
	}
	var ps []string
	for n, apps := range byNode {
		sort.Strings(apps)
		ps = append(ps, n+": "+strings.Join(apps, " "))
	}
	sort.Strings(ps)
	return strings.Join(ns, " "), strings.Join(ps, "; "), nil
}

// placement tells where inference pods run and where the training pod ran.
func (e *Env) placement(ctx context.Context) ([]string, string, bool) {
	var pods corev1.PodList
	if err := e.Client.List(ctx, &pods, client.InNamespace(DemoNamespace)); err != nil {
		return nil, "", false
	}
	var infer []string
	train := ""
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		if p.Labels["app"] == inferenceApp && p.DeletionTimestamp == nil {
			infer = append(infer, p.Spec.NodeName)
		} else if p.Labels["job-name"] == trainingJob || p.Labels["batch.kubernetes.io/job-name"] == trainingJob {
			train = p.Spec.NodeName
		}
	}
	sort.Strings(infer)
	return infer, train, true
}
