package controllers

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
)

// gitApplier stands in for Flux's kustomize-controller: it server-side applies the Git
// manifests, forcing ownership, under its field manager, as fluxcd/pkg/ssa's
// ResourceManager does. (fluxcd/pkg/ssa itself needs the k8s.io v0.37 libraries and
// controller-runtime v0.25, past this module's pins: docs/gitops.md.)
type gitApplier struct {
	h         *harness
	manifests []*unstructured.Unstructured
	applies   int
}

func (g *gitApplier) sync() {
	g.h.t.Helper()
	for _, m := range g.manifests {
		g.h.must(k8s.Apply(g.h.ctx, client.ApplyConfigurationFromUnstructured(m.DeepCopy()), client.FieldOwner("kustomize-controller"), client.ForceOwnership))
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
	git := &gitApplier{h: h, manifests: []*unstructured.Unstructured{gitManifest(t, pool), cq}}
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
