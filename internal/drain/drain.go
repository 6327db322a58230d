// Package drain empties a node of the pods that must leave it before its VM is parked
// or reconfigured, as kubectl drain and Cluster API's drain.Helper do: through the
// eviction API (PodDisruptionBudgets respected), leaving DaemonSet and mirror pods, and
// waiting for pods that must finish rather than be evicted.
//
// A drain never blocks: Helper.Drain looks at the node's pods once, asks for the
// evictions due and says what is left (Result); the caller requeues and calls it again
// until Result.Done, and compares its own timeout with a start time it stores. Cordoning
// the node, the timeout and what it leads to are the caller's.
package drain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/nodes"
)

// EvictionTimeout bounds one eviction request.
const EvictionTimeout = 5 * time.Second

// Budget is the share of evictions a drain may still ask for: the reconciler caps the
// writes of one pass, and what it has no budget for is left to the next pass.
type Budget interface {
	// TakeEviction takes one eviction from the budget; false when none is left.
	TakeEviction() bool
	// EvictionDone settles an eviction taken, with the eviction request's error: the
	// budget decides whether one that failed counts.
	EvictionDone(err error)
}

// Helper drains nodes of one cluster.
type Helper struct {
	// Cluster is where the pods are listed, evicted and deleted.
	Cluster Cluster
	// Terminating measures how long terminating pods have held a drain. It must be the
	// same from one call to the next (the reconciler keeps one), or a terminating pod
	// would hold the drain again on every pass. Nil: terminating pods never hold it.
	Terminating *TerminatingClock
}

// Result is what one non-blocking drain pass found.
type Result struct {
	// Done is true when no pod that needs eviction is left on the node.
	Done bool
	// Evicted counts evictions requested in this pass.
	Evicted int
	// Waiting are pods already terminating.
	Waiting []string
	// Blocked are pods that cannot be evicted now, with the reason.
	Blocked []string
	// Holding are pods the drain waits for to finish rather than evict
	// (gpupool.dev/do-not-disrupt, drain.jobPods: WaitCompleted), with the reason.
	Holding []string
	// Deferred counts the pods this pass had no eviction left for (Budget): they are
	// evicted in the next pass.
	Deferred int
	// Overridden counts, per namespace, the pods that held the drain (Holding, or
	// Blocked for having no controller or an emptyDir volume) whose eviction this pass
	// requested because drain.maxHold had passed (HoldExpired). Only counts: the pool
	// is cluster-scoped and read by more people than the pods' owners.
	Overridden map[string]int
}

// Message says what the drain waits for, for the worker's message and the pool's
// conditions; "drained" when nothing.
func (r Result) Message() string {
	var parts []string
	if len(r.Blocked) > 0 {
		parts = append(parts, "blocked: "+firstFew(r.Blocked, "; "))
	}
	if len(r.Holding) > 0 {
		parts = append(parts, fmt.Sprintf("waiting for %d pod(s) to finish: %s", len(r.Holding), firstFew(r.Holding, ", ")))
	}
	if len(r.Waiting) > 0 {
		parts = append(parts, fmt.Sprintf("waiting for %d terminating pod(s): %s", len(r.Waiting), firstFew(r.Waiting, ", ")))
	}
	if r.Evicted > 0 {
		parts = append(parts, fmt.Sprintf("requested eviction of %d pod(s)", r.Evicted))
	}
	if r.Deferred > 0 {
		parts = append(parts, fmt.Sprintf("%d eviction(s) in the next pass", r.Deferred))
	}
	if len(parts) == 0 {
		return "drained"
	}
	return strings.Join(parts, "; ")
}

// OverriddenCount says how many held pods Overridden counts and, per namespace in
// name order, how many of them ("tenant-a: 2, tenant-b: 1"): the event's words.
func (r Result) OverriddenCount() (int, string) {
	nss := make([]string, 0, len(r.Overridden))
	total := 0
	for ns, n := range r.Overridden {
		nss = append(nss, ns)
		total += n
	}
	sort.Strings(nss)
	parts := make([]string, len(nss))
	for i, ns := range nss {
		parts[i] = fmt.Sprintf("%s: %d", ns, r.Overridden[ns])
	}
	return total, strings.Join(parts, ", ")
}

// maxNamedPods bounds how many pods a drain message names, so that a crowded node
// cannot grow the pool's status toward the API server's object size limit.
const maxNamedPods = 5

func firstFew(items []string, sep string) string {
	if len(items) <= maxNamedPods {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%sand %d more", strings.Join(items[:maxNamedPods], sep), sep, len(items)-maxNamedPods)
}

// skip tells which pods a drain leaves alone, as kubectl drain does: DaemonSet pods
// (their controller would recreate them on the node anyway), mirror pods (the kubelet
// owns them) and pods that have already finished.
func skip(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return true
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return true
	}
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return true
	}
	return false
}

// HoldExpired tells whether, at now, the pods that hold the drain of a node (a
// do-not-disrupt annotation, drain.jobPods: WaitCompleted, no controller, an emptyDir
// volume) are no longer honoured: drain.maxHold is set and has passed since started, when
// gpupool started the node's drain. Both times are gpupool's own clock (started is
// stamped into the pool's status by gpupool, never read from a pod or the API server), so
// clock skew between the manager and the API server does not shorten or lengthen the
// hold. A started in the future (a clock stepped back) has not expired: the hold then
// lasts longer, never shorter.
func HoldExpired(d gpupoolv1.DrainSpec, started, now time.Time) bool {
	return d.MaxHold != nil && !started.IsZero() && now.Sub(started) >= d.MaxHold.Duration
}

// Drain looks at the pods on a node and asks for the eviction of those that must go.
// It never waits: the caller requeues and calls it again until Done. Evictions go through
// the eviction API, so PodDisruptionBudgets are respected; a refused eviction is reported
// as blocking. A nil budget allows every eviction. started is when gpupool started the
// node's drain, on the clock now is read from: once drain.maxHold has passed since, the
// pods that hold the drain are evicted as any other (HoldExpired, Result.Overridden).
//
// Every eviction error counts as blocking (and so toward the caller's drain.timeout) and
// is named; none stops the drain of the other pods.
func (h *Helper) Drain(ctx context.Context, node *corev1.Node, d gpupoolv1.DrainSpec, started, now time.Time, budget Budget) (Result, error) {
	pods, err := h.Cluster.PodsOnNode(ctx, node.Name)
	if err != nil {
		return Result{}, err
	}
	ready := nodes.Ready(node)
	expired := HoldExpired(d, started, now)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	var res Result
	for i := range pods {
		p := &pods[i]
		if skip(p) {
			continue
		}
		id := p.Namespace + "/" + p.Name
		if p.DeletionTimestamp != nil || h.evictedBefore(p) {
			if h.holds(p, ready, now) {
				res.Waiting = append(res.Waiting, id)
			}
			continue
		}
		held := false
		if why := holdsUntilDone(p, d.JobPods, ready); why != "" {
			if held = true; !expired {
				res.Holding = append(res.Holding, id+" ("+why+")")
				continue
			}
		}
		if why := blocksUnlessForced(p, d); why != "" {
			if held = true; !expired {
				res.Blocked = append(res.Blocked, id+" "+why)
				continue
			}
		}
		if budget != nil && !budget.TakeEviction() {
			res.Deferred++
			continue
		}
		blocked, err := h.evict(ctx, p, d.GracePeriodSeconds)
		if budget != nil {
			budget.EvictionDone(err)
		}
		switch {
		case err == nil:
			if h.Terminating != nil {
				h.Terminating.Evicted(p, now)
			}
			res.Evicted++
			res.Waiting = append(res.Waiting, id)
			if held {
				if res.Overridden == nil {
					res.Overridden = map[string]int{}
				}
				res.Overridden[p.Namespace]++
			}
		case blocked != "":
			res.Blocked = append(res.Blocked, id+" ("+blocked+")")
		}
	}
	res.Done = len(res.Waiting) == 0 && len(res.Blocked) == 0 && len(res.Holding) == 0 && res.Deferred == 0
	return res, nil
}

// evict asks for the eviction of p. It returns nil when the eviction was granted, and
// otherwise an error with why the pod blocks the drain, "" for a pod already gone.
func (h *Helper) evict(ctx context.Context, p *corev1.Pod, grace *int64) (string, error) {
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: grace},
	}
	// Note: client-go retries a 429 that carries Retry-After (a budget the disruption
	// controller has not processed yet) for up to ~100s. A reconcile must not block
	// that long, so each eviction gets a short deadline and counts as blocked.
	evictCtx, cancel := context.WithTimeout(ctx, EvictionTimeout)
	err := h.Cluster.Evict(evictCtx, p, ev)
	cancel()
	switch {
	case err == nil:
		return "", nil
	case apierrors.IsNotFound(err):
		return "", err
	case apierrors.IsTooManyRequests(err):
		return "eviction refused: " + pdbReason(err), err
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return "eviction not granted within " + EvictionTimeout.String() + "; a PodDisruptionBudget may still be processed", err
	default:
		// Such as the 500 for a pod that two PodDisruptionBudgets cover.
		return "eviction failed: " + pdbReason(err), err
	}
}

// evictedBefore tells whether p's eviction was granted earlier while p still shows no
// deletion: what a pod watch that lags the API server shows. p is then terminating, and
// is waited for as such, never evicted again.
func (h *Helper) evictedBefore(p *corev1.Pod) bool {
	return h.Terminating != nil && h.Terminating.Known(p)
}

// holds tells whether a terminating pod still holds the drain (TerminatingClock).
func (h *Helper) holds(p *corev1.Pod, nodeReady bool, now time.Time) bool {
	return h.Terminating != nil && h.Terminating.Holds(p, nodeReady, now)
}

// holdsUntilDone says why a drain waits for a running pod to finish instead of
// evicting it, "" when it evicts it: the pod asks not to be disrupted, or it belongs to
// a Job and drain.jobPods is WaitCompleted (Cluster API's MachineDrainRule behavior
// WaitCompleted: the pod is not evicted, the drain waits for it to complete).
//
// On a node that is not Ready nothing is held: the pod cannot be running its work
// there (the kubelet is not reporting), so waiting would only run into drain.timeout
// and abort the switch. The pod is evicted as any other, as TerminatingClock.Holds stops
// waiting for terminating pods on such a node.
func holdsUntilDone(p *corev1.Pod, jobPods gpupoolv1.DrainJobPods, nodeReady bool) string {
	if !nodeReady {
		return ""
	}
	if p.Annotations[gpupoolv1.AnnotationDoNotDisrupt] == "true" {
		return gpupoolv1.AnnotationDoNotDisrupt
	}
	if c := metav1.GetControllerOf(p); jobPods == gpupoolv1.JobPodsWaitCompleted && c != nil && c.Kind == "Job" {
		return "Job pod, drain.jobPods: WaitCompleted"
	}
	return ""
}

// blocksUnlessForced says why a drain does not evict a running pod that it could evict,
// "" when it evicts it: its emptyDir data would be lost (without deleteEmptyDirData), or
// it has no controller and would not come back.
func blocksUnlessForced(p *corev1.Pod, d gpupoolv1.DrainSpec) string {
	if !d.DeleteEmptyDirData && usesEmptyDir(p) {
		return "uses emptyDir (set spec.drain.deleteEmptyDirData: true to evict it)"
	}
	if metav1.GetControllerOf(p) == nil {
		return "has no controller and would not come back (delete it, or use drain.onTimeout: Force)"
	}
	return ""
}

// Gone tells whether no pod is left on a node but those a drain leaves alone (DaemonSet
// and mirror pods, pods that finished): none running, none terminating. It is stricter
// than AnyToEvict, which stops waiting for a terminating pod past its deadline or on a
// node that is not Ready: a suspend asked between passes (internal/execute,
// afterdrains.go) goes only once the pods are gone, and leaves any doubt to a pass.
func Gone(pods []corev1.Pod) bool {
	for i := range pods {
		if !skip(&pods[i]) {
			return false
		}
	}
	return true
}

// AnyToEvict tells whether a drain of a node with these pods would still evict or wait
// for a pod: the planner's "drained" for a cordoned node.
func (h *Helper) AnyToEvict(pods []corev1.Pod, nodeReady bool, now time.Time) bool {
	for i := range pods {
		p := &pods[i]
		if skip(p) || (p.DeletionTimestamp != nil && !h.holds(p, nodeReady, now)) {
			continue
		}
		return true
	}
	return false
}

// ForceDelete deletes the pods a drain would evict, without asking budgets, and returns
// how many. It is the drain.onTimeout: Force path.
func (h *Helper) ForceDelete(ctx context.Context, node string, d gpupoolv1.DrainSpec) (int, error) {
	pods, err := h.Cluster.PodsOnNode(ctx, node)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range pods {
		p := &pods[i]
		if skip(p) || p.DeletionTimestamp != nil {
			continue
		}
		if err := h.Cluster.Delete(ctx, p, d.GracePeriodSeconds); client.IgnoreNotFound(err) != nil {
			return n, fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		n++
	}
	return n, nil
}

func usesEmptyDir(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			return true
		}
	}
	return false
}

// pdbReason extracts the API server's explanation of a refused eviction, which names the
// PodDisruptionBudget.
func pdbReason(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if d := status.Status().Details; d != nil {
			for _, c := range d.Causes {
				if c.Message != "" {
					return c.Message
				}
			}
		}
		if m := status.Status().Message; m != "" {
			return m
		}
	}
	return err.Error()
}
