package controllers

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/randfill"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/demand"
	"github.com/gpupool/gpupool/internal/drain"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/testpods"
)

// withPodIndexes registers on a fake client the pod indexes the manager's cache has.
func withPodIndexes(b *fake.ClientBuilder) *fake.ClientBuilder {
	return b.WithIndex(&corev1.Pod{}, podNodeNameField, podNodeName).
		WithIndex(&corev1.Pod{}, podPendingResourceField, podPendingResources)
}

// richPod is a pod as the API server serves it: everything a Deployment's pod carries
// (images, env, probes, statuses, managedFields) around what gpupool reads.
func richPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("uid-" + name), ResourceVersion: "7",
			GenerateName: "web-", Labels: map[string]string{"app": "web", "pod-template-hash": "5d9c"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-30T10:00:00Z", "prometheus.io/scrape": "true"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d9c", UID: "rs",
				Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1.2.3", Args: []string{"--port=8080"},
				Env: []corev1.EnvVar{{Name: "MODE", Value: "serve"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}}}},
			Volumes:                       []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}},
			TerminationGracePeriodSeconds: ptr.To(int64(30)), ServiceAccountName: "web", Priority: ptr.To(int32(0)),
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, Message: "bound"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Image: "registry.example/web:1.2.3", ImageID: "sha256:abc", Ready: true}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func gpuLimit(n int64) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{nodes.DefaultGPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
	}
}
func annotated(k, v string) podOpt { return func(p *corev1.Pod) { p.Annotations[k] = v } }
func controlledBy(kind, apiVersion, name string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: name, UID: "o", Controller: ptr.To(true)}}
	}
}
func unbound(p *corev1.Pod) {
	p.Spec.NodeName = ""
	p.Status.Phase = corev1.PodPending
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/12 nodes are available"}}
}

// leanTable are pods that exercise every field demand, the watches and the drain read of
// a pod: each must be decided the same before and after leanPod.
func leanTable() []*corev1.Pod {
	return []*corev1.Pod{
		richPod("serve", onNode("node-d1"), gpuLimit(1)),
		richPod("plain", onNode("node-d1")),
		richPod("keep-me", onNode("node-d2"), gpuLimit(1), annotated(AnnotationDoNotDisrupt, "true")),
		richPod("mirror", onNode("node-d2"), annotated(corev1.MirrorPodAnnotationKey, "x")),
		richPod("logs", onNode("node-d1"), controlledBy("DaemonSet", "apps/v1", "fluent")),
		richPod("sweep-1", onNode("node-n1"), gpuLimit(2), controlledBy("Job", "batch/v1", "sweep")),
		richPod("scratch", onNode("node-n1"), func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{
				EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Gi"))}}})
		}),
		richPod("bare", onNode("node-n1"), func(p *corev1.Pod) { p.OwnerReferences = nil }),
		richPod("going", onNode("node-d1"), func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)}, ptr.To(int64(600))
		}),
		richPod("done", onNode("node-d1"), gpuLimit(1), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		richPod("train-selector", unbound, gpuLimit(2), selecting("workload", "training"), tolerating("training")),
		richPod("train-affinity", unbound, gpuLimit(1), requiring(LabelProfile, corev1.NodeSelectorOpIn, "grid_p100-16q"), tolerating("training"),
			func(p *corev1.Pod) {
				p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 1,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}
				p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{}
			}),
		richPod("train-untolerated", unbound, gpuLimit(1), selecting("workload", "training")),
		richPod("train-claim", unbound, selecting("workload", "training"), tolerating("training"), testpods.FromTemplate("vgpu")),
		richPod("serve-claim", onNode("node-d1"), testpods.WithClaim("vgpu-shared")),
		richPod("serve-waits", unbound, gpuLimit(1), selecting("workload", "inference")),
		richPod("init-gpus", unbound, selecting("workload", "training"), tolerating("training"), func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "init", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{nodes.DefaultGPUResource: resource.MustParse("3"), corev1.ResourceCPU: resource.MustParse("1")}}}}
		}),
		richPod("not-tried", gpuLimit(1), selecting("workload", "training"), tolerating("training"), func(p *corev1.Pod) {
			p.Spec.NodeName, p.Status.Phase, p.Status.Conditions = "", corev1.PodPending, nil
		}),
		richPod("other-device", unbound, selecting("workload", "training"), tolerating("training"), func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}
		}),
	}
}

func leanAll(pods []*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		out[i] = leanPod(p.DeepCopy())
	}
	return out
}

// TestLeanPodKeeps: demand, the watches' predicates and the drain decide every pod of
// leanTable the same on the pod as the API server serves it and as the cache holds it.
// A field read by the code that leanPod drops changes a decision here.
func TestLeanPodKeeps(t *testing.T) {
	full, lean := leanTable(), leanAll(leanTable())
	pool := demandTestPool()
	shapes := demand.ShapesOf(pool)
	// holdsAfter is whether a terminating pod, first seen at t0, still holds a drain d later.
	t0 := time.Date(2026, 11, 30, 15, 5, 0, 0, time.UTC)
	holdsAfter := func(p *corev1.Pod, d time.Duration) bool {
		var clk drain.TerminatingClock
		clk.Holds(p, true, t0)
		return clk.Holds(p, true, t0.Add(d))
	}
	for i := range full {
		f, l := full[i], lean[i]
		for _, check := range []struct {
			what      string
			got, want any
		}{
			{"podGPUs", demand.PodGPUs(l, nodes.DefaultGPUResource), demand.PodGPUs(f, nodes.DefaultGPUResource)},
			{"mayAskGPUs", mayAskGPUs(l), mayAskGPUs(f)},
			{"unschedulable", demand.Unschedulable(l), demand.Unschedulable(f)},
			{"podFinished", demand.Finished(l), demand.Finished(f)},
			{"evictable", demand.Evictable(l), demand.Evictable(f)},
			{"serves day", shapes.Serves("day", l), shapes.Serves("day", f)},
			{"serves night", shapes.Serves("night", l), shapes.Serves("night", f)},
			{"pending index", podPendingResources(l), podPendingResources(f)},
			{"resource claims", l.Spec.ResourceClaims, f.Spec.ResourceClaims},
			{"node index", podNodeName(l), podNodeName(f)},
			{"controller", metav1.GetControllerOf(l), metav1.GetControllerOf(f)},
			{"terminating holds after 5m", holdsAfter(l, 5*time.Minute), holdsAfter(f, 5*time.Minute)},
		} {
			if !reflect.DeepEqual(check.got, check.want) {
				t.Errorf("pod %s: %s = %v on the lean pod, %v on the full one", f.Name, check.what, check.got, check.want)
			}
		}
	}
	t.Run("demand", func(t *testing.T) {
		if got, want := observePods(t, lean), observePods(t, full); !reflect.DeepEqual(got, want) {
			t.Errorf("demand on lean pods:\n%+v\nwant (full pods):\n%+v", got, want)
		}
	})
	t.Run("drain", func(t *testing.T) {
		for _, node := range []string{"node-d1", "node-d2", "node-n1"} {
			for _, ready := range []bool{true, false} {
				for _, d := range []gpupoolv1.DrainSpec{{}, {DeleteEmptyDirData: true, JobPods: gpupoolv1.JobPodsWaitCompleted}} {
					got, want := drainPods(t, lean, node, ready, d), drainPods(t, full, node, ready, d)
					if !reflect.DeepEqual(got, want) {
						t.Errorf("drain of %s (ready %v, %+v) on lean pods: %+v, want %+v", node, ready, d, got, want)
					}
				}
			}
		}
	})
}

// TestLeanPodDrops: the cache holds none of what gpupool does not read.
func TestLeanPodDrops(t *testing.T) {
	l := leanPod(richPod("serve", onNode("node-d1"), gpuLimit(1), annotated(AnnotationDoNotDisrupt, "true")))
	if len(l.ManagedFields) > 0 || l.GenerateName != "" || len(l.Status.ContainerStatuses) > 0 || l.Status.PodIP != "" || l.Spec.ServiceAccountName != "" {
		t.Errorf("lean pod keeps metadata, spec or status gpupool does not read: %+v", l)
	}
	want := []corev1.Container{{Name: "web", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{nodes.DefaultGPUResource: *resource.NewQuantity(1, resource.DecimalSI)}}}}
	if !reflect.DeepEqual(l.Spec.Containers, want) || len(l.Spec.Volumes) > 0 {
		t.Errorf("containers %+v, volumes %+v; want the GPU limit alone and no volume but emptyDir", l.Spec.Containers, l.Spec.Volumes)
	}
	if !reflect.DeepEqual(l.Annotations, map[string]string{AnnotationDoNotDisrupt: "true"}) {
		t.Errorf("annotations %v, want only those gpupool reads", l.Annotations)
	}
	if b := leanPod(richPod("bound", onNode("node-d1"), tolerating("training"), selecting("workload", "training"))); b.Spec.Tolerations != nil || b.Spec.NodeSelector != nil {
		t.Errorf("a bound pod keeps what only a scheduler matches: %+v", b.Spec)
	}
	if len(leanPod(richPod("plain")).Spec.Containers) != 0 {
		t.Error("a container without an extended resource is kept")
	}
	if again := leanPod(l.DeepCopy()); !reflect.DeepEqual(again, l) {
		t.Errorf("leanPod is not idempotent: %+v, then %+v", l, again)
	}
	rich := richPod("serve", onNode("node-d1"), gpuLimit(1))
	if o, err := transformPod(rich.DeepCopy()); err != nil || !reflect.DeepEqual(o, leanPod(rich)) {
		t.Errorf("transformPod = %+v, %v; want leanPod", o, err)
	}
	if o, _ := transformPod("tombstone"); o != "tombstone" {
		t.Error("transformPod changes what is not a pod")
	}
}

// observePods is the pod source's observation of pods (and the sweep Job, near completion) for
// demandTestPool, through the pod indexes.
func observePods(t *testing.T, pods []*corev1.Pod) any {
	t.Helper()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	objs := []client.Object{&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "sweep", Namespace: "ml"},
		Spec: batchv1.JobSpec{Completions: ptr.To(int32(8))}, Status: batchv1.JobStatus{Succeeded: 7}}}
	for _, name := range []string{"node-d1", "node-d2", "node-n1"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelPool: "lab", LabelLayout: "day"}}})
	}
	c := withPodIndexes(fake.NewClientBuilder().WithScheme(s).WithObjects(append(objs, stored(pods)...)...)).Build()
	pool := demandTestPool()
	r := &GPUPoolProfileReconciler{Client: c, APIReader: c, podsIndexed: true}
	obs, err := r.podSource().Observe(context.Background(), pool, demand.ShapesOf(pool), demand.Everyone(nodes.DefaultGPUResource))
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// stored are the pods as the fake client takes them.
func stored(pods []*corev1.Pod) []client.Object {
	var out []client.Object
	for _, p := range pods {
		p = p.DeepCopy()
		p.ResourceVersion = ""
		if p.DeletionTimestamp != nil {
			p.Finalizers = []string{"example.com/keep"} // the fake client refuses it otherwise
		}
		out = append(out, p)
	}
	return out
}

// memPods is a drain.Cluster over pods in memory that grants every eviction.
type memPods struct {
	pods    []*corev1.Pod
	evicted []string
	deleted []string
}

func (m *memPods) PodsOnNode(_ context.Context, node string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, p := range m.pods {
		if p.Spec.NodeName == node {
			out = append(out, *p)
		}
	}
	return out, nil
}

func (m *memPods) Evict(_ context.Context, p *corev1.Pod, _ *policyv1.Eviction) error {
	m.evicted = append(m.evicted, p.Name)
	return nil
}

func (m *memPods) Delete(_ context.Context, p *corev1.Pod, _ *int64) error {
	m.deleted = append(m.deleted, p.Name)
	return nil
}

// drainPods is what a drain of node does with the pods: its result, what it evicts, what
// AnyToEvict says, and what drain.onTimeout: Force deletes.
func drainPods(t *testing.T, pods []*corev1.Pod, node string, ready bool, d gpupoolv1.DrainSpec) any {
	t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
	now := time.Date(2026, 11, 30, 15, 5, 0, 0, time.UTC)
	m := &memPods{pods: pods}
	h := &drain.Helper{Cluster: m, Terminating: &drain.TerminatingClock{}}
	res, err := h.Drain(context.Background(), n, d, time.Time{}, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	on, _ := m.PodsOnNode(context.Background(), node)
	left := h.AnyToEvict(on, ready, now.Add(20*time.Minute))
	if _, err := h.ForceDelete(context.Background(), node, d); err != nil {
		t.Fatal(err)
	}
	return []any{res, m.evicted, left, m.deleted}
}

// TestPendingPodsIndexed: the index lists the unbound, unfinished pods by the extended
// resources they request (and those with resource claims under pendingClaimsKey), so
// demand reads the pods pending for its GPU resource (or with claims) only;
// without it (a client straight to the API server) every unbound pod is listed.
func TestPendingPodsIndexed(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	c := withPodIndexes(fake.NewClientBuilder().WithScheme(s).WithObjects(stored(leanTable())...)).Build()
	names := func(indexed bool, res corev1.ResourceName) []string {
		pods, err := (&GPUPoolProfileReconciler{Client: c, podsIndexed: indexed}).pendingPods(context.Background(), res)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range pods {
			out = append(out, p.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(true, nodes.DefaultGPUResource), []string{"init-gpus", "not-tried", "serve-waits", "train-affinity", "train-selector", "train-untolerated"}; !slices.Equal(got, want) {
		t.Errorf("pending for %s: %v, want %v", nodes.DefaultGPUResource, got, want)
	}
	if got, want := names(true, "example.com/fpga"), []string{"other-device"}; !slices.Equal(got, want) {
		t.Errorf("pending for example.com/fpga: %v, want %v", got, want)
	}
	if got, want := names(true, pendingClaimsKey), []string{"train-claim"}; !slices.Equal(got, want) {
		t.Errorf("pending with resource claims: %v, want %v", got, want)
	}
	claimPods, err := (&GPUPoolProfileReconciler{Client: c, podsIndexed: true}).pendingClaimPods(context.Background())
	if err != nil || len(claimPods) != 1 || claimPods[0].Name != "train-claim" {
		t.Errorf("pendingClaimPods = %d pods (%v), want train-claim", len(claimPods), err)
	}
	if got := names(false, nodes.DefaultGPUResource); len(got) != 8 {
		t.Errorf("without the index: %v, want the 8 unbound pods", got)
	}
}

// TestDemandListsNoClusterPods: a demand pass lists pods only by field (the pending ones,
// a node's), never the cluster's pods, and the Job it reads comes from the API reader, not
// the cache (which would start a Job informer of the whole cluster).
func TestDemandListsNoClusterPods(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	objs := []client.Object{&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "sweep", Namespace: "ml"}}}
	for _, name := range []string{"node-d1", "node-d2", "node-n1"} {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelPool: "lab", LabelLayout: "day"}}})
	}
	stored := withPodIndexes(fake.NewClientBuilder().WithScheme(s).WithObjects(append(objs, stored(leanTable())...)...)).Build()
	var unselected, cachedJobs int
	cached := interceptor.NewClient(stored, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lo := (&client.ListOptions{}).ApplyOptions(opts)
			if _, ok := list.(*corev1.PodList); ok && lo.FieldSelector == nil {
				unselected++
			}
			return c.List(ctx, list, opts...)
		},
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				cachedJobs++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	pool := demandTestPool()
	r := &GPUPoolProfileReconciler{Client: cached, APIReader: stored, podsIndexed: true}
	if _, err := r.podSource().Observe(context.Background(), pool, demand.ShapesOf(pool), demand.Everyone(nodes.DefaultGPUResource)); err != nil {
		t.Fatal(err)
	}
	if unselected > 0 || cachedJobs > 0 {
		t.Errorf("%d pod list(s) without a field selector, %d Job read(s) through the cache; want none", unselected, cachedJobs)
	}
}

// TestTransformNodeDropsOnlyWhatIsNeverRead: for nodes with every field filled at random,
// the cached node is the node without its images, volumes in use and attached, system
// info, addresses, daemon endpoints, runtime handlers, features, config, managedFields,
// capacity, the allocatable resources but the extended ones and the conditions' details;
// every other field (labels, annotations, taints, providerID: what matching, readiness,
// the plan and the node writes' merge patches read) is kept as it was.
func TestTransformNodeDropsOnlyWhatIsNeverRead(t *testing.T) {
	f := randfill.NewWithSeed(37).NilChance(0).NumElements(1, 3)
	for i := range 200 {
		var n corev1.Node
		f.Fill(&n)
		want := n.DeepCopy()
		want.ManagedFields, want.Status.Images, want.Status.VolumesInUse, want.Status.VolumesAttached = nil, nil, nil, nil
		want.Status.NodeInfo, want.Status.Addresses, want.Status.DaemonEndpoints = corev1.NodeSystemInfo{}, nil, corev1.NodeDaemonEndpoints{}
		want.Status.RuntimeHandlers, want.Status.Features, want.Status.Config, want.Status.DeclaredFeatures = nil, nil, nil, nil
		want.Status.Capacity, want.Status.Allocatable = nil, extendedOnly(want.Status.Allocatable)
		for i, c := range want.Status.Conditions {
			want.Status.Conditions[i] = corev1.NodeCondition{Type: c.Type, Status: c.Status}
		}
		got, err := transformNode(n.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Fatalf("node %d: the cached node differs in more than the dropped fields: %s", i, diff.Diff(want, got))
		}
		if len(n.Status.Images) == 0 || len(n.ManagedFields) == 0 || len(n.Status.Addresses) == 0 || len(n.Status.DeclaredFeatures) == 0 {
			t.Fatalf("node %d: the fill left a dropped field empty; the test checks nothing", i)
		}
	}
	// Anything not a node passes as it is.
	pod := &corev1.Pod{}
	if got, _ := transformNode(pod); got != pod {
		t.Fatal("a pod was changed by the node transform")
	}
	// And the manager's cache applies it to nodes.
	var fromCache func(any) (any, error)
	for o, by := range CacheOptions().ByObject {
		if _, ok := o.(*corev1.Node); ok {
			fromCache = by.Transform
		}
	}
	if fromCache == nil {
		t.Fatal("the manager's cache has no transform for nodes")
	}
	n := &corev1.Node{Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"busybox"}}}}}
	if got, err := fromCache(n); err != nil || len(got.(*corev1.Node).Status.Images) != 0 {
		t.Fatalf("the cache's node transform kept the images: %v", err)
	}
}

// TestTransformNodeKeepsWhatIsRead: what gpupool reads of a node (Ready, readiness's gaps
// for any spec naming its conditions, labels and resources) is the same on the cached
// node as on the node the API server has, and any change of two nodes that readiness
// can see still counts as a change between their cached copies (nodes.Changed).
func TestTransformNodeKeepsWhatIsRead(t *testing.T) {
	f := randfill.NewWithSeed(41).NilChance(0.1).NumElements(0, 4)
	statuses := []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown, ""}
	resources := []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/gpu.shared", "example.com/fpga", corev1.ResourceCPU, corev1.ResourceMemory, "kubernetes.io/batteries"}
	randomNode := func() *corev1.Node {
		var n corev1.Node
		f.Fill(&n)
		n.Status.Allocatable, n.Status.Capacity = corev1.ResourceList{}, corev1.ResourceList{}
		for _, r := range resources {
			var k int64
			f.Fill(&k)
			if k%3 != 0 {
				n.Status.Allocatable[r] = *resource.NewQuantity(k%5, resource.DecimalSI)
				n.Status.Capacity[r] = *resource.NewQuantity(k%7, resource.DecimalSI)
			}
		}
		// Annotations of every kind: gpupool's, Cluster API's, anyone's.
		for i, k := range []string{gpupoolv1.AnnotationMarkedBy, gpupoolv1.AnnotationCordoned, clusterv1.MachineAnnotation,
			clusterv1.ClusterNamespaceAnnotation, "flannel.alpha.coreos.com/public-ip", "csi.volume.kubernetes.io/nodeid"} {
			var b uint8
			f.Fill(&b)
			if b%2 == 0 {
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations[k] = fmt.Sprint(i, b)
			}
		}
		for i := range n.Status.Conditions {
			var k uint8
			f.Fill(&k)
			n.Status.Conditions[i].Type = []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, "GPUHealthy", "NetworkReady"}[k%4]
			n.Status.Conditions[i].Status = statuses[int(k/4)%len(statuses)]
		}
		return &n
	}
	// mutate changes one thing of a copy of n, at random: a condition's status, reason,
	// message or heartbeat, a resource, a label, the capacity.
	mutate := func(n *corev1.Node) *corev1.Node {
		m := n.DeepCopy()
		var k uint16
		f.Fill(&k)
		switch k % 8 {
		case 0:
			if len(m.Status.Conditions) > 0 {
				c := &m.Status.Conditions[int(k/6)%len(m.Status.Conditions)]
				c.Status = statuses[int(k/7)%len(statuses)]
			}
		case 1:
			if len(m.Status.Conditions) > 0 {
				c := &m.Status.Conditions[int(k/6)%len(m.Status.Conditions)]
				c.Reason, c.Message, c.LastHeartbeatTime = "KubeletNotReady", "PLEG is not healthy", metav1.NewTime(c.LastHeartbeatTime.Add(time.Minute))
			}
		case 2:
			m.Status.Allocatable[resources[int(k/6)%len(resources)]] = *resource.NewQuantity(int64(k/36)%5, resource.DecimalSI)
		case 3:
			delete(m.Status.Allocatable, resources[int(k/6)%len(resources)])
		case 4:
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels["gpupool.dev/ready-for"] = string(rune('a' + k%3))
		case 5:
			m.Status.Capacity = nil
		case 6, 7:
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[[]string{gpupoolv1.AnnotationDrainAt, clusterv1.MachineAnnotation, "kubeadm.alpha.kubernetes.io/cri-socket"}[int(k/8)%3]] = fmt.Sprint(k)
		}
		return m
	}
	cached := func(n *corev1.Node) *corev1.Node {
		got, err := transformNode(n.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		return got.(*corev1.Node)
	}
	specs := func(n *corev1.Node) []gpupoolv1.ReadinessSpec {
		var out []gpupoolv1.ReadinessSpec
		conds := []string{"GPUHealthy", "NetworkReady", string(corev1.NodeMemoryPressure), "Missing"}
		for _, r := range resources[:3] {
			out = append(out, gpupoolv1.ReadinessSpec{GPUResource: ptr.To(string(r)), NodeConditions: conds,
				NodeLabels: map[string]string{"gpupool.dev/ready-for": "a"}})
		}
		return append(out, gpupoolv1.ReadinessSpec{GPUResource: ptr.To("")}, gpupoolv1.ReadinessSpec{})
	}
	wants := []nodes.GPUWant{{Count: 0}, {Count: 1}, {Count: 2}, {Count: 4, Replicas: 2}}
	gaps := func(n *corev1.Node) []string {
		var out []string
		for _, r := range specs(n) {
			for _, w := range wants {
				out = append(out, strings.Join(nodes.ReadinessGaps(n, r, w, 0), "; "))
			}
		}
		return out
	}
	relevant := func(n *corev1.Node) map[string]string {
		out := map[string]string{}
		for k, v := range n.Annotations {
			if nodes.RelevantAnnotation(k) {
				out[k] = v
			}
		}
		return out
	}
	for i := range 500 {
		a := randomNode()
		b := mutate(a)
		if nodes.Ready(a) != nodes.Ready(cached(a)) {
			t.Fatalf("node %d: Ready %v, cached %v", i, nodes.Ready(a), nodes.Ready(cached(a)))
		}
		if ga, gc := gaps(a), gaps(cached(a)); !slices.Equal(ga, gc) {
			t.Fatalf("node %d: readiness gaps differ on the cached node:\n%q\n%q", i, ga, gc)
		}
		if !maps.Equal(a.Annotations, cached(a).Annotations) {
			t.Fatalf("node %d: annotations %v cached as %v (a merge patch against a trimmed copy deletes the rest)", i, a.Annotations, cached(a).Annotations)
		}
		if !maps.Equal(relevant(a), relevant(b)) && !nodes.Changed(cached(a), cached(b)) {
			t.Fatalf("node %d: a change of an annotation gpupool reads is not a change of the cached nodes: %s", i, diff.Diff(a, b))
		}
		if !slices.Equal(gaps(a), gaps(b)) && !nodes.Changed(cached(a), cached(b)) {
			t.Fatalf("node %d: a change readiness sees is not a change of the cached nodes: %s", i, diff.Diff(a, b))
		}
	}
}

// TestNodeWriteFromCacheKeepsAnnotations: a node write is a merge patch against the
// cached copy; one that removes gpupool's last annotation must leave the node's others
// (kubeadm's, a CNI's) on the server. A cache that kept only gpupool's annotations would
// send "annotations": null and delete them all.
func TestNodeWriteFromCacheKeepsAnnotations(t *testing.T) {
	ctx := context.Background()
	theirs := map[string]string{"kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock", "flannel.alpha.coreos.com/public-ip": "10.0.0.7"}
	stored := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: maps.Clone(theirs)}}
	for _, k := range []string{gpupoolv1.AnnotationCordoned, gpupoolv1.AnnotationMarkedBy} {
		stored.Annotations[k] = "x"
	}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(stored).Build()
	var read corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, &read); err != nil {
		t.Fatal(err)
	}
	obj, err := transformNode(read.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	cached := obj.(*corev1.Node)
	n := cached.DeepCopy()
	maps.DeleteFunc(n.Annotations, func(k, _ string) bool { return nodes.RelevantAnnotation(k) })
	if err := c.Patch(ctx, n, client.MergeFrom(cached)); err != nil {
		t.Fatal(err)
	}
	var after corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, &after); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(after.Annotations, theirs) {
		t.Fatalf("annotations after removing gpupool's: %v, want %v", after.Annotations, theirs)
	}
}
