package controllers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/kueueenv"
)

// The tests of the Kueue bridge run Kueue's own manager (built by 'make kueue' from the
// pinned module) against the suite's API server, with its CRDs and its webhooks (served on
// loopback, test/kueueenv): a Job submitted to a LocalQueue is suspended by Kueue's
// webhook and gets its Workload from Kueue's job integration, as in a cluster.

var (
	kueueOnce sync.Once
	kueueErr  error
	kueueCmd  *exec.Cmd
	kueueExit chan struct{}
	kueueLog  *lockedBuffer
	kueueDir  string
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startKueue starts Kueue's manager once for the suite.
func startKueue(t *testing.T) {
	t.Helper()
	kueueOnce.Do(func() { kueueErr = launchKueue() })
	if kueueErr != nil {
		t.Fatal(kueueErr)
	}
}

func stopKueue() {
	if kueueCmd != nil && kueueCmd.Process != nil {
		_ = kueueCmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-kueueExit:
		case <-time.After(10 * time.Second):
			_ = kueueCmd.Process.Kill()
			<-kueueExit
		}
	}
	if kueueDir != "" {
		_ = os.RemoveAll(kueueDir)
	}
}

func launchKueue() error {
	ctx := context.Background()
	paths, err := kueueenv.In(suiteEnv.BinaryAssetsDirectory)
	if err != nil {
		return err
	}
	if kueueDir, err = os.MkdirTemp("", "gpupool-kueue-"); err != nil {
		return err
	}
	kubeconfig := filepath.Join(kueueDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, suiteEnv.KubeConfig, 0o600); err != nil {
		return err
	}
	served, err := kueueenv.Prepare(kueueDir, kubeconfig)
	if err != nil {
		return err
	}
	if err := kueueenv.Install(ctx, suiteEnv.Config, paths, served); err != nil {
		return fmt.Errorf("installing Kueue: %w", err)
	}
	kueueLog = &lockedBuffer{}
	kueueCmd = exec.Command(paths.Bin, served.Args...)
	kueueCmd.Stdout, kueueCmd.Stderr = kueueLog, kueueLog
	// Killed with the test binary, also when a test times out and TestMain's cleanup
	// does not run.
	kueueCmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := kueueCmd.Start(); err != nil {
		return fmt.Errorf("starting Kueue: %w", err)
	}
	kueueExit = make(chan struct{})
	go func() { _ = kueueCmd.Wait(); close(kueueExit) }()
	running := func() error {
		select {
		case <-kueueExit:
			return fmt.Errorf("%v; log (tail): %s", kueueCmd.ProcessState, tail(kueueLog.String(), 4000))
		default:
			return nil
		}
	}
	if err := kueueenv.Ready(ctx, suiteEnv.Config, time.Minute, running); err != nil {
		return fmt.Errorf("%w; log (tail): %s", err, tail(kueueLog.String(), 4000))
	}
	return nil
}

func kueueObject(y string) *unstructured.Unstructured { return kueueenv.Object(y) }

// kueueWorld is what a test creates in Kueue: the day and night flavors (selecting the
// layouts' nodes by their nodeLabels), gpupool's AdmissionCheck, an opted-in ClusterQueue
// that uses it, another ClusterQueue that did not opt in, and a LocalQueue.
type kueueWorld struct {
	day, night, check, optedIn, other, queue string
}

func (h *harness) kueueWorld(pool string) kueueWorld {
	h.t.Helper()
	p := h.prefix
	w := kueueWorld{day: p + "day", night: p + "night", check: p + "layout", optedIn: p + "cq", other: p + "other", queue: p + "lq"}
	objs := []string{
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ResourceFlavor, metadata: {name: %s}, spec: {nodeLabels: {lab.example/workload: inference}}}`, w.day),
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ResourceFlavor, metadata: {name: %s}, spec: {nodeLabels: {lab.example/workload: training, kueue.test/flavor: night}}}`, w.night),
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: AdmissionCheck, metadata: {name: %s}, spec: {controllerName: %s}}`, w.check, gpupoolv1.KueueAdmissionCheckController),
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {name: %s, labels: {%s: %s}},
  spec: {namespaceSelector: {}, admissionChecksStrategy: {admissionChecks: [{name: %s}]},
    resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [
      {name: %s, resources: [{name: nvidia.com/gpu, nominalQuota: "9"}]},
      {name: %s, resources: [{name: nvidia.com/gpu, nominalQuota: "9"}]}]}]}}`, w.optedIn, gpupoolv1.LabelKueuePool, pool, w.check, w.day, w.night),
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {name: %s},
  spec: {namespaceSelector: {}, resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [
      {name: %s, resources: [{name: nvidia.com/gpu, nominalQuota: "9"}]},
      {name: %s, resources: [{name: nvidia.com/gpu, nominalQuota: "9"}]}]}]}}`, w.other, w.day, w.night),
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: LocalQueue, metadata: {name: %s, namespace: %sapps}, spec: {clusterQueue: %s}}`, w.queue, p, w.optedIn),
	}
	for _, y := range objs {
		o := kueueObject(y)
		h.must(k8s.Create(h.ctx, o))
		h.t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	}
	return w
}

// workload creates a Workload as Kueue's job integration would for a Job of one pod
// asking for gpus GPUs on the nodes labelled lab.example/workload=<selects>.
func (h *harness) workload(w kueueWorld, name, selects string, gpus int) *unstructured.Unstructured {
	h.t.Helper()
	o := kueueObject(fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: Workload, metadata: {name: %s, namespace: %sapps},
  spec: {queueName: %s, podSets: [{name: main, count: 1, template: {spec: {restartPolicy: Never,
    nodeSelector: {lab.example/workload: %s},
    containers: [{name: c, image: train, resources: {requests: {nvidia.com/gpu: "%d"}, limits: {nvidia.com/gpu: "%d"}}}]}}}]}}`,
		name, h.prefix, w.queue, selects, gpus, gpus))
	h.must(k8s.Create(h.ctx, o))
	h.t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
	return o
}

// job submits a Job of one pod asking for gpus GPUs on the nodes labelled
// lab.example/workload=<selects> to the LocalQueue, as a user does, and returns the
// Workload Kueue's job integration creates for it (Kueue's webhook suspends the Job).
func (h *harness) job(w kueueWorld, name, selects string, gpus int) (*batchv1.Job, *unstructured.Unstructured) {
	h.t.Helper()
	gpu := corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse(strconv.Itoa(gpus))}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.prefix + "apps", Labels: map[string]string{"kueue.x-k8s.io/queue-name": w.queue}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			NodeSelector: map[string]string{"lab.example/workload": selects},
			Containers:   []corev1.Container{{Name: "train", Image: "train", Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu}}}}}}}
	h.must(k8s.Create(h.ctx, j))
	h.t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), j, client.PropagationPolicy(metav1.DeletePropagationBackground))
	})
	if j.Spec.Suspend == nil || !*j.Spec.Suspend {
		h.t.Fatalf("Job %s was not suspended by Kueue's webhook on creation", name)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		list := kueueList(kueueWorkload)
		h.must(k8s.List(h.ctx, list, client.InNamespace(j.Namespace)))
		for i := range list.Items {
			for _, o := range list.Items[i].GetOwnerReferences() {
				if o.UID == j.UID {
					return j, &list.Items[i]
				}
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no Workload for Job %s within 90s; Kueue log (tail): %s", name, tail(kueueLog.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// untilKueue polls the object until cond holds: Kueue's controller runs on its own clock,
// so the tests wait for it, with a deadline.
func (h *harness) untilKueue(o *unstructured.Unstructured, what string, cond func(*unstructured.Unstructured) bool) {
	h.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := k8s.Get(h.ctx, client.ObjectKeyFromObject(o), o); err == nil && cond(o) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s %s: %s did not happen within 90s; object: %v; Kueue log (tail): %s", o.GetKind(), o.GetName(), what, o.Object["status"],
				tail(kueueLog.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gpupoolCheck is the state and message of the check named check on the Workload.
func gpupoolCheck(wl *unstructured.Unstructured, check string) (state, message string) {
	states, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	for _, s := range states {
		if m, ok := s.(map[string]any); ok && m["name"] == check {
			return fmt.Sprint(m["state"]), fmt.Sprint(m["message"])
		}
	}
	return "", ""
}

// nominalQuota reads the GPU quota of a flavor in a ClusterQueue.
func (h *harness) nominalQuota(cq, flavor string) string {
	h.t.Helper()
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(kueueClusterQueue)
	h.must(k8s.Get(h.ctx, client.ObjectKey{Name: cq}, o))
	groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "resourceGroups")
	for _, g := range groups {
		for _, f := range g.(map[string]any)["flavors"].([]any) {
			fm := f.(map[string]any)
			if fm["name"] != flavor {
				continue
			}
			for _, r := range fm["resources"].([]any) {
				rm := r.(map[string]any)
				if rm["name"] == nodes.DefaultGPUResource {
					q := resource.MustParse(fmt.Sprint(rm["nominalQuota"]))
					return q.String()
				}
			}
		}
	}
	return ""
}

func (h *harness) quotas(w kueueWorld) string {
	h.t.Helper()
	return fmt.Sprintf("opted-in day=%s night=%s, other day=%s night=%s", h.nominalQuota(w.optedIn, w.day), h.nominalQuota(w.optedIn, w.night),
		h.nominalQuota(w.other, w.day), h.nominalQuota(w.other, w.night))
}

func gpuList(q string) corev1.ResourceList {
	return corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse(q)}
}

// TestKueueBridge, against Kueue's own controller: the quota of the pool's flavors follows
// the layout in the ClusterQueue that opted in (and only there); a day Workload submitted
// by night reserves day's waiting quota and is held by gpupool's check with when day
// comes, counts as demand for day, and is admitted by Kueue once day's nodes are ready.
func TestKueueBridge(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kq-")
	h.kueueFollows = true // the Kueue controller follows each pool pass, as in the manager
	pool := h.demandPool()
	pool.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
		{Name: h.prefix + "day", Layout: "day", Quota: gpuList("4"), WaitingQuota: gpuList("1")},
		{Name: h.prefix + "night", Layout: "night", Quota: gpuList("2")},
	}}
	h.create(pool)
	w := h.kueueWorld(pool.Name)
	h.converge(pool.Name, "night", 40)

	// Night is ready for work: night has its quota, day what stays of it; the other
	// ClusterQueue keeps what its author wrote.
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=1 night=2, other day=9 night=9"; got != want {
		t.Fatalf("quota with night ready: %s, want %s", got, want)
	}
	h.kueueGauges(pool.Name, w, "quota day=1 night=2, held 0")

	// A day Workload by night: Kueue reserves day's waiting quota, gpupool's check holds it.
	wl := h.workload(w, "train", "inference", 1)
	h.untilKueue(wl, "quota reserved and gpupool's check listed", func(o *unstructured.Unstructured) bool {
		st, _ := gpupoolCheck(o, w.check)
		return conditionTrue(o, "QuotaReserved") && st != ""
	})
	h.reconcile(pool.Name)
	h.untilKueue(wl, "gpupool's check Pending with its message", func(o *unstructured.Unstructured) bool {
		st, msg := gpupoolCheck(o, w.check)
		return st == checkPending && msg != ""
	})
	st, msg := gpupoolCheck(wl, w.check)
	// Day's window opens at 08:00; its switch starts leadTime (10m) before.
	start := time.Date(monday0700.Year(), monday0700.Month(), monday0700.Day(), 7, 50, 0, 0, monday0700.Location())
	if want := "waiting for layout day: the switch to it starts at 07:50 " + weekZone() + " (" + inDuration(start.Sub(h.clock.Now())) + ")"; msg != want || conditionTrue(wl, "Admitted") {
		t.Fatalf("day Workload by night: check %s %q, admitted %v; want Pending, waiting for layout day's switch at 07:50", st, msg, conditionTrue(wl, "Admitted"))
	}
	if !strings.HasPrefix(msg, "waiting for layout day: the switch to it starts at 07:50 "+weekZone()+" (in ") {
		t.Fatalf("message %q", msg)
	}
	t.Logf("held: %s %q", st, msg)
	h.kueueGauges(pool.Name, w, "quota day=1 night=2, held 1")
	// It counts as demand for day.
	if d := layoutDemand(h.get(pool.Name), "day"); d.PendingGPUs != 1 || !containsString(d.Pods, "workload "+h.prefix+"apps/train") {
		t.Fatalf("day demand %+v, want 1 pending GPU from workload %sapps/train", d, h.prefix)
	}

	// warnAhead (leadTime, 10m) before the switch at 07:50: night keeps what stays of it (0).
	h.clock.SetTime(monday0700.Add(41 * time.Minute))
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=1 night=0, other day=9 night=9"; got != want {
		t.Fatalf("quota at warnAhead before day: %s, want %s", got, want)
	}

	// Day comes: its quota is raised once its nodes are ready, the check turns Ready and
	// Kueue admits the Workload.
	h.clock.SetTime(monday0700.Add(50 * time.Minute))
	h.converge(pool.Name, "day", 60)
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=4 night=0, other day=9 night=9"; got != want {
		t.Fatalf("quota with day ready: %s, want %s", got, want)
	}
	h.kueueGauges(pool.Name, w, "quota day=4 night=0, held 0")
	h.untilKueue(wl, "admitted by Kueue", func(o *unstructured.Unstructured) bool { return conditionTrue(o, "Admitted") })
	if st, msg := gpupoolCheck(wl, w.check); st != checkReady || msg != "layout day is ready for work" {
		t.Fatalf("check after day came: %s %q, want Ready", st, msg)
	}
	if d := layoutDemand(h.get(pool.Name), "day"); d.PendingGPUs != 0 {
		t.Fatalf("day demand once admitted: %+v, want none", d)
	}

	// Without spec.kueue the pool's Kueue series go.
	h.patchPool(pool.Name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Kueue = nil })
	h.reconcile(pool.Name)
	if n := seriesOf(pool.Name); n != 0 {
		t.Fatalf("%d Kueue series of pool %s left after spec.kueue was removed", n, pool.Name)
	}
}

// gaugeValue is the value of the gauge's series with these label values, or "absent":
// unlike WithLabelValues, reading it does not create the series.
func gaugeValue(g *prometheus.GaugeVec, values ...string) string {
	ch := make(chan prometheus.Metric, 1000)
	g.Collect(ch)
	close(ch)
	want := sortedCopy(values)
	for m := range ch {
		var pb dto.Metric
		_ = m.Write(&pb)
		var got []string
		for _, l := range pb.GetLabel() {
			got = append(got, l.GetValue())
		}
		if slices.Equal(sortedCopy(got), want) {
			return fmt.Sprintf("%g", pb.GetGauge().GetValue())
		}
	}
	return "absent"
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// seriesOf counts the Kueue gauges' series labelled with the pool.
func seriesOf(pool string) int {
	n := 0
	for _, g := range []*prometheus.GaugeVec{kueueFlavorQuota, kueueHeld} {
		ch := make(chan prometheus.Metric, 100)
		g.Collect(ch)
		close(ch)
		for m := range ch {
			var pb dto.Metric
			_ = m.Write(&pb)
			for _, l := range pb.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					n++
				}
			}
		}
	}
	return n
}

// kueueGauges checks the pool's Kueue gauges (gpupool_kueue_flavor_quota of the GPUs of
// day and night, gpupool_kueue_held_workloads).
func (h *harness) kueueGauges(pool string, w kueueWorld, want string) {
	h.t.Helper()
	q := func(f string) string { return gaugeValue(kueueFlavorQuota, pool, f, string(nodes.DefaultGPUResource)) }
	got := fmt.Sprintf("quota day=%s night=%s, held %s", q(w.day), q(w.night), gaugeValue(kueueHeld, pool))
	if got != want {
		h.t.Fatalf("Kueue gauges: %s, want %s", got, want)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestKueueDemandBringsNightIn: a night Job submitted to a LocalQueue by day is suspended
// by Kueue's webhook, and its Workload is held by gpupool's check within night's waiting
// quota; as demand it brings night in early (BringIn), the check says the demand switch
// is in progress, and Kueue admits the Workload, and starts the Job, once the night node
// is ready for work.
func TestKueueDemandBringsNightIn(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kqd-")
	h.kueueFollows = true // the Kueue controller follows each pool pass, as in the manager
	pool := h.demandPool()
	pool.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
		{Name: h.prefix + "day", Layout: "day", Quota: gpuList("4")},
		{Name: h.prefix + "night", Layout: "night", Quota: gpuList("2"), WaitingQuota: gpuList("1")},
	}}
	h.create(pool)
	w := h.kueueWorld(pool.Name)
	h.converge(pool.Name, "night", 40)
	h.clock.SetTime(monday0700.Add(50 * time.Minute))
	h.converge(pool.Name, "day", 60)
	h.clock.Step(20 * time.Minute) // past day's dwell
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=4 night=1, other day=9 night=9"; got != want {
		t.Fatalf("quota with day ready: %s, want %s", got, want)
	}

	job, wl := h.job(w, "train", "training", 1)
	h.untilKueue(wl, "quota reserved on night and gpupool's check listed", func(o *unstructured.Unstructured) bool {
		st, _ := gpupoolCheck(o, w.check)
		return conditionTrue(o, "QuotaReserved") && st != ""
	})
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	wlName := "workload " + h.prefix + "apps/" + wl.GetName()
	if d := layoutDemand(p, "night"); d.PendingGPUs != 1 || !containsString(d.Pods, wlName) || d.PendingSince == nil {
		t.Fatalf("night demand %+v, want the held Workload", d)
	}
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(wl), wl))
	if st, msg := gpupoolCheck(wl, w.check); st != checkPending || !strings.HasPrefix(msg, "waiting for layout night: the switch to it starts at 19:50 "+weekZone()+" (in ") {
		t.Fatalf("night Workload by day: check %s %q, want Pending until night's switch at 19:50", st, msg)
	}

	// Held for `for` (2m): demand brings night in.
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if tr := p.Status.Transition; tr == nil || tr.To != "night" || tr.Reason != gpupoolv1.DesiredByDemand || !strings.Contains(tr.Cause, wlName) {
		t.Fatalf("transition %+v (demand: %s), want a demand switch to night caused by the Workload", p.Status.Transition, p.Status.Demand.Message)
	}
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(wl), wl))
	if st, msg := gpupoolCheck(wl, w.check); st != checkPending || msg != "waiting for layout night: demand switch in progress" {
		t.Fatalf("during the switch: check %s %q", st, msg)
	}
	h.converge(pool.Name, "night", 60)
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=0 night=2, other day=9 night=9"; got != want {
		t.Fatalf("quota with night ready: %s, want %s", got, want)
	}
	h.untilKueue(wl, "admitted by Kueue", func(o *unstructured.Unstructured) bool { return conditionTrue(o, "Admitted") })
	// Kueue starts the Job it admitted, on the night flavor's nodes.
	deadline := time.Now().Add(90 * time.Second)
	for h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(job), job)); job.Spec.Suspend != nil && *job.Spec.Suspend; h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(job), job)) {
		if time.Now().After(deadline) {
			t.Fatalf("Job still suspended 90s after its Workload was admitted")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The Job asked for lab.example/workload=training only; Kueue adds its flavor's labels.
	if sel := job.Spec.Template.Spec.NodeSelector; sel["kueue.test/flavor"] != "night" || sel["lab.example/workload"] != "training" {
		t.Fatalf("admitted Job's nodeSelector %v, want the night flavor's node labels", sel)
	}
}

// TestKueueSampleIsAccepted: every object of samples/kueue.yaml is accepted by the API
// server, Kueue's own webhooks included, and the sample's pool maps exactly the flavors
// its opted-in ClusterQueue lists. Its Job is queued in the sample's LocalQueue, stays
// suspended, asks for a GPU, and can only be given the night flavor: it selects the
// night flavor's node labels and tolerates its taints.
func TestKueueSampleIsAccepted(t *testing.T) {
	startKueue(t)
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "samples", "kueue.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var pool *gpupoolv1.GPUPoolProfile
	var cq, job *unstructured.Unstructured
	flavors := map[string]*unstructured.Unstructured{}
	localQueues := map[string]bool{}
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatalf("samples/kueue.yaml: %s %s rejected: %v", u.GetKind(), u.GetName(), err)
		}
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
		switch u.GetKind() {
		case "GPUPoolProfile":
			pool = &gpupoolv1.GPUPoolProfile{}
			if err := fromUnstructured(u.Object, pool); err != nil {
				t.Fatal(err)
			}
		case "ClusterQueue":
			cq = u
		case "ResourceFlavor":
			flavors[u.GetName()] = u
		case "LocalQueue":
			localQueues[u.GetNamespace()+"/"+u.GetName()] = true
		case "Job":
			job = u
		}
	}
	checkSampleJob(t, job, localQueues, flavors)
	if pool == nil || pool.Spec.Kueue == nil || cq == nil {
		t.Fatal("samples/kueue.yaml needs a pool with spec.kueue and a ClusterQueue")
	}
	if got := cq.GetLabels()[gpupoolv1.LabelKueuePool]; got != pool.Name {
		t.Errorf("ClusterQueue %s opts in to pool %q, want %q", cq.GetName(), got, pool.Name)
	}
	want := map[string]corev1.ResourceList{}
	for _, f := range pool.Spec.Kueue.Flavors {
		want[f.Name] = f.Quota
	}
	changed, err := setQuota(cq, want)
	if err != nil || !changed {
		t.Errorf("the pool's quota would not change the ClusterQueue (changed %v, err %v): its flavors are not the pool's", changed, err)
	}
}

// checkSampleJob checks the Job of samples/kueue.yaml: in a LocalQueue of the sample,
// suspended (Kueue starts it), asking for a GPU, and fitting the night flavor only.
func checkSampleJob(t *testing.T, u *unstructured.Unstructured, localQueues map[string]bool, flavors map[string]*unstructured.Unstructured) {
	t.Helper()
	if u == nil {
		t.Fatal("samples/kueue.yaml has no Job")
	}
	job := &batchv1.Job{}
	if err := fromUnstructured(u.Object, job); err != nil {
		t.Fatal(err)
	}
	if q := job.Namespace + "/" + job.Labels["kueue.x-k8s.io/queue-name"]; !localQueues[q] {
		t.Errorf("Job %s is queued in %s, not a LocalQueue of the sample (%v)", job.Name, q, localQueues)
	}
	if job.Spec.Suspend == nil || !*job.Spec.Suspend {
		t.Errorf("Job %s is not suspended: it would start before Kueue admits it", job.Name)
	}
	pod := &job.Spec.Template.Spec
	if len(pod.Containers) == 0 || pod.Containers[0].Resources.Limits.Name("nvidia.com/gpu", resource.DecimalSI).IsZero() {
		t.Errorf("Job %s asks for no nvidia.com/gpu", job.Name)
	}
	for name, f := range flavors {
		labels, _, _ := unstructured.NestedStringMap(f.Object, "spec", "nodeLabels")
		taints, _, _ := unstructured.NestedSlice(f.Object, "spec", "nodeTaints")
		fits := labelsSelect(pod.NodeSelector, labels) && toleratesAll(pod.Tolerations, taints)
		if want := strings.HasPrefix(name, "night-"); fits != want {
			t.Errorf("Job %s fits flavor %s: %v, want %v (nodeSelector %v, tolerations %v)", job.Name, name, fits, want, pod.NodeSelector, pod.Tolerations)
		}
	}
}

// labelsSelect says whether a nodeSelector matches nodes with these labels.
func labelsSelect(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// toleratesAll says whether the tolerations tolerate every taint (unstructured).
func toleratesAll(tolerations []corev1.Toleration, taints []any) bool {
	for _, t := range taints {
		m, _ := t.(map[string]any)
		taint := corev1.Taint{Key: fmt.Sprint(m["key"]), Value: fmt.Sprint(m["value"]), Effect: corev1.TaintEffect(fmt.Sprint(m["effect"]))}
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, taint) }) {
			return false
		}
	}
	return true
}

// tolerates is the scheduler's toleration match for Equal and Exists.
func tolerates(tol corev1.Toleration, taint corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != taint.Effect {
		return false
	}
	if tol.Operator == corev1.TolerationOpExists {
		return tol.Key == "" || tol.Key == taint.Key
	}
	return tol.Key == taint.Key && tol.Value == taint.Value
}
