package controllers

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
)

// podNodeNameField indexes pods by spec.nodeName in the manager's cache.
const podNodeNameField = "spec.nodeName"

// evictionTimeout bounds one eviction request.
const evictionTimeout = 5 * time.Second

// drainResult is what one non-blocking drain pass found.
type drainResult struct {
	// Done is true when no pod that needs eviction is left on the node.
	Done bool
	// Evicted counts evictions requested in this pass.
	Evicted int
	// Waiting are pods already terminating.
	Waiting []string
	// Blocked are pods that cannot be evicted now, with the reason.
	Blocked []string
}

func (r drainResult) message() string {
	var parts []string
	if len(r.Blocked) > 0 {
		parts = append(parts, "blocked: "+strings.Join(r.Blocked, "; "))
	}
	if len(r.Waiting) > 0 {
		parts = append(parts, fmt.Sprintf("waiting for %d terminating pod(s): %s", len(r.Waiting), strings.Join(r.Waiting, ", ")))
	}
	if r.Evicted > 0 {
		parts = append(parts, fmt.Sprintf("requested eviction of %d pod(s)", r.Evicted))
	}
	if len(parts) == 0 {
		return "drained"
	}
	return strings.Join(parts, "; ")
}

// podsOnNode lists the pods bound to a node.
func (r *GPUPoolProfileReconciler) podsOnNode(ctx context.Context, node string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.MatchingFields{podNodeNameField: node}); err != nil {
		return nil, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	return pods.Items, nil
}

// skipForDrain tells which pods a drain leaves alone, as kubectl drain does: DaemonSet
// pods (their controller would recreate them on the node anyway), mirror pods (the
// kubelet owns them) and pods that have already finished.
func skipForDrain(p *corev1.Pod) bool {
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

// drainPods looks at the pods on a node and asks for the eviction of those that must go.
// It never waits: the caller requeues and calls it again until Done. Evictions go through
// the eviction API, so PodDisruptionBudgets are respected; a refused eviction is reported
// as blocking.
func (r *GPUPoolProfileReconciler) drainPods(ctx context.Context, node string, d gpupoolv1.DrainSpec) (drainResult, error) {
	pods, err := r.podsOnNode(ctx, node)
	if err != nil {
		return drainResult{}, err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	var res drainResult
	for i := range pods {
		p := &pods[i]
		if skipForDrain(p) {
			continue
		}
		id := p.Namespace + "/" + p.Name
		if p.DeletionTimestamp != nil {
			res.Waiting = append(res.Waiting, id)
			continue
		}
		if !d.DeleteEmptyDirData && usesEmptyDir(p) {
			res.Blocked = append(res.Blocked, id+" uses emptyDir (set spec.drain.deleteEmptyDirData: true to evict it)")
			continue
		}
		if metav1.GetControllerOf(p) == nil {
			res.Blocked = append(res.Blocked, id+" has no controller and would not come back (delete it, or use drain.onTimeout: Force)")
			continue
		}
		ev := &policyv1.Eviction{
			ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
			DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: d.GracePeriodSeconds},
		}
		// Note: client-go retries a 429 that carries Retry-After (a budget the disruption
		// controller has not processed yet) for up to ~100s. A reconcile must not block
		// that long, so each eviction gets a short deadline and counts as blocked.
		evictCtx, cancel := context.WithTimeout(ctx, evictionTimeout)
		err := r.Client.SubResource("eviction").Create(evictCtx, p, ev)
		cancel()
		switch {
		case err == nil:
			res.Evicted++
			res.Waiting = append(res.Waiting, id)
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			res.Blocked = append(res.Blocked, id+" (eviction refused: "+pdbReason(err)+")")
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			res.Blocked = append(res.Blocked, id+" (eviction not granted within "+evictionTimeout.String()+"; a PodDisruptionBudget may still be processed)")
		default:
			return res, fmt.Errorf("evicting pod %s: %w", id, err)
		}
	}
	res.Done = len(res.Waiting) == 0 && len(res.Blocked) == 0
	return res, nil
}

// forceDelete deletes the pods a drain would evict, without asking budgets. It is the
// drain.onTimeout: Force path.
func (r *GPUPoolProfileReconciler) forceDelete(ctx context.Context, node string, d gpupoolv1.DrainSpec) (int, error) {
	pods, err := r.podsOnNode(ctx, node)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range pods {
		p := &pods[i]
		if skipForDrain(p) || p.DeletionTimestamp != nil {
			continue
		}
		if err := r.Client.Delete(ctx, p, &client.DeleteOptions{GracePeriodSeconds: d.GracePeriodSeconds}); client.IgnoreNotFound(err) != nil {
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
