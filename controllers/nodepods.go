package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
)

// nodePods holds the pods of the pools' nodes, one watch per node (a field selector
// spec.nodeName=<node>, as each kubelet watches its own pods), started when a pass
// matches the node to a pool and stopped when no pool has it any more. The manager's
// own cache holds only the pods not bound to a node (CacheOptions): what gpupool holds
// of pods follows the pools' nodes and the pending pods, not the cluster's pods.
//
// A pod on a pool's node that is deleted, finishes, or changes its do-not-disrupt
// annotation wakes the pools of its node (a drain waits for it; demand counts it).
type nodePods struct {
	cs kubernetes.Interface
	// ctx ends every watch (the manager's).
	ctx context.Context
	// wake hands the pools of a node to the pool controller and the demand watch.
	wake, demand chan event.GenericEvent

	// timeout is the shortest a watch lasts before it is renewed (nodePodsWatchTimeout);
	// clock paces the waits after failures.
	timeout time.Duration
	clock   clock.Clock

	mu      sync.Mutex
	watches map[string]*nodePodsWatch
	nextSub int
}

type nodePodsWatch struct {
	pods  *podStore
	stop  context.CancelFunc
	pools map[string]bool
	// subs are called, once, when a pod of the node goes or changes what matters
	// (notify), and when the watch stops (OnChange). np.mu guards them.
	subs map[int]func()
}

func newNodePods(ctx context.Context, cs kubernetes.Interface) *nodePods {
	return &nodePods{cs: cs, ctx: ctx, watches: map[string]*nodePodsWatch{}, timeout: nodePodsWatchTimeout, clock: clock.RealClock{},
		wake: make(chan event.GenericEvent, 1024), demand: make(chan event.GenericEvent, 1024)}
}

// track sets the nodes of a pool: watches start for its new nodes and stop for the
// nodes no pool has any more. nil releases the pool (deleted).
func (np *nodePods) track(pool string, nodes []string) {
	if np == nil {
		return
	}
	want := map[string]bool{}
	for _, n := range nodes {
		if n != "" {
			want[n] = true
		}
	}
	var stopped []func() // called once np.mu is released (OnChange)
	defer func() {
		for _, fn := range stopped {
			fn()
		}
	}()
	np.mu.Lock()
	defer np.mu.Unlock()
	for n, w := range np.watches {
		if w.pools[pool] && !want[n] {
			delete(w.pools, pool)
			if len(w.pools) == 0 {
				w.stop()
				stopped = append(stopped, w.takeSubs()...)
				delete(np.watches, n)
			}
		}
	}
	for n := range want {
		w := np.watches[n]
		if w == nil {
			w = np.start(n)
			np.watches[n] = w
		}
		w.pools[pool] = true
	}
}

// nodePodsWatchTimeout is the shortest a node's pod watch lasts before it is renewed
// (random up to twice as long). A pool of 1,280 nodes holds as many watches: at
// client-go's 5 minutes their renewals (a new stream, its goroutines and buffers, each
// 5-10 minutes) were, with the API server's bookmark a minute to each watch, most of the
// manager's CPU at rest (pprof at 64 hosts). The watches ask for no bookmarks: a bookmark
// only moves a quiet node's version on, so that a renewal can resume from it; without
// them, a renewal from a version the API server no longer keeps is refused (410) and the
// node's few pods are listed again, which wakes no pool when nothing changed
// (podStore.Replace). One list per node per renewal costs less than a bookmark per node
// per minute, on both sides of the watch.
const nodePodsWatchTimeout = 30 * time.Minute

// start begins the watch of a node's pods (runPodWatch: one goroutine per node).
func (np *nodePods) start(node string) *nodePodsWatch {
	ctx, cancel := context.WithCancel(np.ctx)
	store := newPodStore(func() { np.notify(node) })
	w := &nodePodsWatch{pods: store, stop: cancel, pools: map[string]bool{}}
	go runPodWatch(ctx, newAPIPods(np.cs, node), store, np.timeout, np.clock, pauseOn(np.clock))
	return w
}

// notify wakes the pools of the node, without blocking: a full channel already holds
// wake-ups of those pools' passes to come.
func (np *nodePods) notify(node string) {
	np.mu.Lock()
	var pools []string
	var subs []func()
	if w := np.watches[node]; w != nil {
		for p := range w.pools {
			pools = append(pools, p)
		}
		subs = w.takeSubs()
	}
	np.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
	for _, p := range pools {
		wakePool(np.wake, p)
		wakePool(np.demand, p)
	}
}

// wakePool hands a pool to a channel source without blocking. A full channel holds 1,024
// wake-ups of passes to come; one lost is covered by the pool's requeue.
func wakePool(ch chan<- event.GenericEvent, pool string) {
	select {
	case ch <- event.GenericEvent{Object: &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: pool}}}:
	default:
	}
}

// list returns the node's pods from its watch, if the node is watched and its list has
// synced.
func (np *nodePods) list(node string) ([]corev1.Pod, bool) {
	if np == nil {
		return nil, false
	}
	np.mu.Lock()
	w := np.watches[node]
	np.mu.Unlock()
	if w == nil || !w.pods.synced.Load() {
		return nil, false
	}
	return w.pods.pods(), true
}

// Drained tells whether the watched pods of node are gone but those a drain leaves
// alone (drain.Gone): the executor's DrainWatch, for the suspends after drains. A node
// whose pods are not watched, or not listed yet, is not known: a pass decides it.
func (np *nodePods) Drained(node string) (drained, known bool) {
	np.mu.Lock()
	w := np.watches[node]
	np.mu.Unlock()
	if w == nil || !w.pods.synced.Load() {
		return false, false
	}
	return drain.Gone(w.pods.pods()), true
}

// OnChange calls fn once, the next time a pod of node goes or changes what matters
// (notify), or its watch stops, unless stop is called first; at once, in a goroutine,
// when the node is not watched. fn runs in the watch's goroutine, np.mu released.
func (np *nodePods) OnChange(node string, fn func()) (stop func()) {
	np.mu.Lock()
	defer np.mu.Unlock()
	w := np.watches[node]
	if w == nil {
		go fn()
		return func() {}
	}
	id := np.nextSub
	np.nextSub++
	if w.subs == nil {
		w.subs = map[int]func(){}
	}
	w.subs[id] = fn
	return func() {
		np.mu.Lock()
		defer np.mu.Unlock()
		delete(w.subs, id)
	}
}

// takeSubs returns the watch's subscribers and forgets them; np.mu is held.
func (w *nodePodsWatch) takeSubs() []func() {
	if len(w.subs) == 0 {
		return nil
	}
	fns := make([]func(), 0, len(w.subs))
	for _, fn := range w.subs {
		fns = append(fns, fn)
	}
	w.subs = nil
	return fns
}

// watched is how many nodes' pods are watched (a gauge, the tests).
func (np *nodePods) watched() int {
	np.mu.Lock()
	defer np.mu.Unlock()
	return len(np.watches)
}

// nodePodsCluster is the drain's view of the cluster with the pods of pool nodes read
// from their watches, or, before a watch has synced (or without watches: the tests that
// call Reconcile directly), listed by field selector from reader, which must not be the
// manager's cache (it holds only unbound pods).
type nodePodsCluster struct {
	drain.Cluster
	np     *nodePods
	reader client.Reader
}

func (c nodePodsCluster) PodsOnNode(ctx context.Context, node string) ([]corev1.Pod, error) {
	if pods, ok := c.np.list(node); ok {
		return pods, nil
	}
	if c.reader == nil {
		return c.Cluster.PodsOnNode(ctx, node)
	}
	return drain.PodsOnNodeFrom(ctx, c.reader, node)
}
