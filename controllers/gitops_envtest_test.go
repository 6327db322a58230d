package controllers

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
)

// gitApplier is Flux's kustomize-controller as far as applying goes: it runs
// test/fluxapply, which applies the Git manifests with Flux's own server-side apply
// engine (github.com/fluxcd/pkg/ssa) and kustomize-controller's options. It is a module
// of its own (fluxcd/pkg/ssa needs newer k8s.io libraries than this module pins), built
// once per test binary.
type gitApplier struct {
	h          *harness
	kubeconfig string
	files      []string
	applies    int
}

var (
	fluxapplyOnce sync.Once
	fluxapplyBin  string
	fluxapplyErr  error
)

// fluxapply builds test/fluxapply.
func fluxapply(t *testing.T) string {
	t.Helper()
	fluxapplyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fluxapply-")
		if err != nil {
			fluxapplyErr = err
			return
		}
		fluxapplyBin = filepath.Join(dir, "fluxapply")
		cmd := exec.Command("go", "build", "-o", fluxapplyBin, ".")
		cmd.Dir = filepath.Join("..", "test", "fluxapply")
		if out, err := cmd.CombinedOutput(); err != nil {
			fluxapplyErr = fmt.Errorf("building test/fluxapply: %w\n%s", err, out)
		}
	})
	if fluxapplyErr != nil {
		t.Fatal(fluxapplyErr)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(fluxapplyBin)) })
	return fluxapplyBin
}

func newGitApplier(h *harness, manifests ...*unstructured.Unstructured) *gitApplier {
	h.t.Helper()
	dir := h.t.TempDir()
	g := &gitApplier{h: h, kubeconfig: filepath.Join(dir, "kubeconfig")}
	h.must(os.WriteFile(g.kubeconfig, suiteEnv.KubeConfig, 0o600))
	for i, m := range manifests {
		data, err := yaml.Marshal(m.Object)
		h.must(err)
		f := filepath.Join(dir, fmt.Sprintf("%02d.yaml", i))
		h.must(os.WriteFile(f, data, 0o600))
		g.files = append(g.files, f)
	}
	return g
}

// sync applies the Git manifests once, as a Kustomization's interval does.
func (g *gitApplier) sync() {
	g.h.t.Helper()
	cmd := exec.Command(fluxapply(g.h.t), append([]string{"-kubeconfig", g.kubeconfig}, g.files...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		g.h.t.Fatalf("flux apply: %v\n%s", err, out)
	}
	g.applies++
}

// converge is the harness's converge with the Git manifests re-applied every third pass.
func (g *gitApplier) converge(name, layout string, maxIter int) *gpupoolv1.GPUPoolProfile {
	g.h.t.Helper()
	n := 0
	return testworld.Loop{T: g.h.t, Clock: g.h.clock,
		Reconcile: func() ctrl.Result {
			if n++; n%3 == 0 {
				g.sync()
			}
			return g.h.reconcile(name)
		},
		Settle: g.h.settle,
		Get:    func() *gpupoolv1.GPUPoolProfile { return g.h.get(name) },
	}.Converge(layout, maxIter)
}

// gitManifest is the pool as Git holds it: its spec, no status, no override.
func gitManifest(t *testing.T, p *gpupoolv1.GPUPoolProfile) *unstructured.Unstructured {
	t.Helper()
	g := &gpupoolv1.GPUPoolProfile{TypeMeta: metav1.TypeMeta{APIVersion: gpupoolv1.GroupVersion.String(), Kind: "GPUPoolProfile"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name}, Spec: *p.Spec.DeepCopy()}
	data, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var u unstructured.Unstructured
	if err := json.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return &u
}

// TestGitOpsApplierLeavesGpupoolsFieldsAlone: a GitOps applier re-applies the pool's
// and the opted-in ClusterQueue's Git manifests all along a switch by GPUPoolRequest,
// its expiry, and the quota changes that follow the layout. The switch completes, holds
// until the request expires (then the schedule takes over), the quota follows the layout,
// and the managed fields name gpupool's managers for exactly what they write.
//
// Without the named field managers (a client without WithFieldOwner) the managers are
// the binary's name, and the managed-fields checks fail.
func TestGitOpsApplierLeavesGpupoolsFieldsAlone(t *testing.T) {
	startKueue(t)
	h := newHarness(t, "gop-")
	h.kueueFollows = true
	pool := h.dayNight()
	pool.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{
		{Name: h.prefix + "day", Layout: "day", Quota: gpuList("4"), WaitingQuota: gpuList("1")},
		{Name: h.prefix + "night", Layout: "night", Quota: gpuList("2")},
	}}
	h.clock.SetTime(monday1000)
	h.create(pool)
	w := h.kueueWorld(pool.Name)
	// The ClusterQueue as Git holds it once created: what its author owns, without the
	// quota of the flavors gpupool manages (docs/gitops.md, Flux).
	cq := kueueObject(fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {name: %s, labels: {%s: %s, team: ml}},
  spec: {namespaceSelector: {}, admissionChecksStrategy: {admissionChecks: [{name: %s}]}}}`, w.optedIn, gpupoolv1.LabelKueuePool, pool.Name, w.check))
	git := newGitApplier(h, gitManifest(t, pool), cq)
	git.sync()

	git.converge(pool.Name, "day", 40)
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=4 night=0, other day=9 night=9"; got != want {
		t.Fatalf("quota by day: %s, want %s", got, want)
	}

	// A switch by request, the Git manifests applied all along.
	until := monday1000.Add(time.Hour)
	q := h.request("night", pool.Name, gpupoolv1.RequestSwitch, "night", until)
	p := git.converge(pool.Name, "night", 60)
	h.checkNight(p)
	for range 3 { // the override holds through further syncs
		git.sync()
		h.reconcile(pool.Name)
	}
	if got, want := h.quotas(w), "opted-in day=1 night=2, other day=9 night=9"; got != want {
		t.Fatalf("quota by request night: %s, want %s", got, want)
	}
	if p = h.get(pool.Name); p.Status.ActiveLayout != "night" || p.Spec.Override != nil {
		t.Fatalf("after syncs: active %s, spec.override %+v; want night with no override in the spec", p.Status.ActiveLayout, p.Spec.Override)
	}
	h.checkManagedFields(t, q.Spec.Pool, w.optedIn)
	checkAnnotationsThroughSync(t, h, git, pool.Name)

	// The request expires: the schedule takes over.
	h.clock.SetTime(until)
	p = git.converge(pool.Name, "day", 60)
	h.checkDay(p)
	if p.Status.DesiredReason != gpupoolv1.DesiredBySchedule {
		t.Errorf("desired reason %s after the request expired, want Schedule", p.Status.DesiredReason)
	}
	h.reconcile(pool.Name)
	if got, want := h.quotas(w), "opted-in day=4 night=0, other day=9 night=9"; got != want {
		t.Fatalf("quota after the request expired: %s, want %s", got, want)
	}
	if git.applies < 5 {
		t.Errorf("the Git manifests were applied %d times, want at least 5", git.applies)
	}
}

// checkManagedFields: the nodes gpupool labelled name gpupool as the manager of the
// labels and taints it wrote, and of nothing else; the ClusterQueue names gpupool-kueue
// for the quota and the Git applier for the rest.
func (h *harness) checkManagedFields(t *testing.T, pool, cq string) {
	t.Helper()
	n := h.node("night-1")
	own := managedBy(t, n.ManagedFields, FieldOwner)
	if !strings.Contains(own, `"f:`+LabelPool+`"`) {
		t.Errorf("node %s: gpupool's fields %s do not name the label %s", n.Name, own, LabelPool)
	}
	if strings.Contains(own, `"f:status"`) || strings.Contains(own, `"f:capacity"`) {
		t.Errorf("node %s: gpupool owns fields it does not write: %s", n.Name, own)
	}
	if n.Labels[LabelPool] != pool {
		t.Errorf("node %s labelled %q, want %s", n.Name, n.Labels[LabelPool], pool)
	}
	o := kueueObject(fmt.Sprintf(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {name: %s}}`, cq))
	h.must(k8s.Get(h.ctx, client.ObjectKeyFromObject(o), o))
	// Kueue's resourceGroups is an atomic list: whoever writes a quota in it owns all
	// of it, so the Kueue controller owns spec.resourceGroups and nothing else.
	if quota := managedBy(t, o.GetManagedFields(), FieldOwnerKueue); quota != `{"f:spec":{"f:resourceGroups":{}}}` {
		t.Errorf("ClusterQueue %s: gpupool-kueue's fields are %s, want spec.resourceGroups only", cq, quota)
	}
	if git := managedBy(t, o.GetManagedFields(), "kustomize-controller"); strings.Contains(git, `"f:resourceGroups"`) || !strings.Contains(git, `"f:admissionChecksStrategy"`) {
		t.Errorf("ClusterQueue %s: the Git applier's fields are %s, want what Git holds without the quota", cq, git)
	}
	if managedBy(t, o.GetManagedFields(), FieldOwner) != "" {
		t.Errorf("ClusterQueue %s: the pool controller wrote it; only the Kueue controller should", cq)
	}
}

// managedBy is the union of the fields the manager owns, as JSON ("": none).
func managedBy(t *testing.T, mf []metav1.ManagedFieldsEntry, manager string) string {
	t.Helper()
	var b strings.Builder
	for _, e := range mf {
		if e.Manager == manager && e.FieldsV1 != nil {
			b.WriteString(e.FieldsV1.GetRawString())
		}
	}
	return b.String()
}

// checkAnnotationsThroughSync: an annotation the plugin wrote (kubectl gpupool
// reset-budget, under gpupool's CLI manager) survives Flux's next apply; one written by
// kubectl annotate does not, because kustomize-controller takes over the fields of
// managers named kubectl... and removes what Git does not hold. The second half is
// Flux's behaviour, checked so that the first half cannot pass against an applier that
// removes nothing.
func checkAnnotationsThroughSync(t *testing.T, h *harness, git *gitApplier, pool string) {
	t.Helper()
	const kubectlKey = "example.com/set-by-kubectl"
	annotate := func(manager, key string) {
		p := h.get(pool)
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"t1"}}}`, key))
		h.must(k8s.Patch(h.ctx, p, patch, client.FieldOwner(manager)))
	}
	annotate(gpupoolv1.FieldManagerCLI, gpupoolv1.AnnotationResetDemandBudget)
	annotate("kubectl-annotate", kubectlKey)
	git.sync()
	git.sync()
	got := h.get(pool).Annotations
	if got[gpupoolv1.AnnotationResetDemandBudget] != "t1" {
		t.Errorf("the plugin's %s did not survive a Flux apply: annotations %v", gpupoolv1.AnnotationResetDemandBudget, got)
	}
	if _, ok := got[kubectlKey]; ok {
		t.Errorf("kubectl annotate's %s survived a Flux apply: the applier is not Flux's (annotations %v)", kubectlKey, got)
	}
}
