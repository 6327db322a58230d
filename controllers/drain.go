package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
)

// podNodeNameField indexes pods by spec.nodeName in the manager's cache.
const podNodeNameField = "spec.nodeName"

// evictionTimeout bounds one eviction request.
const evictionTimeout = 5 * time.Second

// terminatingMargin is how long past the end of its grace period a terminating pod is
// waited for. After it, as kubectl drain --skip-wait-for-delete-timeout and Cluster API
// do, the pod no longer holds the drain: its kubelet is gone or stuck, and the pod will
// not run again anyway. A pod on a node that is not Ready never holds it.
const terminatingMargin = time.Minute

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
	// Holding are pods the drain waits for to finish rather than evict
	// (gpupool.dev/do-not-disrupt, drain.jobPods: WaitCompleted), with the reason.
	Holding []string
	// Deferred counts the pods this pass had no eviction left for (maxEvictionsPerPass):
	// they are evicted in the next pass.
	Deferred int
}

func (r drainResult) message() string {
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

// maxNamedPods bounds how many pods a drain message names, so that a crowded node
// cannot grow the pool's status toward the API server's object size limit.
const maxNamedPods = 5

func firstFew(items []string, sep string) string {
	if len(items) <= maxNamedPods {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s%sand %d more", strings.Join(items[:maxNamedPods], sep), sep, len(items)-maxNamedPods)
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
//
// Every eviction error counts as blocking (and so toward drain.timeout) and is named;
// none stops the drain of the other pods or nodes.
func (r *GPUPoolProfileReconciler) drainPods(ctx context.Context, node *corev1.Node, d gpupoolv1.DrainSpec, now time.Time, budget *passBudget) (drainResult, error) {
	pods, err := r.podsOnNode(ctx, node.Name)
	if err != nil {
		return drainResult{}, err
	}
	ready := nodeReady(node)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name })
	var res drainResult
	for i := range pods {
		p := &pods[i]
		if skipForDrain(p) {
			continue
		}
		id := p.Namespace + "/" + p.Name
		if p.DeletionTimestamp != nil {
			if r.terminating.holds(p, ready, now) {
				res.Waiting = append(res.Waiting, id)
			}
			continue
		}
		if why := holdsUntilDone(p, d.JobPods, ready); why != "" {
			res.Holding = append(res.Holding, id+" ("+why+")")
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
		if !budget.eviction() {
			res.Deferred++
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
			// Such as the 500 for a pod that two PodDisruptionBudgets cover.
			res.Blocked = append(res.Blocked, id+" (eviction failed: "+pdbReason(err)+")")
		}
	}
	res.Done = len(res.Waiting) == 0 && len(res.Blocked) == 0 && len(res.Holding) == 0 && res.Deferred == 0
	return res, nil
}

// holdsUntilDone says why a drain waits for a running pod to finish instead of
// evicting it, "" when it evicts it: the pod asks not to be disrupted, or it belongs to
// a Job and drain.jobPods is WaitCompleted (Cluster API's MachineDrainRule behavior
// WaitCompleted: the pod is not evicted, the drain waits for it to complete).
//
// On a node that is not Ready nothing is held: the pod cannot be running its work
// there (the kubelet is not reporting), so waiting would only run into drain.timeout
// and abort the switch. The pod is evicted as any other, as terminatingClock.holds stops waiting
// for terminating pods on such a node.
func holdsUntilDone(p *corev1.Pod, jobPods gpupoolv1.DrainJobPods, nodeReady bool) string {
	if !nodeReady {
		return ""
	}
	if p.Annotations[AnnotationDoNotDisrupt] == "true" {
		return AnnotationDoNotDisrupt
	}
	if c := metav1.GetControllerOf(p); jobPods == gpupoolv1.JobPodsWaitCompleted && c != nil && c.Kind == "Job" {
		return "Job pod, drain.jobPods: WaitCompleted"
	}
	return ""
}

// anyToEvict tells whether a drain would still evict or wait for a pod.
func (r *GPUPoolProfileReconciler) anyToEvict(pods []corev1.Pod, nodeReady bool, now time.Time) bool {
	for i := range pods {
		p := &pods[i]
		if skipForDrain(p) || (p.DeletionTimestamp != nil && !r.terminating.holds(p, nodeReady, now)) {
			continue
		}
		return true
	}
	return false
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

// maxConcurrentDrains bounds how many nodes are cordoned and evicted at the same time
// in one pass: enough that a pass over hundreds of nodes takes about as long as its
// slowest eviction, few enough not to flood the API server.
const maxConcurrentDrains = 16

// cordonNode cordons a node for the pool and marks it with the pool label (which lets
// deletion find every node gpupool touched). It is a no-op for a node already so.
func (r *GPUPoolProfileReconciler) cordonNode(ctx context.Context, s *scope, node *corev1.Node) error {
	if node.Spec.Unschedulable && node.Labels[LabelPool] == s.pool.Name {
		return nil
	}
	if !s.budget.nodeWrite() {
		return errCapped
	}
	if err := r.patchNode(ctx, node, func(n *corev1.Node) {
		cordon(n)
		setManagedLabel(n, LabelPool, s.pool.Name)
	}); err != nil {
		return err
	}
	r.nodeEvent(s, node, corev1.EventTypeNormal, "Cordoned", "cordoned node %s to drain it", node.Name)
	return nil
}

// cordonAhead cordons, before anything is evicted, every node the plan will drain, on
// every host: an evicted pod is then rescheduled onto a node that stays, and evicted
// once, rather than onto a node whose drain comes later. It reports whether every one
// is cordoned; when the pass's budget ran out first, the rest are cordoned in the next
// pass and nothing is evicted before.
func (r *GPUPoolProfileReconciler) cordonAhead(ctx context.Context, s *scope, p *plan.Plan) bool {
	var nodes []*corev1.Node
	for _, hp := range p.Hosts {
		for _, st := range hp.Steps {
			if n := s.nodes[st.VM]; st.Action == plan.Drain && n != nil && (!n.Spec.Unschedulable || n.Labels[LabelPool] != s.pool.Name) {
				nodes = append(nodes, n)
			}
		}
	}
	errs := make([]error, len(nodes))
	forEach(len(nodes), maxConcurrentDrains, func(i int) { errs[i] = r.cordonNode(ctx, s, nodes[i]) })
	all := true
	for _, err := range errs {
		switch {
		case errors.Is(err, errCapped):
			all = false
		case err != nil:
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
	return all
}

// drainOutcome is what the eviction phase of one drain found.
type drainOutcome struct {
	res drainResult
	err error
}

// evictAll runs the cordon and eviction phase of the due drains concurrently (bounded):
// it reads the scope and patches nodes and pods, but changes nothing in the scope, so
// that settleDrain can then record the outcomes one by one.
func (r *GPUPoolProfileReconciler) evictAll(ctx context.Context, s *scope, steps []plan.Step) []drainOutcome {
	out := make([]drainOutcome, len(steps))
	forEach(len(steps), maxConcurrentDrains, func(i int) {
		node := s.nodes[steps[i].VM]
		if node == nil {
			return
		}
		if err := r.cordonNode(ctx, s, node); err != nil {
			out[i].err = err
			return
		}
		out[i].res, out[i].err = r.drainPods(ctx, node, s.pool.Spec.Drain, s.now, s.budget)
		podEvictions.WithLabelValues(s.pool.Name).Add(float64(out[i].res.Evicted))
	})
	return out
}

// forEach calls f for 0..n-1 on at most limit goroutines and waits for all of them.
func forEach(n, limit int, f func(int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// settleDrain records what a drain's eviction phase found and decides: done, wait, or
// at drain.timeout abort the transition or delete what is left, as the spec says.
func (r *GPUPoolProfileReconciler) settleDrain(ctx context.Context, s *scope, ws *gpupoolv1.WorkerStatus, node *corev1.Node, o drainOutcome) (time.Duration, error) {
	if node == nil {
		return requeueStep, nil
	}
	if o.err != nil {
		return 0, o.err
	}
	d, res := s.pool.Spec.Drain, o.res
	ws.Message = "draining node " + node.Name + ": " + res.message()
	if res.Done {
		return requeueStep, nil // the Drained event comes when the plan moves on (recordWorkers)
	}
	timeout := 10 * time.Minute
	if d.Timeout != nil {
		timeout = d.Timeout.Duration
	}
	elapsed := s.now.Sub(ws.StepStartTime.Time)
	if elapsed < timeout {
		if len(res.Blocked)+len(res.Holding) > 0 {
			s.facts.drainBlocked = append(s.facts.drainBlocked, fmt.Sprintf("node %s: %s (timeout in %s)", node.Name, res.message(), (timeout-elapsed).Round(time.Second)))
		}
		return min(requeueDrain, timeout-elapsed), nil
	}
	if d.OnTimeout == gpupoolv1.DrainForce {
		n, err := r.forceDelete(ctx, node.Name, d)
		if err != nil {
			return 0, err
		}
		s.facts.drainBlocked = append(s.facts.drainBlocked, fmt.Sprintf("node %s: drain timed out after %s; deleting what is left (%s)", node.Name, timeout, res.message()))
		if n > 0 {
			r.nodeEvent(s, node, corev1.EventTypeWarning, "DrainForced", "drain of node %s timed out after %s; deleted %d pod(s) (%s)", node.Name, timeout, n, res.message())
		}
		return requeueDrain, nil
	}
	r.abort(ctx, s, fmt.Sprintf("drain of node %s timed out after %s: %s", node.Name, timeout, res.message()))
	return 0, nil
}

// uncordonRunning uncordons the nodes gpupool cordoned whose VMs run and have no task in
// flight: what an aborted transition gives back. It is repeated on every pass of an
// aborted transition, so a node patch that failed once is retried.
func (r *GPUPoolProfileReconciler) uncordonRunning(ctx context.Context, s *scope) {
	for vm, n := range s.nodes {
		v, ok := s.vm(vm)
		if !ok || v.PowerState != inventory.PoweredOn || !cordonedByUs(n) {
			continue
		}
		if ws := s.worker(vm); ws.Task != nil || !s.budget.nodeWrite() {
			continue
		}
		if err := r.patchNode(ctx, n, uncordon); err != nil {
			s.facts.stepErrors = append(s.facts.stepErrors, err.Error())
		}
	}
}
