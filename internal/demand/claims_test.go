package demand

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/testpods"
)

const testClass = "vgpu.gpupool.dev"

func exactly(class string, mode resourcev1.DeviceAllocationMode, count int64) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: "r", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: count}}
}

func claimSpec(reqs ...resourcev1.DeviceRequest) resourcev1.ResourceClaimSpec {
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}}
}

func template(name string, reqs ...resourcev1.DeviceRequest) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claimSpec(reqs...)}}
}

func draPool() *gpupoolv1.GPUPoolProfile {
	pool := testPool()
	pool.Spec.Readiness.DRA = &gpupoolv1.DRASpec{DeviceClassName: testClass, Driver: testClass}
	return pool
}

// claimsOf is the Claims source over a client, as podsOf is the Pods source.
func claimsOf(c client.Client) Claims {
	pods := podsOf(c)
	return Claims{Nodes: c, Claims: c, OnNode: pods.OnNode,
		Pending: func(ctx context.Context) ([]corev1.Pod, error) { return pods.OnNode(ctx, "") }}
}

// TestClaimsObserve: pods that ask for devices of the pool's class through their claims
// are demand as GPU pods are, by the same matching and scope; other classes, missing
// claims, pods the Pods source counts and a pool without readiness.dra are not.
func TestClaimsObserve(t *testing.T) {
	night := []podOpt{pendingUnschedulable, selecting("workload", "training"), tolerating("training")}
	objs := []client.Object{
		template("two-vgpus", exactly(testClass, resourcev1.DeviceAllocationModeExactCount, 2)),
		template("other-class", exactly("nic.example.com", resourcev1.DeviceAllocationModeExactCount, 1)),
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "shared-gpu", Namespace: "ml"},
			Spec: claimSpec(exactly(testClass, resourcev1.DeviceAllocationModeExactCount, 0))},
		testPod("train-template", 0, append(night, testpods.FromTemplate("two-vgpus"))...),
		testPod("train-shared", 0, append(night, testpods.WithClaim("shared-gpu"))...),
		testPod("train-nic", 0, append(night, testpods.FromTemplate("other-class"))...),
		testPod("train-missing", 0, append(night, testpods.FromTemplate("not-there"))...),
		testPod("train-both", 1, append(night, testpods.FromTemplate("two-vgpus"))...), // Pods' pod
		testPod("serve-day", 0, pendingUnschedulable, testpods.FromTemplate("two-vgpus")),
		testPod("train-other-ns", 0, append(night, testpods.FromTemplate("two-vgpus"), inNamespace("guests"))...),
		poolNode("node-d1", "day"), poolNode("node-n2", "night"),
		testPod("serve-running", 0, onNode("node-d1"), testpods.FromTemplate("two-vgpus")),
		testPod("train-running", 0, onNode("node-n2"), testpods.FromTemplate("two-vgpus")),
	}
	pool := draPool()
	pool.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}}}
	who, err := ScopeOf(pool, []metav1.PartialObjectMetadata{{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{"team": "ml"}}}})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := claimsOf(fakeClient(objs...)).Observe(context.Background(), pool, ShapesOf(pool), who)
	if err != nil || obs.NotObserved != "" {
		t.Fatalf("Observe: %v %q", err, obs.NotObserved)
	}
	n, d := obs.Layouts["night"], obs.Layouts["day"]
	wantPending := []string{"pod ml/train-shared", "pod ml/train-template"}
	if n.PendingGPUs != 3 || !slices.Equal(n.Pending, wantPending) {
		t.Errorf("night pending = %d devices %v, want 3 %v", n.PendingGPUs, n.Pending, wantPending)
	}
	if n.RunningGPUs != 2 || d.RunningGPUs != 2 {
		t.Errorf("running = night %d, day %d, want 2 and 2", n.RunningGPUs, d.RunningGPUs)
	}
	// node-d1 is drained by the switch to night (d1 is no worker of night).
	if n.Evictions != 1 {
		t.Errorf("night evictions = %d, want 1 (serve-running on node-d1)", n.Evictions)
	}
	if d.PendingGPUs != 0 {
		t.Errorf("day pending = %d, want 0 (day is active)", d.PendingGPUs)
	}

	pool.Spec.Readiness.DRA = nil
	if obs, err := claimsOf(fakeClient(objs...)).Observe(context.Background(), pool, ShapesOf(pool), who); err != nil || len(obs.Layouts) != 0 {
		t.Errorf("without readiness.dra: %+v, %v; want nothing", obs, err)
	}
}

// TestClaimsNotServed: resource.k8s.io not served (or a claim not readable) is no DRA
// demand, with a note, not an error that would discard every source's demand.
func TestClaimsNotServed(t *testing.T) {
	for name, fail := range map[string]error{
		"not served": &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaimTemplate"}},
		"forbidden":  errors.New("forbidden"),
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeClient(testPod("train", 0, pendingUnschedulable, selecting("workload", "training"), tolerating("training"), testpods.FromTemplate("t")))
			src := claimsOf(c)
			src.Claims = interceptorClient(c.(client.WithWatch), fail)
			pool := draPool()
			obs, err := src.Observe(context.Background(), pool, ShapesOf(pool), Everyone(nodes.DefaultGPUResource))
			if err != nil {
				t.Fatalf("Observe: %v, want a note", err)
			}
			if !strings.HasPrefix(obs.NotObserved, ClaimsNotObserved+", counted as none: ") || len(obs.Layouts) != 0 {
				t.Errorf("Observe = %+v, want a note and no demand", obs)
			}
		})
	}
}

func interceptorClient(c client.WithWatch, fail error) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		return fail
	}})
}

func TestClaimDevices(t *testing.T) {
	first := resourcev1.DeviceRequest{Name: "any", FirstAvailable: []resourcev1.DeviceSubRequest{
		{Name: "big", DeviceClassName: "other", Count: 8, AllocationMode: resourcev1.DeviceAllocationModeExactCount},
		{Name: "vgpu", DeviceClassName: testClass, Count: 2, AllocationMode: resourcev1.DeviceAllocationModeExactCount},
		{Name: "vgpu-small", DeviceClassName: testClass, Count: 4, AllocationMode: resourcev1.DeviceAllocationModeExactCount},
	}}
	for _, c := range []struct {
		name string
		spec resourcev1.ResourceClaimSpec
		want int64
	}{
		{"exact count", claimSpec(exactly(testClass, resourcev1.DeviceAllocationModeExactCount, 3)), 3},
		{"count unset", claimSpec(exactly(testClass, "", 0)), 1},
		{"all", claimSpec(exactly(testClass, resourcev1.DeviceAllocationModeAll, 0)), 1},
		{"other class", claimSpec(exactly("other", resourcev1.DeviceAllocationModeExactCount, 3)), 0},
		{"two requests", claimSpec(exactly(testClass, "", 1), exactly(testClass, resourcev1.DeviceAllocationModeExactCount, 2)), 3},
		{"first available of the class", claimSpec(first), 2},
		{"nothing", claimSpec(), 0},
	} {
		if got := ClaimDevices(c.spec, testClass); got != c.want {
			t.Errorf("%s: ClaimDevices = %d, want %d", c.name, got, c.want)
		}
	}
}
