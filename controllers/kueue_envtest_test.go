package controllers

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The tests of the Kueue bridge run Kueue's own manager (built by 'make kueue' from the
// pinned module into bin/kueue-<version>, its CRDs into bin/kueue-crds-<version>) against
// the suite's API server. Kueue's webhooks cannot be reached from envtest's API server
// (they are served behind a Service), so they are not registered: the tests create the
// Workloads as Kueue's job integration would, and Kueue's controller does the rest
// (flavor assignment, quota reservation, admission through the checks).

const kueueVersion = "v0.17.0"

var (
	kueueOnce sync.Once
	kueueErr  error
	kueueCmd  *exec.Cmd
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
		done := make(chan struct{})
		go func() { _ = kueueCmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = kueueCmd.Process.Kill()
			<-done
		}
	}
	if kueueDir != "" {
		_ = os.RemoveAll(kueueDir)
	}
}

// kueueConversionCRDs are the CRDs Kueue's certificate manager injects its CA into (as a
// conversion webhook): they must name one, as Kueue's own install does, or Kueue waits
// for the injection forever. The API server never calls it while the tests use only
// v1beta2, the storage version.
var kueueConversionCRDs = map[string]bool{"localqueues.kueue.x-k8s.io": true, "clusterqueues.kueue.x-k8s.io": true,
	"workloads.kueue.x-k8s.io": true, "cohorts.kueue.x-k8s.io": true, "multikueueclusters.kueue.x-k8s.io": true}

func launchKueue() error {
	ctx := context.Background()
	assets := suiteEnv.BinaryAssetsDirectory
	bin := filepath.Join(assets, "kueue-"+kueueVersion)
	crdDir := filepath.Join(assets, "kueue-crds-"+kueueVersion)
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("no Kueue manager at %s: run 'make kueue' (or 'make test', which builds it)", bin)
	}
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Kueue CRDs in %s: run 'make kueue'", crdDir)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if kueueConversionCRDs[crd.Name] {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{
						Namespace: "kueue-system", Name: "kueue-webhook-service", Path: ptr.To("/convert")}}}}
		}
		crds = append(crds, crd)
	}
	if _, err := envtest.InstallCRDs(suiteEnv.Config, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
		return fmt.Errorf("installing Kueue's CRDs: %w", err)
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}); err != nil {
		return err
	}
	// Kueue's certificate manager fills this Secret; it must exist.
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-webhook-server-cert", Namespace: "kueue-system"}}); err != nil {
		return err
	}
	if kueueDir, err = os.MkdirTemp("", "gpupool-kueue-"); err != nil {
		return err
	}
	kubeconfig := filepath.Join(kueueDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, suiteEnv.KubeConfig, 0o600); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
clientConnection:
  qps: -1
  burst: 100
integrations:
  frameworks: ["batch/job"]
featureGates:
  VisibilityOnDemand: false
`, port, filepath.Join(kueueDir, "certs"))
	cfgFile := filepath.Join(kueueDir, "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		return err
	}
	kueueLog = &lockedBuffer{}
	kueueCmd = exec.Command(bin, "--config", cfgFile, "--kubeconfig", kubeconfig, "--zap-log-level", "info")
	kueueCmd.Stdout, kueueCmd.Stderr = kueueLog, kueueLog
	kueueCmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if err := kueueCmd.Start(); err != nil {
		return fmt.Errorf("starting Kueue: %w", err)
	}
	go mountSecret(filepath.Join(kueueDir, "certs"))
	// Ready when its ClusterQueue controller runs: a probe ClusterQueue turns Active.
	probe := kueueObject(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: kueue-probe}
spec: {namespaceSelector: {}}`)
	if err := k8s.Create(ctx, probe); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(probe), probe); err == nil && conditionTrue(probe, "Active") {
			return nil
		}
		if kueueCmd.ProcessState != nil || time.Now().After(deadline) {
			return fmt.Errorf("kueue did not start: log (tail): %s", tail(kueueLog.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mountSecret does what the kubelet's secret volume does for Kueue's pod: it writes the
// certificate that Kueue's certificate manager puts in its Secret into the webhook
// server's directory, where Kueue waits for it.
func mountSecret(dir string) {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		var sec corev1.Secret
		err := k8s.Get(context.Background(), client.ObjectKey{Namespace: "kueue-system", Name: "kueue-webhook-server-cert"}, &sec)
		if err == nil && len(sec.Data["tls.crt"]) > 0 && len(sec.Data["tls.key"]) > 0 {
			if os.MkdirAll(dir, 0o700) == nil {
				for _, k := range []string{"ca.crt", "tls.key", "tls.crt"} { // tls.crt last: Kueue waits for it
					_ = os.WriteFile(filepath.Join(dir, k), sec.Data[k], 0o600)
				}
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func kueueObject(y string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		panic(err)
	}
	return u
}

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
		fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ResourceFlavor, metadata: {name: %s}, spec: {nodeLabels: {lab.example/workload: training}}}`, w.night),
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
				if rm["name"] == DefaultGPUResource {
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
	return corev1.ResourceList{DefaultGPUResource: resource.MustParse(q)}
}

// TestKueueBridge, against Kueue's own controller: the quota of the pool's flavors follows
// the layout in the ClusterQueue that opted in (and only there); a day Workload submitted
// by night reserves day's waiting quota and is held by gpupool's check with when day
// comes, counts as demand for day, and is admitted by Kueue once day's nodes are ready.
func TestKueueBridge(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kq-")
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
	day := time.Date(monday0700.Year(), monday0700.Month(), monday0700.Day(), 8, 0, 0, 0, monday0700.Location())
	if want := "waiting for layout day at 08:00 (" + inDuration(day.Sub(h.clock.Now())) + ")"; msg != want || conditionTrue(wl, "Admitted") {
		t.Fatalf("day Workload by night: check %s %q, admitted %v; want Pending, waiting for layout day at 08:00", st, msg, conditionTrue(wl, "Admitted"))
	}
	if !strings.HasPrefix(msg, "waiting for layout day at 08:00 (in ") {
		t.Fatalf("message %q", msg)
	}
	t.Logf("held: %s %q", st, msg)
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
	h.untilKueue(wl, "admitted by Kueue", func(o *unstructured.Unstructured) bool { return conditionTrue(o, "Admitted") })
	if st, msg := gpupoolCheck(wl, w.check); st != checkReady || msg != "layout day is ready for work" {
		t.Fatalf("check after day came: %s %q, want Ready", st, msg)
	}
	if d := layoutDemand(h.get(pool.Name), "day"); d.PendingGPUs != 0 {
		t.Fatalf("day demand once admitted: %+v, want none", d)
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

// TestKueueDemandBringsNightIn: a night Workload submitted by day is held by gpupool's
// check within night's waiting quota; as demand it brings night in early (BringIn), the
// check says the demand switch is in progress, and Kueue admits the Workload once the
// night node is ready for work.
func TestKueueDemandBringsNightIn(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "kqd-")
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

	wl := h.workload(w, "train", "training", 1)
	h.untilKueue(wl, "quota reserved on night and gpupool's check listed", func(o *unstructured.Unstructured) bool {
		st, _ := gpupoolCheck(o, w.check)
		return conditionTrue(o, "QuotaReserved") && st != ""
	})
	h.reconcile(pool.Name)
	p := h.get(pool.Name)
	if d := layoutDemand(p, "night"); d.PendingGPUs != 1 || !containsString(d.Pods, "workload "+h.prefix+"apps/train") || d.PendingSince == nil {
		t.Fatalf("night demand %+v, want the held Workload", d)
	}
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(wl), wl))
	if st, msg := gpupoolCheck(wl, w.check); st != checkPending || !strings.HasPrefix(msg, "waiting for layout night at 20:00 (in ") {
		t.Fatalf("night Workload by day: check %s %q, want Pending until 20:00", st, msg)
	}

	// Held for `for` (2m): demand brings night in.
	h.clock.Step(2 * time.Minute)
	h.reconcile(pool.Name)
	p = h.get(pool.Name)
	if tr := p.Status.Transition; tr == nil || tr.To != "night" || tr.Reason != gpupoolv1.DesiredByDemand || !strings.Contains(tr.Cause, "workload "+h.prefix+"apps/train") {
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
}
