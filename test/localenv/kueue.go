package localenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/test/kueueenv"
)

// Kueue in the local environment (Options.Kueue): Kueue's own manager, built from source
// by 'make kueue', with its CRDs and webhooks, and for the demo the queue of its training
// Job (docs/kueue.md): a ResourceFlavor per layout, gpupool's AdmissionCheck on the night
// flavor, a ClusterQueue that opted in to the pool, and a LocalQueue in the demo namespace.
const (
	KueueDayFlavor   = "day-p100-4q"
	KueueNightFlavor = "night-p100-16q"
	KueueCheck       = "gpupool-layout"
	KueueQueue       = "training"
	// lateJob is a day Job the demo submits once the day flavor's quota dropped ahead of
	// the night: Kueue must not admit it onto nodes about to be drained.
	lateJob = "late-inference"
)

// startKueue installs Kueue's CRDs and webhooks and starts its manager, before the
// operator, so that the operator watches Kueue's Workloads from its start.
func (e *Env) startKueue(ctx context.Context) error {
	paths, err := kueueenv.In(e.BinDir)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(filepath.Join(e.Dir, "kueue"))
	if err != nil {
		return err
	}
	kubeconfig, err := filepath.Abs(e.Kubeconfig)
	if err != nil {
		return err
	}
	served, err := kueueenv.Prepare(dir, kubeconfig)
	if err != nil {
		return err
	}
	if err := kueueenv.Install(ctx, e.rest, paths, served); err != nil {
		return fmt.Errorf("installing Kueue: %w", err)
	}
	// The command line, for the supervisor to start Kueue again should it exit.
	if err := os.WriteFile(filepath.Join(dir, "command"), []byte(strings.Join(append([]string{paths.Bin}, served.Args...), "\n")), 0o600); err != nil {
		return err
	}
	if _, err := e.spawn("kueue", paths.Bin, served.Args...); err != nil {
		return err
	}
	log := filepath.Join(e.Dir, "logs", "kueue.log")
	return kueueenv.Ready(ctx, e.rest, 2*time.Minute, func() error {
		if !running(e.pidFile("kueue")) {
			return fmt.Errorf("see %s", log)
		}
		return nil
	})
}

// restartKueue starts Kueue again with the command line Up recorded, if Up started it
// and it no longer runs: its Job webhook refuses every Job while nobody answers.
func (e *Env) restartKueue() error {
	data, err := os.ReadFile(filepath.Join(e.Dir, "kueue", "command"))
	if err != nil || running(e.pidFile("kueue")) {
		return nil // not part of this environment, or running
	}
	cmd := strings.Split(string(data), "\n")
	fmt.Fprintln(e.logOut(), "supervisor: kueue not running; starting again")
	log := filepath.Join(e.Dir, "logs", "kueue.log")
	_ = os.Rename(log, log+".previous") // spawn starts a new log: keep why it ended
	_, err = e.spawn("kueue", cmd[0], cmd[1:]...)
	return err
}

// demoKueue is the demo pool's spec.kueue: day's four GPUs while day is ready for work;
// night's one GPU while night is, and by day one GPU of training may queue and wait.
func demoKueue() *gpupoolv1.KueueSpec {
	gpus := func(n string) corev1.ResourceList {
		return corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}
	}
	return &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
		{Name: KueueDayFlavor, Layout: "day", Quota: gpus("4")},
		{Name: KueueNightFlavor, Layout: "night", Quota: gpus("1"), WaitingQuota: gpus("1")},
	}}
}

// demoKueueObjects are the Kueue objects of the demo, as docs/kueue.md's example.
func demoKueueObjects() string {
	return fmt.Sprintf(`apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %[1]s}
spec:
  nodeLabels: {lab.example/workload: inference}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %[2]s}
spec:
  nodeLabels: {lab.example/workload: training}
  nodeTaints: [{key: lab.example/training, value: "true", effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: %[3]s}
spec: {controllerName: %[4]s}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: %[5]s
  labels: {%[6]s: %[7]s}
spec:
  namespaceSelector: {}
  admissionChecksStrategy:
    admissionChecks: [{name: %[3]s, onFlavors: [%[2]s]}]
  resourceGroups:
    - coveredResources: [nvidia.com/gpu]
      flavors:
        - name: %[1]s
          resources: [{name: nvidia.com/gpu, nominalQuota: "0"}]
        - name: %[2]s
          resources: [{name: nvidia.com/gpu, nominalQuota: "0"}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: %[5]s, namespace: %[8]s}
spec: {clusterQueue: %[5]s}
`, KueueDayFlavor, KueueNightFlavor, KueueCheck, gpupoolv1.KueueAdmissionCheckController, KueueQueue,
		gpupoolv1.LabelKueuePool, DemoPool, DemoNamespace)
}

// queued submits the Job through the demo's LocalQueue, asking for one GPU: Kueue's
// webhook suspends it until Kueue admits its Workload.
func queued(j *batchv1.Job) *batchv1.Job {
	if j.Labels == nil {
		j.Labels = map[string]string{}
	}
	j.Labels["kueue.x-k8s.io/queue-name"] = KueueQueue
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	for i := range j.Spec.Template.Spec.Containers {
		j.Spec.Template.Spec.Containers[i].Resources = corev1.ResourceRequirements{Requests: gpu, Limits: gpu}
	}
	return j
}

// lateDayJob is a one-GPU inference batch Job for the day nodes.
func lateDayJob() *batchv1.Job {
	return queued(&batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: lateJob, Namespace: DemoNamespace},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "batch", Image: "inference:demo"}},
			NodeSelector:  map[string]string{"lab.example/workload": "inference"},
		}}},
	})
}

var kueueGV = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// workloadOf is the Workload Kueue made for the demo's Job named job, if any.
func (e *Env) workloadOf(ctx context.Context, job string) (*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
	if err := e.Client.List(ctx, list, client.InNamespace(DemoNamespace)); err != nil {
		return nil, err
	}
	for i := range list.Items {
		for _, o := range list.Items[i].GetOwnerReferences() {
			if o.Kind == "Job" && o.Name == job {
				return &list.Items[i], nil
			}
		}
	}
	return nil, nil
}

// checkOf is the state and message of the named admission check on the Workload.
func checkOf(wl *unstructured.Unstructured, name string) (string, string) {
	checks, _, _ := unstructured.NestedSlice(wl.Object, "status", "admissionChecks")
	for _, c := range checks {
		m, _ := c.(map[string]any)
		if m["name"] == name {
			st, _ := m["state"].(string)
			msg, _ := m["message"].(string)
			return st, msg
		}
	}
	return "", ""
}

func admitted(wl *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Admitted" {
			return m["status"] == "True"
		}
	}
	return false
}

// flavorQuota is the nominalQuota of nvidia.com/gpu of the flavor in the demo's
// ClusterQueue ("" when not listed).
func (e *Env) flavorQuota(ctx context.Context, flavor string) (string, error) {
	cq := &unstructured.Unstructured{}
	cq.SetGroupVersionKind(kueueGV.WithKind("ClusterQueue"))
	if err := e.Client.Get(ctx, client.ObjectKey{Name: KueueQueue}, cq); err != nil {
		return "", err
	}
	groups, _, _ := unstructured.NestedSlice(cq.Object, "spec", "resourceGroups")
	for _, g := range groups {
		flavors, _, _ := unstructured.NestedSlice(g.(map[string]any), "flavors")
		for _, f := range flavors {
			fm := f.(map[string]any)
			if fm["name"] != flavor {
				continue
			}
			res, _, _ := unstructured.NestedSlice(fm, "resources")
			for _, r := range res {
				rm := r.(map[string]any)
				if rm["name"] == "nvidia.com/gpu" {
					return fmt.Sprint(rm["nominalQuota"]), nil
				}
			}
		}
	}
	return "", nil
}

// kueueDemo is what the demo watches of Kueue, sampled with the pool on every round.
type kueueDemo struct {
	trainingCheck, dayQuota string
	// dayRaised: the day flavor was seen with quota (gpupool set it; the ClusterQueue is
	// created with 0), so that a 0 after it is the drop ahead of the night.
	dayRaised, lateSubmitted bool
}

// serving says whether the layout's nodes serve it: at least one node labelled for it,
// each Ready and schedulable (what gpupool makes true before it calls the layout ready
// for work), and names them or what is missing.
func (e *Env) serving(ctx context.Context, layout string) (bool, string, error) {
	var nodes corev1.NodeList
	if err := e.Client.List(ctx, &nodes, client.MatchingLabels{gpupoolv1.LabelLayout: layout}); err != nil {
		return false, "", err
	}
	if len(nodes.Items) == 0 {
		return false, "no node labelled for " + layout, nil
	}
	var names, not []string
	for _, n := range nodes.Items {
		names = append(names, n.Name)
		if n.Spec.Unschedulable || !cluster.Ready(&n) {
			not = append(not, n.Name)
		}
	}
	sort.Strings(names)
	if len(not) > 0 {
		sort.Strings(not)
		return false, fmt.Sprintf("%s nodes not ready for work: %s", layout, strings.Join(not, ",")), nil
	}
	return true, fmt.Sprintf("%s nodes ready for work: %s", layout, strings.Join(names, ",")), nil
}

// observe records, with the pool p: the training Workload's check, and the state of the
// night nodes read just after its admission was first seen (gpupool sets its check Ready,
// so Kueue admits, only after they serve); the day flavor's quota and, once it dropped
// ahead of the night, whether the pool read just after still had no switch started; a
// late day Job submitted then, and the state of the day nodes read just after Kueue was
// seen to admit it.
func (k *kueueDemo) observe(ctx context.Context, e *Env, p *gpupoolv1.GPUPoolProfile, res *DemoResult, say func(string, ...any)) error {
	wl, err := e.workloadOf(ctx, trainingJob)
	if err != nil {
		return err
	}
	if wl != nil {
		st, msg := checkOf(wl, KueueCheck)
		if line := st + " " + msg; st != "" && line != k.trainingCheck {
			say("  kueue: Workload of Job %s: check %s %s: %s", trainingJob, KueueCheck, st, msg)
			k.trainingCheck = line
			if st == "Pending" && strings.HasPrefix(msg, "waiting for layout night: the switch to it starts at ") && res.KueueHeld == "" {
				res.KueueHeld = msg
			}
		}
		if admitted(wl) && res.KueueAdmittedWith == "" {
			if _, res.KueueAdmittedWith, err = e.serving(ctx, "night"); err != nil {
				return err
			}
			say("  kueue: Workload of Job %s admitted (%s)", trainingJob, res.KueueAdmittedWith)
		}
	}
	if err := k.observeQuota(ctx, e, res, say); err != nil {
		return err
	}
	if !k.lateSubmitted || res.LateAdmittedWith != "" {
		return nil
	}
	late, err := e.workloadOf(ctx, lateJob)
	if err != nil || late == nil || !admitted(late) {
		return err
	}
	_, nodes, err := e.serving(ctx, "day")
	if err != nil {
		return err
	}
	res.LateAdmittedWith = fmt.Sprintf("%s; layouts seen %s", nodes, strings.Join(res.Layouts, ","))
	say("  kueue: Workload of Job %s admitted (%s)", lateJob, res.LateAdmittedWith)
	return nil
}

// observeQuota follows the day flavor's quota; at its drop ahead of the first night it
// reads the pool again (after the quota, so that a switch started before the drop shows)
// and submits the late day Job.
func (k *kueueDemo) observeQuota(ctx context.Context, e *Env, res *DemoResult, say func(string, ...any)) error {
	q, err := e.flavorQuota(ctx, KueueDayFlavor)
	if err != nil || q == k.dayQuota {
		return err
	}
	say("  kueue: ClusterQueue %s: %s nominalQuota nvidia.com/gpu %s", KueueQueue, KueueDayFlavor, q)
	k.dayQuota = q
	k.dayRaised = k.dayRaised || (q != "0" && q != "")
	if q != "0" || !k.dayRaised || k.lateSubmitted || len(res.Layouts) != 1 {
		return nil
	}
	var p gpupoolv1.GPUPoolProfile
	if err := e.Client.Get(ctx, client.ObjectKey{Name: DemoPool}, &p); err != nil {
		return err
	}
	ok, _, err := e.serving(ctx, "day")
	if err != nil {
		return err
	}
	res.DayQuotaDroppedBeforeDrain = ok && p.Status.ActiveLayout == "day" && p.Status.Transition == nil
	say("  kueue: submitting Job %s/%s (1 GPU on the day nodes) through LocalQueue %s", DemoNamespace, lateJob, KueueQueue)
	if err := e.Client.Create(ctx, lateDayJob()); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	k.lateSubmitted = true
	return nil
}

// untilLateAdmitted waits, after the cycle, until Kueue admits the late day Job, now that
// day's nodes are ready for work and its flavor has its quota again.
func (k *kueueDemo) untilLateAdmitted(ctx context.Context, e *Env, res *DemoResult, say func(string, ...any)) error {
	if !k.lateSubmitted {
		return nil
	}
	deadline := time.Now().Add(90 * time.Second)
	for res.LateAdmittedWith == "" && time.Now().Before(deadline) {
		var p gpupoolv1.GPUPoolProfile
		if err := e.Client.Get(ctx, client.ObjectKey{Name: DemoPool}, &p); err != nil {
			return err
		}
		if err := k.observe(ctx, e, &p, res, say); err != nil {
			return err
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	return nil
}
