package demand

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// +kubebuilder:rbac:groups=resource.k8s.io,resources=resourceclaims;resourceclaimtemplates,verbs=get

// ClaimsNotObserved begins the status.demand message of a pass that could not read the
// pods' ResourceClaims.
const ClaimsNotObserved = "DRA demand not observed"

// Claims is the demand of pods that ask for their GPUs through Dynamic Resource
// Allocation (readiness.dra): the devices of the pool's DeviceClass their ResourceClaims
// request, counted as Pods counts the GPU resource (pending where only a layout other
// than the active one could take the pod, running on a layout's nodes, evicted by a
// switch), with the same matching (Shapes) and tenant scope.
//
// A pod that also asks for the GPU resource is Pods' alone, so that no pod counts twice.
// A claim or template that is not found asks for nothing (the pod cannot be scheduled
// until it exists). resource.k8s.io not served, or a claim that cannot be read, is no
// DRA demand, never no demand: it answers zero with a note, as Workloads does for Kueue.
type Claims struct {
	// Nodes reads the pool's nodes (the manager's cache).
	Nodes client.Reader
	// Claims reads ResourceClaims and ResourceClaimTemplates. Note: the API server, not
	// a cache: only the claims of the pods counted are read, once per pass each.
	Claims client.Reader
	// Pending lists the pods not bound to a node that have resource claims.
	Pending func(ctx context.Context) ([]corev1.Pod, error)
	// OnNode lists the pods bound to a node.
	OnNode func(ctx context.Context, node string) ([]corev1.Pod, error)
}

// Observe implements Source.
func (cd Claims) Observe(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, shapes Shapes, who Scope) (Observed, error) {
	dra := pool.Spec.Readiness.DRA
	if dra == nil {
		return Observed{}, nil
	}
	pods, err := cd.Pending(ctx)
	if err != nil {
		return Observed{}, err
	}
	layoutOf, err := nodeLayouts(ctx, cd.Nodes, pool)
	if err != nil {
		return Observed{}, err
	}
	drained := DrainedBySwitch(pool)
	for _, node := range nodesRead(layoutOf, drained) {
		on, err := cd.OnNode(ctx, node)
		if err != nil {
			return Observed{}, err
		}
		pods = append(pods, on...)
	}
	dr := deviceReader{r: cd.Claims, class: dra.DeviceClassName, memo: map[claimRef]int64{}}
	c := podCount{pool: pool, shapes: shapes, who: who, layoutOf: layoutOf, drained: drained,
		kept: KeptByEveryOther(pool), obs: map[string]plan.LayoutDemand{}, near: func(*corev1.Pod) bool { return false }}
	for i := range pods {
		p := &pods[i]
		if len(p.Spec.ResourceClaims) == 0 || Finished(p) || PodGPUs(p, who.GPU) > 0 {
			continue
		}
		n, err := dr.devices(ctx, p)
		if err != nil {
			return Observed{NotObserved: fmt.Sprintf("%s, counted as none: %v", ClaimsNotObserved, err)}, nil
		}
		if n > 0 {
			c.addDevices(p, n)
		}
	}
	for l, o := range c.obs {
		sort.Strings(o.Pending)
		c.obs[l] = o
	}
	return Observed{Layouts: c.obs}, nil
}

// addDevices counts a pod that asks for n devices of the pool's class as podCount.add
// counts a GPU pod: pending demand, running use, and an eviction of the switches that
// drain its node. Its do-not-disrupt annotation and Job are Pods' to count (Pods counts
// every evictable pod on a drained node for them).
func (c *podCount) addDevices(p *corev1.Pod, n int64) {
	active := c.pool.Status.ActiveLayout
	if p.Spec.NodeName == "" {
		if !c.who.Counts(p) || !Unschedulable(p) || (active != "" && c.shapes.Serves(active, p)) {
			return
		}
		for _, l := range c.pool.Spec.Layouts {
			if l.Name != active && c.shapes.Serves(l.Name, p) {
				o := c.obs[l.Name]
				o.PendingGPUs += n
				o.Pending = append(o.Pending, c.who.Named(p))
				c.obs[l.Name] = o
			}
		}
		return
	}
	if l, ok := c.layoutOf[p.Spec.NodeName]; ok && c.who.Counts(p) && !c.kept[l][p.Spec.NodeName] {
		o := c.obs[l]
		o.RunningGPUs += n
		c.obs[l] = o
	}
	for target, nodes := range c.drained {
		if nodes[p.Spec.NodeName] && Evictable(p) {
			o := c.obs[target]
			o.Evictions++
			c.obs[target] = o
		}
	}
}

// claimRef names a ResourceClaim or a ResourceClaimTemplate.
type claimRef struct {
	namespace, name string
	template        bool
}

// deviceReader reads what the pods' claims ask for, each claim or template once.
type deviceReader struct {
	r     client.Reader
	class string
	memo  map[claimRef]int64
}

// devices is how many devices of the class the pod's claims request. A claim made from
// a template asks what the template does: the template is read, not the claim the
// resource claim controller made of it (its name is only in the pod's status).
func (dr deviceReader) devices(ctx context.Context, p *corev1.Pod) (int64, error) {
	var sum int64
	for _, pc := range p.Spec.ResourceClaims {
		var ref claimRef
		switch {
		case pc.ResourceClaimName != nil:
			ref = claimRef{namespace: p.Namespace, name: *pc.ResourceClaimName}
		case pc.ResourceClaimTemplateName != nil:
			ref = claimRef{namespace: p.Namespace, name: *pc.ResourceClaimTemplateName, template: true}
		default:
			continue
		}
		n, ok := dr.memo[ref]
		if !ok {
			var err error
			if n, err = dr.read(ctx, ref); err != nil {
				return 0, err
			}
			dr.memo[ref] = n
		}
		sum += n
	}
	return sum, nil
}

func (dr deviceReader) read(ctx context.Context, ref claimRef) (int64, error) {
	key := client.ObjectKey{Namespace: ref.namespace, Name: ref.name}
	var spec resourcev1.ResourceClaimSpec
	var err error
	if ref.template {
		var t resourcev1.ResourceClaimTemplate
		err = dr.r.Get(ctx, key, &t)
		spec = t.Spec.Spec
	} else {
		var c resourcev1.ResourceClaim
		err = dr.r.Get(ctx, key, &c)
		spec = c.Spec
	}
	switch {
	case meta.IsNoMatchError(err):
		return 0, fmt.Errorf("the API server does not serve %s", resourcev1.SchemeGroupVersion)
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading %s: %w", ref, err)
	}
	return ClaimDevices(spec, dr.class), nil
}

func (ref claimRef) String() string {
	kind := "ResourceClaim"
	if ref.template {
		kind = "ResourceClaimTemplate"
	}
	return fmt.Sprintf("%s %s/%s", kind, ref.namespace, ref.name)
}

// ClaimDevices is how many devices of class a claim requests: per request of the class,
// its count (allocationMode ExactCount, 1 when unset), or 1 for allocationMode All (how
// many a node has is not the pod's to say: at least one). A request with firstAvailable
// alternatives counts its first alternative of the class, the one the scheduler tries
// first.
func ClaimDevices(spec resourcev1.ResourceClaimSpec, class string) int64 {
	count := func(mode resourcev1.DeviceAllocationMode, n int64) int64 {
		if mode == resourcev1.DeviceAllocationModeAll || n < 1 {
			return 1
		}
		return n
	}
	var sum int64
	for _, r := range spec.Devices.Requests {
		if e := r.Exactly; e != nil {
			if e.DeviceClassName == class {
				sum += count(e.AllocationMode, e.Count)
			}
			continue
		}
		for _, sr := range r.FirstAvailable {
			if sr.DeviceClassName == class {
				sum += count(sr.AllocationMode, sr.Count)
				break
			}
		}
	}
	return sum
}

// AsksGPUs says whether the pod may ask the pool for GPUs: through the GPU resource or,
// with readiness.dra, through resource claims (what they ask is read by Claims).
func AsksGPUs(pool *gpupoolv1.GPUPoolProfile, p *corev1.Pod) bool {
	return PodGPUs(p, GPUResource(pool)) > 0 || (pool.Spec.Readiness.DRA != nil && len(p.Spec.ResourceClaims) > 0)
}

// PodClaimDevices is how many devices of class the pod's resource claims ask for
// (claims and templates read from r), for the accounting of a running claim pod.
func PodClaimDevices(ctx context.Context, r client.Reader, class string, p *corev1.Pod) (int64, error) {
	return deviceReader{r: r, class: class, memo: map[claimRef]int64{}}.devices(ctx, p)
}
