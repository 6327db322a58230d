package demand

import (
	"context"
	"fmt"
	"sort"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get

// Pods is the demand pods show: unschedulable GPU pods that only a layout other than the
// active one could serve, the GPU pods running on each layout's nodes, and what a switch
// from the active layout would evict. It reads through what the controller gives it, so
// that its caches (the lean pod cache, the per-node pod watches) stay the controller's.
// A pod list that fails is an error: the demand is then not observed at all.
type Pods struct {
	// Nodes reads the pool's nodes (the manager's cache).
	Nodes client.Reader
	// Jobs reads the Job of a pod a switch would evict, to tell whether it is near
	// completion. Note: the API server, not a cache: a Job informer would hold every Job
	// of the cluster for the few whose pods a switch would evict.
	Jobs client.Reader
	// Pending lists the pods not bound to a node that may request the resource.
	Pending func(ctx context.Context, res corev1.ResourceName) ([]corev1.Pod, error)
	// OnNode lists the pods bound to a node.
	OnNode func(ctx context.Context, node string) ([]corev1.Pod, error)
}

// Observe implements Source.
func (pd Pods) Observe(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, shapes Shapes, who Scope) (Observed, error) {
	res := who.GPU
	pods, err := pd.Pending(ctx, res)
	if err != nil {
		return Observed{}, err
	}
	layoutOf, err := nodeLayouts(ctx, pd.Nodes, pool)
	if err != nil {
		return Observed{}, err
	}
	drained := DrainedBySwitch(pool)
	// Only the pods on the pool's nodes count as running or evicted: they are listed
	// node by node, never the cluster's pods.
	for _, node := range nodesRead(layoutOf, drained) {
		on, err := pd.OnNode(ctx, node)
		if err != nil {
			return Observed{}, err
		}
		pods = append(pods, on...)
	}
	memo := map[types.NamespacedName]bool{}
	c := podCount{pool: pool, shapes: shapes, who: who, layoutOf: layoutOf, drained: drained,
		kept: KeptByEveryOther(pool), obs: map[string]plan.LayoutDemand{},
		near: func(p *corev1.Pod) bool { return NearCompletion(ctx, pd.Jobs, p, memo) }}
	for i := range pods {
		c.add(&pods[i])
	}
	for l, o := range c.obs {
		sort.Strings(o.Pending)
		sort.Strings(o.DoNotDisrupt)
		sort.Strings(o.NearCompletion)
		c.obs[l] = o
	}
	return Observed{Layouts: c.obs}, nil
}

// podCount sums the pods' demand per layout.
type podCount struct {
	pool     *gpupoolv1.GPUPoolProfile
	shapes   Shapes
	who      Scope
	layoutOf map[string]string
	drained  map[string]map[string]bool
	kept     map[string]map[string]bool
	near     func(*corev1.Pod) bool
	obs      map[string]plan.LayoutDemand
}

func (c *podCount) add(p *corev1.Pod) {
	if Finished(p) {
		return
	}
	active := c.pool.Status.ActiveLayout
	gpus := PodGPUs(p, c.who.GPU)
	name := c.who.Named(p)
	if p.Spec.NodeName == "" {
		if gpus == 0 || !c.who.Counts(p) || !Unschedulable(p) {
			return
		}
		if active != "" && c.shapes.Serves(active, p) {
			// Work waiting for the active layout's converted GPUs is what sizes a layout
			// by count (countFromDemand): it is the demand for the active layout.
			if conv := sizedConversion(c.pool, active); conv != nil && c.shapes.ServesProfile(active, conv.Profile, p) {
				o := c.obs[active]
				o.PendingGPUs += gpus
				o.Pending = append(o.Pending, name)
				c.obs[active] = o
			}
			return
		}
		for _, l := range c.pool.Spec.Layouts {
			if l.Name != active && c.shapes.Serves(l.Name, p) {
				o := c.obs[l.Name]
				o.PendingGPUs += gpus
				o.Pending = append(o.Pending, name)
				c.obs[l.Name] = o
			}
		}
		return
	}
	// A pod on a node that every other layout keeps as it is does not use the layout it
	// is labelled for: no switch would disrupt it. Only the work of whom demand selects
	// keeps a layout; every pod counts in what a switch would evict.
	if l, ok := c.layoutOf[p.Spec.NodeName]; ok && gpus > 0 && c.who.Counts(p) && !c.kept[l][p.Spec.NodeName] {
		o := c.obs[l]
		o.RunningGPUs += gpus
		c.obs[l] = o
	}
	for target, nodes := range c.drained {
		if !nodes[p.Spec.NodeName] || !Evictable(p) {
			continue
		}
		o := c.obs[target]
		if gpus > 0 {
			o.Evictions++
		}
		if p.Annotations[gpupoolv1.AnnotationDoNotDisrupt] == "true" {
			o.DoNotDisrupt = append(o.DoNotDisrupt, name)
		} else if c.near(p) {
			o.NearCompletion = append(o.NearCompletion, name)
		}
		c.obs[target] = o
	}
}

// NearCompletion says whether the pod belongs to a Job that has three quarters of its
// completions (at least two) behind it: evicting it would throw most of a job away. memo
// keeps the answers by Job for one look.
func NearCompletion(ctx context.Context, jobs client.Reader, p *corev1.Pod, memo map[types.NamespacedName]bool) bool {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "Job" || ref.APIVersion != batchv1.SchemeGroupVersion.String() {
		return false
	}
	key := types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}
	if v, ok := memo[key]; ok {
		return v
	}
	var job batchv1.Job
	v := false
	switch err := jobs.Get(ctx, key, &job); {
	case apierrors.IsNotFound(err):
	case err != nil:
		// Note: a Job that cannot be read may be near completion; the protection holds.
		v = true
	default:
		completions := int32(1)
		if job.Spec.Completions != nil {
			completions = *job.Spec.Completions
		}
		v = completions >= 2 && job.Status.Succeeded*4 >= completions*3
	}
	memo[key] = v
	return v
}

// nodeLayouts maps the pool's nodes to the layout they serve: the gpupool.dev/layout
// label gpupool sets when a node is ready for work and removes when it is parked. Nodes
// of a layout being switched to count as soon as they serve it, before the switch has
// completed, so that work already running there keeps the layout.
func nodeLayouts(ctx context.Context, r client.Reader, pool *gpupoolv1.GPUPoolProfile) (map[string]string, error) {
	var nodes corev1.NodeList
	// Read only: not copied.
	if err := r.List(ctx, &nodes, client.MatchingLabels{gpupoolv1.LabelPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		if l := n.Labels[gpupoolv1.LabelLayout]; l != "" && n.Labels[gpupoolv1.LabelParked] != "true" {
			out[n.Name] = l
		}
	}
	return out, nil
}

// sizedConversion is the conversion of the layout when it is a layout by count whose
// count demand sizes (a BringIn rule with countFromDemand), nil otherwise.
func sizedConversion(pool *gpupoolv1.GPUPoolProfile, layout string) *gpupoolv1.Conversion {
	if pool.Spec.Demand == nil {
		return nil
	}
	for _, ru := range pool.Spec.Demand.Rules {
		if ru.Layout != layout || ru.Action != gpupoolv1.DemandBringIn || ru.CountFromDemand == nil {
			continue
		}
		for i := range pool.Spec.Layouts {
			if l := &pool.Spec.Layouts[i]; l.Name == layout {
				return l.Convert
			}
		}
	}
	return nil
}
