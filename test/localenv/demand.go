package localenv

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
	"github.com/gpupool/gpupool/internal/replay"
	"github.com/gpupool/gpupool/internal/trace"
	"github.com/gpupool/gpupool/test/cluster"
)

// The demand demo's timings: short, so that a whole day -> night (by demand) -> day cycle
// runs in a few minutes.
const (
	// DemandFor is how long the training demand must hold before it brings night in.
	DemandFor = 20 * time.Second
	// DemandIdleFor is how long night must be idle before demand lets it go.
	DemandIdleFor = 30 * time.Second
	// DemandMinDwell is the least time a layout stays before demand leaves or lets go of it.
	DemandMinDwell = time.Minute
	// DemandCooldown is the least time between the start of any switch and a demand switch.
	DemandCooldown = 30 * time.Second
	// DemandTrainingRuns is how long the training Job's pod runs (kwok's pod-complete
	// stage, gpupool.dev/sim-run-for).
	DemandTrainingRuns = 20 * time.Second
)

// DemandResult is what the demand demo observed, for the end-to-end test.
type DemandResult struct {
	// Layouts is the sequence of active layouts seen (in phase Steady).
	Layouts []string
	// NightWindow is the schedule's night window start (cron, UTC): hours away.
	NightWindow string
	// TrainingPod is the training Job's pod.
	TrainingPod string
	// PendingReason and PendingMessage are the scheduler's PodScheduled=False condition
	// on the training pod while it waited in the day layout.
	PendingReason, PendingMessage string
	// PendingDemand is status.demand.layouts[night] while the pod was pending and
	// before demand acted.
	PendingDemand gpupoolv1.LayoutDemand
	// WaitMessage is status.demand.message while demand waited for `for`.
	WaitMessage string
	// DesiredNight is the pool's status.desiredReason when it first wanted night.
	DesiredNight gpupoolv1.DesiredReason
	// DesiredNightMessage is status.demand.message then.
	DesiredNightMessage string
	// TransitionToNight is status.transition of the switch to night.
	TransitionToNight *gpupoolv1.TransitionStatus
	// HistoryToNight is the history record of the switch to night, and HistoryToDay of
	// the switch back.
	HistoryToNight, HistoryToDay *gpupoolv1.TransitionRecord
	// TrainingNode is the node the training pod ran on; TrainingRan says it was seen
	// Running there, TrainingSucceeded that the Job completed.
	TrainingNode                   string
	TrainingRan, TrainingSucceeded bool
	// DesiredDayBack is the reason the pool wanted day again after night.
	DesiredDayBack gpupoolv1.DesiredReason
	// DayBackMessage is status.demand.message while night was kept or let go.
	DayBackMessage string
	// MinReadyInference is the fewest Ready inference pods seen once they were all up.
	MinReadyInference int
	// Report is the pool's accounting of the demo's days once day was back.
	Report *accounting.Report
	// Trace is what kubectl gpupool record recorded from the pool's creation to day's
	// return, and Replayed its replay under the live spec (kubectl gpupool simulate).
	Trace    *trace.Trace
	Replayed *replay.Result
	// Threshold is when demand crossed its threshold and had held for `for`:
	// status.demand.layouts[night].pendingSince + for (the operator's clock; the API
	// keeps pendingSince to the second, and the operator decides on that value).
	Threshold time.Time
	// FirstCordon is when this process saw, by a watch, the first day node cordoned,
	// and FirstCordonNode which; FirstCordonEvent is the eventTime of the first
	// Cordoned event (the operator's clock, microseconds).
	FirstCordon, FirstCordonEvent time.Time
	FirstCordonNode               string
	// TransitionStartedEvent is the eventTime of the switch to night's TransitionStarted
	// event (the operator's clock).
	TransitionStartedEvent time.Time
	// Latency is FirstCordon - Threshold; EventLatency is FirstCordonEvent - Threshold.
	Latency, EventLatency time.Duration
}

// DemandPoolSpec is the demo's day/night pool with spec.demand: day is the default and
// the schedule's night window opens only hours from now, so the schedule wants day during
// the whole demo; night may be brought in by pending training pods at any time.
func (e *Env) DemandPoolSpec(now time.Time) *gpupoolv1.GPUPoolProfile {
	p := e.DemoPoolSpec(now, time.Hour)
	start := now.UTC().Add(12 * time.Hour)
	p.Spec.Schedule.Windows[0].Start = fmt.Sprintf("0 %d * * *", start.Hour())
	minGPUs, maxSwitches := int32(1), int32(4)
	p.Spec.Demand = &gpupoolv1.DemandPolicy{
		NamespaceSelector: &metav1.LabelSelector{},
		Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn, MinGPUs: &minGPUs,
			For: &metav1.Duration{Duration: DemandFor}, IdleFor: &metav1.Duration{Duration: DemandIdleFor}}},
		MinDwell:          &metav1.Duration{Duration: DemandMinDwell},
		Cooldown:          &metav1.Duration{Duration: DemandCooldown},
		MaxSwitchesPerDay: &maxSwitches,
	}
	return p
}

// claimTemplate is the ResourceClaimTemplate the claim-based training Job's pod asks for
// its vGPU with: one device of the simulated DRA driver's class.
const claimTemplate = "one-vgpu"

// demandClaimTemplate is the ResourceClaimTemplate of the claim-based demo.
func demandClaimTemplate() *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: claimTemplate, Namespace: DemoNamespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "vgpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: cluster.DeviceClassName}}}}}}}
}

// demandClaimJob is demandJob asking for its vGPU through a ResourceClaimTemplate
// (Dynamic Resource Allocation) instead of the extended resource: the scheduler allocates
// it from the ResourceSlice the simulated driver publishes for the night node.
func demandClaimJob() *batchv1.Job {
	j := demandJob()
	ps := &j.Spec.Template.Spec
	ps.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "vgpu"}}}
	ps.ResourceClaims = []corev1.PodResourceClaim{{Name: "vgpu", ResourceClaimTemplateName: ptr.To(claimTemplate)}}
	return j
}

// demandJob is the training Job of the demand demo: one pod that selects the night
// layout's nodes, tolerates their taint, asks for one GPU and runs DemandTrainingRuns.
func demandJob() *batchv1.Job {
	backoff := int32(0)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: trainingJob, Namespace: DemoNamespace},
		Spec: batchv1.JobSpec{BackoffLimit: &backoff, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{cluster.AnnotationSimRunFor: DemandTrainingRuns.String()}},
			Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "train", Image: "training:demo", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{cluster.GPUResource: resource.MustParse("1")}}}},
				NodeSelector: map[string]string{"lab.example/workload": "training"},
				Tolerations:  []corev1.Toleration{{Key: "lab.example/training", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			}}},
	}
}

// cordonWatch records the first day node this process sees cordoned.
type cordonWatch struct {
	mu   sync.Mutex
	at   time.Time
	node string
}

func (c *cordonWatch) observe(ev watch.Event) {
	n, ok := ev.Object.(*corev1.Node)
	if !ok || !strings.HasPrefix(n.Name, "gpu-day-") || !n.Spec.Unschedulable {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		c.at, c.node = time.Now(), n.Name
	}
}

func (c *cordonWatch) first() (time.Time, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, c.node
}

// RunDemandDemo shows demand at work: with the pool on day, and the schedule wanting day
// for hours, a training Job that needs the night layout is submitted. Its pod waits
// (Unschedulable); once the demand has held for `for`, demand brings night in early, the
// Job runs on the night node and completes, and after night has been idle for idleFor
// (and past minDwell) day, the default layout, comes back. It prints a timeline and the latency
// from the demand crossing its threshold to the first drain (the first day node
// cordoned), and returns what it saw.
func RunDemandDemo(ctx context.Context, e *Env, out io.Writer, timeout time.Duration) (*DemandResult, error) {
	return runDemandDemo(ctx, e, out, timeout, false)
}

// RunDemandClaimDemo is RunDemandDemo with the pool's GPUs named for Dynamic Resource
// Allocation (readiness.dra: the simulated driver's class and driver) and a training Job
// whose pod asks for its vGPU through a ResourceClaimTemplate, not the extended resource.
func RunDemandClaimDemo(ctx context.Context, e *Env, out io.Writer, timeout time.Duration) (*DemandResult, error) {
	return runDemandDemo(ctx, e, out, timeout, true)
}

func runDemandDemo(ctx context.Context, e *Env, out io.Writer, timeout time.Duration, claims bool) (*DemandResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := &demandRun{e: e, log: newDemoLog(out), res: &DemandResult{}, pw: newPodWatch(), claims: claims}
	res := r.res
	if err := r.setUp(ctx); err != nil {
		return nil, err
	}
	rec, err := e.startRecording(DemoPool)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = rec.stop()
		}
	}()

	go e.follow(ctx, &corev1.PodList{}, []client.ListOption{client.InNamespace(DemoNamespace)}, r.pw.onEvent)
	cw := &cordonWatch{}
	go e.follow(ctx, &corev1.NodeList{}, nil, cw.observe)

	if err := e.pollUntilCycled(ctx, fmt.Sprintf("no day -> night -> day cycle by demand within %s", timeout), r.observe); err != nil {
		return res, err
	}

	res.TrainingSucceeded = e.trainingSucceeded(ctx)
	if err := r.readHistory(ctx); err != nil {
		return res, err
	}
	stopped = true
	if res.Trace, err = rec.stop(); err != nil {
		return res, err
	}
	res.MinReadyInference = r.pw.minReady()
	r.sayHistory()
	r.measureLatency(ctx, cw)
	r.log.say("cycle complete: layouts %s; night brought in by %s (%s); training ran on %s (succeeded: %v); day back by %s; fewest Ready inference pods: %d of %d",
		strings.Join(res.Layouts, " -> "), res.DesiredNight, causeOf(res.TransitionToNight), res.TrainingNode, res.TrainingSucceeded,
		res.DesiredDayBack, res.MinReadyInference, inferenceSize)
	through := time.Now()
	if h := res.HistoryToDay; h != nil {
		through = h.EndTime.Time
	}
	report, err := e.reportUsage(ctx, out, through)
	res.Report = report
	if err != nil {
		return res, err
	}
	res.Replayed, err = e.simulateRecording(ctx, out, res.Trace, rec.path)
	return res, err
}

// demandRun is the demand demo's state while it runs.
type demandRun struct {
	e   *Env
	log *demoLog
	res *DemandResult
	pw  *podWatch
	// claims: the Job asks for its vGPU through a ResourceClaimTemplate (readiness.dra).
	claims bool
	// submitted says whether the training Job was submitted.
	submitted bool
	// lastDemand and lastPod are the demand message and the training pod's line last
	// printed.
	lastDemand, lastPod string
}

// setUp creates the demand pool, waits for day and applies the inference workload.
func (r *demandRun) setUp(ctx context.Context) error {
	pool := r.e.DemandPoolSpec(time.Now())
	if r.claims {
		pool.Spec.Readiness.DRA = &gpupoolv1.DRASpec{DeviceClassName: cluster.DeviceClassName, Driver: cluster.DRADriver}
	}
	r.res.NightWindow = pool.Spec.Schedule.Windows[0].Start
	r.log.say("applying GPUPoolProfile %s: day by default, night window %q (UTC, hours away); demand: night BringIn for %s (minGPUs 1), idleFor %s, minDwell %s, cooldown %s, maxEvictions 0 (GPU pods)",
		pool.Name, r.res.NightWindow, DemandFor, DemandIdleFor, DemandMinDwell, DemandCooldown)
	if err := r.e.createPoolAtDay(ctx, pool); err != nil {
		return err
	}
	r.log.say("applying Deployment %s/%s (%d replicas, no GPU requests, PDB maxUnavailable 1, prefers day nodes, can fall back to the CPU node)",
		DemoNamespace, inferenceApp, inferenceSize)
	return r.e.applyInference(ctx)
}

// observe prints what changed in the pool, its demand, its workers, the nodes and the
// pods since the last look, submits the training Job when it is time, and from then on
// follows the training pod and the pool's decisions. It returns the layouts seen.
func (r *demandRun) observe(ctx context.Context, p *gpupoolv1.GPUPoolProfile) ([]string, error) {
	st := p.Status
	line := fmt.Sprintf("pool %s: phase %s, active %q, desired %q (%s)", p.Name, st.Phase, st.ActiveLayout, st.DesiredLayout, st.DesiredReason)
	if st.NextTransition != nil {
		line += fmt.Sprintf(", next %s at %s", st.NextTransition.Layout, st.NextTransition.At.UTC().Format(time.TimeOnly))
	}
	r.log.sayChanged(&r.log.line, line, "%s")
	if st.Demand != nil && st.Demand.Message != "" {
		r.log.sayChanged(&r.lastDemand, st.Demand.Message, "  demand: %s")
	}
	r.res.Layouts = r.log.noteActive(r.res.Layouts, &st)
	r.log.sayWorkers(st.Workers, nil)
	if err := r.e.sayNodesAndPods(ctx, r.log, &DemoResult{}); err != nil {
		return r.res.Layouts, err
	}

	r.pw.startCounting()
	// The Job is submitted once the inference pods all run on the day nodes and demand
	// is free to act at once (day past its dwell and the cooldown), so that the latency
	// measured is demand's own.
	if !r.submitted && r.pw.isCounting() && len(r.res.Layouts) > 0 {
		if err := r.submitJob(ctx, p); err != nil {
			return r.res.Layouts, err
		}
		r.submitted = true
	}
	if r.submitted {
		if err := r.e.observeTraining(ctx, p, r.res, r.log.say, &r.lastPod); err != nil {
			return r.res.Layouts, err
		}
	}
	return r.res.Layouts, nil
}

// submitJob waits until demand is free to switch the pool away from day (demandFreeAt),
// then submits the training Job.
func (r *demandRun) submitJob(ctx context.Context, p *gpupoolv1.GPUPoolProfile) error {
	if wait := time.Until(demandFreeAt(p)); wait > 0 {
		r.log.say("waiting %s for day's minDwell and the cooldown to pass before submitting the Job", wait.Round(time.Second))
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
	job, asks := demandJob(), "nvidia.com/gpu: 1"
	if r.claims {
		if err := r.e.Client.Create(ctx, demandClaimTemplate()); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating the ResourceClaimTemplate: %w", err)
		}
		job, asks = demandClaimJob(), "a ResourceClaimTemplate "+claimTemplate+" of one "+cluster.DeviceClassName+" device"
	}
	r.log.say("submitting Job %s/%s: one pod, nodeSelector lab.example/workload=training, tolerates lab.example/training, %s, runs %s",
		DemoNamespace, trainingJob, asks, DemandTrainingRuns)
	if err := r.e.Client.Create(ctx, job); err != nil {
		return fmt.Errorf("creating the training Job: %w", err)
	}
	return nil
}

// readHistory records the pool's history records of the switch to night and of the
// newest switch to day after it.
func (r *demandRun) readHistory(ctx context.Context) error {
	var p gpupoolv1.GPUPoolProfile
	if err := r.e.Client.Get(ctx, client.ObjectKey{Name: DemoPool}, &p); err != nil {
		return err
	}
	res := r.res
	for i := range p.Status.History {
		h := &p.Status.History[i]
		if h.To == "night" && res.HistoryToNight == nil {
			res.HistoryToNight = h
		}
		if h.To == "day" && res.HistoryToDay == nil && res.HistoryToNight == nil {
			res.HistoryToDay = h // the newest switch to day, newer than the one to night
		}
	}
	return nil
}

// sayHistory prints the history records readHistory found.
func (r *demandRun) sayHistory() {
	for _, h := range []*gpupoolv1.TransitionRecord{r.res.HistoryToNight, r.res.HistoryToDay} {
		if h != nil {
			r.log.say("history: %s -> %s by %s (%s, %s to %s)%s", h.From, h.To, h.Reason, h.Result,
				h.StartTime.UTC().Format(time.TimeOnly), h.EndTime.UTC().Format(time.TimeOnly), prefixed(": ", h.Message))
		}
	}
}

// measureLatency records and prints the latency from demand crossing its threshold to
// the first drain: the first day node cw saw cordoned, and the operator's events.
func (r *demandRun) measureLatency(ctx context.Context, cw *cordonWatch) {
	res := r.res
	res.FirstCordon, res.FirstCordonNode = cw.first()
	res.FirstCordonEvent = r.e.firstEvent(ctx, "Cordoned", res.Threshold)
	res.TransitionStartedEvent = r.e.firstEvent(ctx, "TransitionStarted", res.Threshold)
	if res.Threshold.IsZero() || res.FirstCordon.IsZero() {
		return
	}
	res.Latency = res.FirstCordon.Sub(res.Threshold)
	r.log.say("latency: demand crossed its threshold at %s (pendingSince %s + for %s); first drain: node %s cordoned, seen at %s by a watch: %s later",
		res.Threshold.UTC().Format("15:04:05.000"), res.PendingDemand.PendingSince.UTC().Format(time.TimeOnly), DemandFor,
		res.FirstCordonNode, res.FirstCordon.UTC().Format("15:04:05.000"), res.Latency.Round(time.Millisecond))
	if !res.FirstCordonEvent.IsZero() {
		res.EventLatency = res.FirstCordonEvent.Sub(res.Threshold)
		r.log.say("latency: the operator's events: TransitionStarted %s, first Cordoned %s: %s after the threshold (one clock: the operator, the API server and this process run on this machine)",
			res.TransitionStartedEvent.UTC().Format("15:04:05.000000"), res.FirstCordonEvent.UTC().Format("15:04:05.000000"), res.EventLatency.Round(time.Millisecond))
	}
}

func causeOf(t *gpupoolv1.TransitionStatus) string {
	if t == nil {
		return "no transition seen"
	}
	return t.Cause
}

// observeTraining follows the training pod and the pool's decisions after the Job was
// submitted, recording each step of the demo in res.
func (e *Env) observeTraining(ctx context.Context, p *gpupoolv1.GPUPoolProfile, res *DemandResult, say func(string, ...any), lastPod *string) error {
	st := &p.Status
	var pods corev1.PodList
	if err := e.Client.List(ctx, &pods, client.InNamespace(DemoNamespace), client.MatchingLabels{"batch.kubernetes.io/job-name": trainingJob}); err != nil {
		return err
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].CreationTimestamp.Before(&pods.Items[j].CreationTimestamp) })
	for i := range pods.Items {
		pod := &pods.Items[i]
		res.TrainingPod = pod.Name
		desc := fmt.Sprintf("training pod %s: %s", pod.Name, pod.Status.Phase)
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				desc += fmt.Sprintf(", PodScheduled=False %s: %s", c.Reason, c.Message)
				if res.PendingReason == "" && pod.Spec.NodeName == "" {
					res.PendingReason, res.PendingMessage = c.Reason, c.Message
				}
			}
		}
		if pod.Spec.NodeName != "" {
			desc += " on " + pod.Spec.NodeName
			res.TrainingNode = pod.Spec.NodeName
			if pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodSucceeded {
				res.TrainingRan = true
			}
		}
		if desc != *lastPod {
			say("  %s", desc)
			*lastPod = desc
		}
	}
	if st.Demand != nil {
		for _, l := range st.Demand.Layouts {
			if l.Layout == "night" && l.PendingSince != nil && res.Threshold.IsZero() {
				res.PendingDemand = l
				res.Threshold = l.PendingSince.Add(DemandFor)
				res.WaitMessage = st.Demand.Message
				say("  status.demand.layouts[night]: pendingPods %d, pendingGPUs %d, pods %v, pendingSince %s: demand acts at %s",
					l.PendingPods, l.PendingGPUs, l.Pods, l.PendingSince.UTC().Format(time.TimeOnly), res.Threshold.UTC().Format(time.TimeOnly))
			}
		}
	}
	if st.DesiredLayout == "night" && res.DesiredNight == "" {
		res.DesiredNight = st.DesiredReason
		if st.Demand != nil {
			res.DesiredNightMessage = st.Demand.Message
		}
		say("  desired night by %s", st.DesiredReason)
	}
	if t := st.Transition; t != nil && t.To == "night" && res.TransitionToNight == nil {
		res.TransitionToNight = t.DeepCopy()
		say("  transition %s: %s -> %s, reason %s, cause: %s", t.ID, t.From, t.To, t.Reason, t.Cause)
	}
	if res.TransitionToNight != nil && st.DesiredLayout == "day" && res.DesiredDayBack == "" {
		res.DesiredDayBack = st.DesiredReason
		if st.Demand != nil {
			res.DayBackMessage = st.Demand.Message
		}
		say("  desired day again by %s", st.DesiredReason)
	}
	return nil
}

// demandFreeAt is when demand may switch the pool away from its active layout: past the
// layout's dwell (from the end of the switch to it) and the cooldown (from the start of
// the newest switch).
func demandFreeAt(p *gpupoolv1.GPUPoolProfile) time.Time {
	var free time.Time
	for _, h := range p.Status.History {
		if h.To == p.Status.ActiveLayout && !h.EndTime.IsZero() {
			free = later(free, h.EndTime.Add(DemandMinDwell))
		}
		free = later(free, h.StartTime.Add(DemandCooldown))
	}
	// One second more: the API keeps these times to the second.
	if !free.IsZero() {
		free = free.Add(time.Second)
	}
	return free
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// prefixed is s after prefix, or "" when s is empty.
func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// firstEvent is the eventTime of the pool's earliest event with the reason at or after
// since (less a second: the API keeps since to the second), zero if none.
func (e *Env) firstEvent(ctx context.Context, reason string, since time.Time) time.Time {
	var evs eventsv1.EventList
	if err := e.Client.List(ctx, &evs); err != nil {
		return time.Time{}
	}
	var first time.Time
	for _, ev := range evs.Items {
		if ev.Reason != reason || ev.Regarding.Kind != "GPUPoolProfile" || ev.Regarding.Name != DemoPool {
			continue
		}
		t := ev.EventTime.Time
		if t.IsZero() {
			t = ev.CreationTimestamp.Time
		}
		if t.Before(since.Add(-time.Second)) {
			continue
		}
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}
