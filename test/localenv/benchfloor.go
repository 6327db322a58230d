package localenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/vsphere"
)

// Floor is what this environment alone takes for the Kubernetes work of a day -> night
// switch, done by a bare client before the pool exists, at the executor's concurrency
// (execute.MaxConcurrentWrites): a patch of each of the N day nodes (a switch's cordons),
// and the eviction of N pods, each from the eviction request until the pod is gone while
// their ReplicaSet recreates them (a switch's drains). Against it, a reaction or a
// makespan measures gpupool, not the machine: no switch can cordon or drain faster.
//
// And the vSphere side of it, through the vSphere client the manager uses: N suspends
// of the day VMs asked of vgpusim, then N power-ons, at the starts' concurrency
// (execute.Starts: 16 of a pool at once), each from the first call until the last has
// returned a task (a switch's parks, and the power-ons once the GPUs are freed). No
// switch can ask for its tasks faster.
type Floor struct {
	N           int
	NodePatches time.Duration
	// Cordons is how long cordoning the N day nodes took, the same patches setting
	// spec.unschedulable, as a switch's cordons do (the controller manager then taints
	// each node unschedulable: a write of its own per node, which a cordon costs any
	// tool, kubectl drain as much as gpupool). The nodes are uncordoned after, untimed.
	Cordons      time.Duration
	EvictionsOut time.Duration
	// Suspends and PowerOns are how long asking for N of each took (zero: not measured).
	Suspends, PowerOns time.Duration
	// InventoryRead is the slowest of three reads of the pool's VMs' inventory (scoped,
	// as a pass reads it: polled through a view for a pool of at least
	// --vcenter-watch-min-vms VMs; after a first that also reads every VM's devices),
	// at rest: what every pass pays before it decides.
	InventoryRead time.Duration
}

// floorNamespace holds the pods the floor evicts.
const floorNamespace = "bench-floor"

// benchFloor measures the floor on n day nodes and n pods of a Deployment on the CPU
// node, then deletes the Deployment and waits for its pods to be gone.
func (e *Env) benchFloor(ctx context.Context, n int) (Floor, error) {
	f := Floor{N: n}
	var err error
	if f.NodePatches, f.Cordons, err = e.floorNodePatches(ctx, n); err != nil {
		return f, err
	}
	if f.EvictionsOut, err = e.floorEvictions(ctx, n); err != nil {
		return f, err
	}
	if f.Suspends, f.PowerOns, f.InventoryRead, err = e.floorTaskStarts(ctx, n); err != nil {
		return f, err
	}
	return f, nil
}

// floorTaskStarts reads the pool's inventory as a pass does (read: the slowest of
// three, after a first), suspends n day VMs through vCenter, as many calls at once as
// the manager makes, waits for the tasks and the nodes to go NotReady, powers the VMs on
// again the same way, waits for those tasks and for the day nodes to be ready for work
// again (and untainted), and returns how long asking for the suspends and for the
// power-ons took. On an error it powers the VMs on again, best effort.
func (e *Env) floorTaskStarts(ctx context.Context, n int) (suspends, powerOns, read time.Duration, err error) {
	// The pool's reads as the manager makes them: through a view (a poll) for a large
	// pool, unless the manager's --vcenter-watch-min-vms says otherwise.
	var opts []vsphere.Option
	if e.ManagerWatchMinVMs != nil {
		opts = append(opts, vsphere.WithWatchedInventory(*e.ManagerWatchMinVMs))
	}
	conn := vsphere.NewConnector(opts...)
	defer func() { _ = conn.Close() }()
	vc, err := conn.Connect(ctx, e.VCenter)
	if err != nil {
		return 0, 0, 0, err
	}
	inv, err := vc.Inventory(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	var refs, names, pool []string
	for _, vm := range inv.VMs {
		if strings.HasPrefix(vm.Name, "day-") && vm.PowerState == inventory.PoweredOn && len(refs) < n {
			refs, names = append(refs, vm.Ref), append(names, vm.Name)
		}
		if strings.HasPrefix(vm.Name, "day-") || strings.HasPrefix(vm.Name, "night-") {
			pool = append(pool, vm.Name)
		}
	}
	for i := range 4 {
		start := time.Now()
		if _, err := vc.Inventory(ctx, pool...); err != nil {
			return 0, 0, 0, err
		}
		if i > 0 { // the first reads every VM's devices, as a manager's first pass does
			read = max(read, time.Since(start))
		}
	}
	defer func() {
		if err != nil { // best effort: the day VMs on again, for whoever looks at the environment
			for _, ref := range refs {
				_, _ = vc.PowerOn(context.WithoutCancel(ctx), ref, "")
			}
		}
	}()
	if suspends, err = e.floorAsk(ctx, vc, refs, "suspends", func(ref string) (string, error) { return vc.Suspend(ctx, ref) }); err != nil {
		return 0, 0, 0, err
	}
	// The nodes follow their VMs down before the VMs go up again, so that none goes
	// NotReady late, under the pool's workload.
	if err = e.floorNodes(ctx, names, "NotReady", func(n *corev1.Node) bool { return !cluster.Ready(n) }); err != nil {
		return 0, 0, 0, err
	}
	if powerOns, err = e.floorAsk(ctx, vc, refs, "power-ons", func(ref string) (string, error) { return vc.PowerOn(ctx, ref, "") }); err != nil {
		return 0, 0, 0, err
	}
	err = e.floorNodes(ctx, names, "ready for work again", func(n *corev1.Node) bool {
		return cluster.Ready(n) && cluster.AdvertisedGPUs(n) != "0" && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return strings.HasPrefix(t.Key, "node.kubernetes.io/") // the node lifecycle controller's, while NotReady
		})
	})
	return suspends, powerOns, read, err
}

// floorNodes waits until every node of names is as want says.
func (e *Env) floorNodes(ctx context.Context, names []string, what string, want func(*corev1.Node) bool) error {
	return e.pollFor(ctx, 500*time.Millisecond, 5*time.Minute, "the day nodes to be "+what, func() (bool, error) {
		var list corev1.NodeList
		if err := e.Client.List(ctx, &list); err != nil {
			return false, err
		}
		ok := map[string]bool{}
		for i := range list.Items {
			ok[list.Items[i].Name] = want(&list.Items[i])
		}
		for _, name := range names {
			if !ok[name] {
				return false, nil
			}
		}
		return true, nil
	})
}

// floorAsk asks op of every VM of refs, as many at a time as the manager does, and
// returns how long until the last call returned; then it waits for every task to end
// (successfully).
func (e *Env) floorAsk(ctx context.Context, vc vsphere.Client, refs []string, what string, op func(ref string) (string, error)) (time.Duration, error) {
	ids, errs := make([]string, len(refs)), make([]error, len(refs))
	start := time.Now()
	execute.ForEach(len(refs), e.startsAtOnce(), func(i int) { ids[i], errs[i] = op(refs[i]) })
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("the floor's %s: %w", what, err)
	}
	pending := slices.DeleteFunc(ids, func(id string) bool { return id == "" })
	err := e.pollFor(ctx, 200*time.Millisecond, 5*time.Minute, "the floor's "+what+" to end", func() (bool, error) {
		infos, err := vc.Tasks(ctx, pending)
		if err != nil {
			return false, err
		}
		var left []string
		for _, id := range pending {
			switch infos[id].State {
			case vsphere.TaskError:
				return false, fmt.Errorf("the floor's %s: task %s: %s", what, id, infos[id].Error)
			case vsphere.TaskSuccess:
			default:
				left = append(left, id)
			}
		}
		pending = left
		return len(pending) == 0, nil
	})
	return took, err
}

// floorNodePatches patches an annotation onto n day nodes, as a cordon patches them
// (a merge patch carrying the node's resourceVersion, read again and tried again on a
// conflict with kwok's or the controller manager's own writes), at most
// MaxConcurrentWrites at once, and returns how long until the last patch returned
// (patches); then it cordons them the same way (cordons), uncordons them, untimed, and
// waits until the controller manager has taken its unschedulable taint off every one.
func (e *Env) floorNodePatches(ctx context.Context, n int) (patches, cordons time.Duration, err error) {
	var list corev1.NodeList
	if err := e.Client.List(ctx, &list); err != nil {
		return 0, 0, err
	}
	var day []*corev1.Node
	var names []string
	for i := range list.Items {
		if strings.HasPrefix(list.Items[i].Name, "day-") && len(day) < n {
			day = append(day, &list.Items[i])
			names = append(names, list.Items[i].Name)
		}
	}
	if patches, err = e.floorPatch(ctx, day, "node patches", func(n *corev1.Node) {
		metav1.SetMetaDataAnnotation(&n.ObjectMeta, "bench.gpupool.dev/floor", "patched")
	}); err != nil {
		return 0, 0, err
	}
	if cordons, err = e.floorPatch(ctx, day, "cordons", func(n *corev1.Node) { n.Spec.Unschedulable = true }); err != nil {
		return 0, 0, err
	}
	if _, err = e.floorPatch(ctx, day, "uncordons", func(n *corev1.Node) { n.Spec.Unschedulable = false }); err != nil {
		return 0, 0, err
	}
	err = e.floorNodes(ctx, names, "uncordoned", func(n *corev1.Node) bool {
		return !n.Spec.Unschedulable && !slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnschedulable })
	})
	return patches, cordons, err
}

// floorPatch makes change to every node of nodes, MaxConcurrentWrites at once, each a
// merge patch carrying the node's resourceVersion, read again and tried again (up to 5
// times) on a conflict, and returns how long until the last patch returned.
func (e *Env) floorPatch(ctx context.Context, nodes []*corev1.Node, what string, change func(*corev1.Node)) (time.Duration, error) {
	errs := make([]error, len(nodes))
	start := time.Now()
	execute.ForEach(len(nodes), execute.MaxConcurrentWrites, func(i int) {
		for attempt := 1; ; attempt++ {
			before := nodes[i].DeepCopy()
			change(nodes[i])
			if errs[i] = e.Client.Patch(ctx, nodes[i], client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); !apierrors.IsConflict(errs[i]) || attempt == 5 {
				return
			}
			if errs[i] = e.Client.Get(ctx, client.ObjectKeyFromObject(nodes[i]), nodes[i]); errs[i] != nil {
				return
			}
		}
	})
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("the floor's %s: %w", what, err)
	}
	return took, nil
}

// floorEvictions runs n pods on the CPU node (a Deployment, as the benchmark's
// workload is), evicts them all, at most MaxConcurrentWrites requests at once, and
// returns how long until every evicted pod was gone. It deletes the Deployment after.
func (e *Env) floorEvictions(ctx context.Context, n int) (time.Duration, error) {
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		return 0, err
	}
	replicas := int32(n)
	labels := map[string]string{"app": "floor"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "floor", Namespace: floorNamespace},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers:   []corev1.Container{{Name: "c", Image: "floor"}},
				NodeSelector: map[string]string{"node.gpupool.dev/cpu-only": "true"},
				Tolerations:  []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
			}}},
	}
	if err := e.Client.Create(ctx, d); err != nil {
		return 0, err
	}
	var pods []corev1.Pod
	running := func() (bool, error) {
		var err error
		pods, err = e.floorPods(ctx, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil })
		return len(pods) >= n, err
	}
	if err := e.pollFor(ctx, 500*time.Millisecond, 5*time.Minute, "the floor's pods to run", running); err != nil {
		return 0, err
	}
	evicted := pods[:n]
	errs := make([]error, len(evicted))
	start := time.Now()
	execute.ForEach(len(evicted), execute.MaxConcurrentWrites, func(i int) {
		if err := e.Client.SubResource("eviction").Create(ctx, &evicted[i], &policyv1.Eviction{}); !apierrors.IsNotFound(err) {
			errs[i] = err
		}
	})
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("the floor's evictions: %w", err)
	}
	left := map[string]bool{}
	for _, p := range evicted {
		left[p.Name] = true
	}
	gone := func() (bool, error) {
		still, err := e.floorPods(ctx, func(p *corev1.Pod) bool { return left[p.Name] })
		return len(still) == 0, err
	}
	if err := e.pollFor(ctx, 100*time.Millisecond, 5*time.Minute, "the floor's evicted pods to be gone", gone); err != nil {
		return 0, err
	}
	took := time.Since(start)
	// The floor's pods go before the switches start, so that they cost nothing there.
	if err := e.Client.Delete(ctx, d); err != nil {
		return 0, err
	}
	none := func() (bool, error) {
		all, err := e.floorPods(ctx, func(*corev1.Pod) bool { return true })
		return len(all) == 0, err
	}
	if err := e.pollFor(ctx, 500*time.Millisecond, 5*time.Minute, "the floor's pods to be deleted", none); err != nil {
		return 0, err
	}
	return took, nil
}

// floorPods lists the floor's pods that keep says.
func (e *Env) floorPods(ctx context.Context, keep func(*corev1.Pod) bool) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := e.Client.List(ctx, &list, client.InNamespace(floorNamespace)); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return !keep(&p) }), nil
}

// SwitchFloor is the shortest day -> night this environment allows: every evicted pod
// gone, as the environment alone takes for N of them, then the rest of one GPU's
// critical path (the bound without its one eviction). Zero without a floor.
func (r *BenchResult) SwitchFloor() time.Duration {
	if r.Floor.N == 0 {
		return 0
	}
	return r.Floor.EvictionsOut + r.BoundDayToNight - r.EvictionLatency
}

// FormatFloor prints each size's floor: the environment's own time for a switch's
// cordons, evictions and task starts, done alone, the switch floor they make, and day -> night
// against it.
func FormatFloor(rs []*BenchResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %-7s %-14s %-14s %-14s %-15s %-15s %-15s %-16s %-10s %-12s\n", "hosts", "nodes", "node patches", "cordons", "evictions gone", "suspends asked", "power-ons asked", "inventory read", "day>night floor", "day>night", "ratio floor")
	for _, r := range rs {
		if r.Floor.N == 0 {
			continue
		}
		f := r.SwitchFloor()
		fmt.Fprintf(&b, "%-6d %-7d %-14s %-14s %-14s %-15s %-15s %-15s %-16s %-10s %-12.2f\n", r.Hosts, r.Floor.N, r.Floor.NodePatches.Round(10*time.Millisecond),
			r.Floor.Cordons.Round(10*time.Millisecond), r.Floor.EvictionsOut.Round(10*time.Millisecond), r.Floor.Suspends.Round(10*time.Millisecond), r.Floor.PowerOns.Round(10*time.Millisecond),
			r.Floor.InventoryRead.Round(10*time.Millisecond), f.Round(100*time.Millisecond), r.DayToNight.Round(100*time.Millisecond), r.DayToNight.Seconds()/f.Seconds())
	}
	return b.String()
}
