package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/nodes"
)

// readyFollow relabels and uncordons a node the moment it is ready for work, when that
// is all its worker has left: the pool's last pass planned WaitNodeReady as the worker's
// due step, or its power-on and then WaitNodeReady, and only Relabel and Uncordon after
// it (readyArms). The pass decided those steps; the node's readiness, seen on the node
// watch, is only the precondition it waited for. A node armed with its VM's power-on
// still to come must first be seen not Ready, by the follower or in the arming pass's
// own read (readNotReady): a node still Ready from before its VM went down (the node
// lifecycle controller marks it NotReady only a grace period later) says nothing of the
// VM now. Without the follower the node waited for the pass in flight to end and for the
// next one's read of vCenter (`ready -> relabelled` in make bench-transition: seconds at
// 64 hosts).
//
// A node step is made once: the pass's own relabel or uncordon of an armed node claims
// the arm first (claim), and a step the follower made while a pass ran is skipped by
// that pass, whose read of the node may be older than the follower's write. Nothing
// here touches vSphere or the pool's status: the next pass reads the node as it is.
//
// An arm lives until the pool's next pass ends: that pass arms what its own plan waits
// for, and a pass that stops before it acts (paused, vCenter unreadable, settled)
// leaves none. A pool whose spec changed since the arming pass (its generation), that
// is paused or being deleted, fires nothing.
type readyFollow struct {
	ctx context.Context
	w   readyWriter
	// sem bounds the node writes in flight, as a pass bounds its own.
	sem chan struct{}

	mu sync.Mutex
	// firing counts each pool's writes in flight (forget waits for a deleted pool's, a
	// pass for its own pool's: settle); landed is signalled when one ends.
	firing map[string]int
	landed *sync.Cond
	// passes counts each pool's passes begun (begin): a write's sequence number.
	passes map[string]uint64
	// arms are by node name: a node is one pool's worker (ambiguity holds).
	arms map[string]*armEntry
}

// readyWriter is what the follower reads and writes through: the reconciler
// (readyarms.go), whose node writes take over the pool's state-label batch's writes to
// the node not yet started, and wait for those under way (takeNode).
type readyWriter interface {
	readyPool(ctx context.Context, name string) (*gpupoolv1.GPUPoolProfile, error)
	readyNode(ctx context.Context, name string) (*corev1.Node, error)
	// writeReady patches node n with the step (a conflict read again) and tells it
	// (events; a relabel releases the node's Machine).
	writeReady(ctx context.Context, pool *gpupoolv1.GPUPoolProfile, n *corev1.Node, a readyArm, st nodeStep) error
}

// readyArm is what a pass leaves for the follower about one worker: the node it waits
// for, what ready for work means for it (as observe judged it: readiness and the GPUs
// wanted, without DRA's published devices, so the follower is never less strict), and
// what the plan does once it is (relabel with meta, uncordon), with the state label
// the node then gets (done: the worker has no step left; pending: its uncordon is).
type readyArm struct {
	pool      string
	gen       int64
	vm        string
	node      string
	layout    string
	meta      nodes.Meta
	relabel   bool
	uncordon  bool
	readiness gpupoolv1.ReadinessSpec
	want      nodes.GPUWant
	done      string
	pending   string
	// afterPowerOn: armed with the VM's power-on still to come or in flight; the node
	// must be seen not Ready before its Ready counts. readNotReady: the arming pass read
	// it not Ready, after it saw the VM down or its power-on asked (observe lists the
	// nodes after vCenter's inventory, and the tasks before both), so that any Ready
	// after that read is the power-on's. (Both reads are of the manager's node cache,
	// which the follower's watch also feeds: a cache behind by a whole power cycle
	// would mislead either the same way.) Without it, a node that came up between the
	// pass's read and the arm was never seen not Ready by the follower, and waited for
	// the next pass.
	afterPowerOn, readNotReady bool
}

type armState int

const (
	armWaiting armState = iota // waiting for the node to be ready
	armClaimed                 // the pass does the step itself
	armFiring                  // the follower's write is in flight
	armFired                   // the follower's write went through
)

type armEntry struct {
	readyArm
	state armState
	// seq is the pool's pass count when the write went through (armFired); readAt, the
	// node's resourceVersion the write started from; last: it did the worker's last step.
	seq    uint64
	readAt string
	last   bool
	// sawNotReady: the node was seen not Ready since it was armed, or by an arming
	// pass's read (afterPowerOn).
	sawNotReady bool
}

func newReadyFollow(ctx context.Context, w readyWriter) *readyFollow {
	f := &readyFollow{ctx: ctx, w: w, sem: make(chan struct{}, execute.MaxConcurrentWrites),
		passes: map[string]uint64{}, arms: map[string]*armEntry{}, firing: map[string]int{}}
	f.landed = sync.NewCond(&f.mu)
	return f
}

// begin counts a pass of the pool and returns its number (0 without a follower).
func (f *readyFollow) begin(pool string) uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes[pool]++
	return f.passes[pool]
}

// set replaces the pool's arms with those of its pass number seq (nil: none), and fires
// the new ones whose node is ready already (it became so after the pass read it), and
// those the pass read not Ready for the first time (readNotReady). A pass
// sets them before its first node write, so that no arm of an older plan (the layout
// wanted changed with the schedule or demand, the spec did not) fires on a node the pass
// writes, and again when it ends. An arm still waiting is renewed in place: every
// update of its node since it was armed was considered (but for the node's first read
// not Ready, which is considered again). A write in flight stays, and so
// does one that went through since the last pass began: a pass may read the node from
// a cache that does not show it yet (claim).
func (f *readyFollow) set(pool string, seq uint64, arms []readyArm) {
	if f == nil {
		return
	}
	f.mu.Lock()
	wanted := make(map[string]bool, len(arms))
	for _, a := range arms {
		wanted[a.node] = true
	}
	for node, e := range f.arms {
		kept := e.state == armFiring || (e.state == armFired && e.seq+1 >= seq) || (e.state == armWaiting && wanted[node])
		if e.pool == pool && !kept {
			delete(f.arms, node)
		}
	}
	var added []string
	for _, a := range arms {
		switch e := f.arms[a.node]; {
		case e == nil:
			f.arms[a.node] = &armEntry{readyArm: a, sawNotReady: a.readNotReady}
			added = append(added, a.node)
		case e.pool == pool && e.state == armWaiting:
			e.readyArm = a
			if a.readNotReady && !e.sawNotReady {
				// The node's updates since the arm were not counted: consider it now.
				e.sawNotReady = true
				added = append(added, a.node)
			}
		}
	}
	f.mu.Unlock()
	for _, name := range added {
		if n, err := f.w.readyNode(f.ctx, name); err == nil {
			f.consider(n)
		}
	}
}

// forget drops the pool's arms and waits for the follower's writes in flight (a pool
// being deleted takes its marks off its nodes after them).
func (f *readyFollow) forget(pool string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	for node, e := range f.arms {
		if e.pool == pool {
			delete(f.arms, node)
		}
	}
	delete(f.passes, pool)
	for f.firing[pool] > 0 {
		f.landed.Wait()
	}
	delete(f.firing, pool)
	f.mu.Unlock()
}

// claim is asked by pass number seq of the pool before it relabels or uncordons node,
// which it read at resourceVersion rv: skip says the follower is making the step, or
// made it after the pass read the node (during the pass, or from the very version the
// pass read: its cache did not show the write yet); done, that the write did the
// worker's last step. An arm still waiting is the pass's from now on.
func (f *readyFollow) claim(pool, node, rv string, seq uint64) (skip, done bool) {
	if f == nil {
		return false, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.arms[node]
	if e == nil || e.pool != pool {
		return false, false
	}
	if e.state == armWaiting {
		e.state = armClaimed
		return false, false
	}
	return madeSince(e, rv, seq), e.state == armFired && e.last
}

// madeDuring tells whether the follower is writing node's step, or wrote it since pass
// number seq of the pool read it at resourceVersion rv: the pass does not write the
// node's marks from its older read (publishMarks).
func (f *readyFollow) madeDuring(pool, node, rv string, seq uint64) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.arms[node]
	return e != nil && e.pool == pool && madeSince(e, rv, seq)
}

func madeSince(e *armEntry, rv string, seq uint64) bool {
	return e.state == armFiring || (e.state == armFired && (e.seq >= seq || rv == e.readAt))
}

// settle waits until none of the pool's writes is in flight: a pass that is about to
// write nodes lets the follower's writes of an older plan land first.
func (f *readyFollow) settle(pool string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.firing[pool] > 0 {
		f.landed.Wait()
	}
}

// consider fires the node's arm when the node is ready for work and the step changes it.
func (f *readyFollow) consider(n *corev1.Node) {
	if f == nil {
		return
	}
	f.mu.Lock()
	e := f.arms[n.Name]
	if e == nil || e.state != armWaiting {
		f.mu.Unlock()
		return
	}
	if e.afterPowerOn && !e.sawNotReady {
		e.sawNotReady = !nodes.Ready(n)
		f.mu.Unlock()
		return // not Ready now, or not known to have gone down
	}
	st, ok := readyStep(e.readyArm, n)
	if !ok {
		f.mu.Unlock()
		return
	}
	e.state = armFiring
	f.firing[e.pool]++
	f.mu.Unlock()
	go f.fire(e, nodes.WriteCopy(n), st)
}

// readyWriteTimeout bounds a write of the follower, as reconcileTimeout bounds a pass:
// a pass that settles the pool's writes, or a deleted pool's forget, waits for it.
const readyWriteTimeout = 2 * time.Minute

// fire writes the step, unless the pool changed since the arming pass.
func (f *readyFollow) fire(e *armEntry, n *corev1.Node, st nodeStep) {
	defer f.ended(e.pool)
	ctx, cancel := context.WithTimeout(f.ctx, readyWriteTimeout)
	defer cancel()
	select {
	case f.sem <- struct{}{}:
	case <-ctx.Done():
		f.drop(e)
		return
	}
	defer func() { <-f.sem }()
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("pool", e.pool, "node", e.node))
	readAt := n.ResourceVersion
	pool, err := f.w.readyPool(ctx, e.pool)
	if err != nil || pool.Generation != e.gen || pool.Spec.Paused || !pool.DeletionTimestamp.IsZero() {
		f.drop(e)
		readySteps.WithLabelValues(e.pool, "dropped").Inc()
		return
	}
	if err := f.w.writeReady(ctx, pool, n, e.readyArm, st); err != nil {
		// The next pass plans the step again from what it reads.
		log.FromContext(ctx).Info("Could not relabel a node ready for work; the next pass will", "error", err.Error())
		f.drop(e)
		readySteps.WithLabelValues(e.pool, "failed").Inc()
		return
	}
	f.mu.Lock()
	e.state, e.seq, e.readAt, e.last = armFired, f.passes[e.pool], readAt, st.last
	f.mu.Unlock()
	readySteps.WithLabelValues(e.pool, "done").Inc()
}

// ended counts a write of the pool's no longer in flight.
func (f *readyFollow) ended(pool string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.firing[pool]--; f.firing[pool] <= 0 {
		delete(f.firing, pool)
	}
	f.landed.Broadcast()
}

// drop removes an arm whose write was not made: the next pass plans the step.
func (f *readyFollow) drop(e *armEntry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.arms[e.node] == e {
		delete(f.arms, e.node)
	}
}

// nodeStep is the follower's write to a node: the change, whether it uncordons the node
// and whether it does the worker's last step.
type nodeStep struct {
	change         func(*corev1.Node)
	uncordon, last bool
}

// readyStep decides what the follower writes to node n for arm a: nothing (ok false)
// until n is ready for work as observe judges it, or when n already carries the step;
// else the step. A relabel uncordons in the same patch only when the node is still
// ready once it carries the layout's labels (as readyOnceRelabelled decides for a
// pass); otherwise the next pass uncordons it. The arming pass wanted no draining-soon
// warning on the node (readyArmOf), so the step takes one off: it takes over the batch's
// write to the node not yet made (takeNode), which may have been to take it off.
func readyStep(a readyArm, n *corev1.Node) (nodeStep, bool) {
	if len(nodes.ReadinessGaps(n, a.readiness, a.want, 0)) > 0 {
		return nodeStep{}, false
	}
	after := n.DeepCopy()
	if a.relabel {
		nodes.ApplyMeta(after, a.meta)
	}
	uncordon := a.uncordon && len(nodes.ReadinessGaps(after, a.readiness, a.want, 0)) == 0
	last := uncordon || !a.uncordon
	state := a.pending
	if last {
		state = a.done
	}
	change := func(n *corev1.Node) {
		if a.relabel {
			nodes.ApplyMeta(n, a.meta)
		}
		if uncordon {
			nodes.Uncordon(n)
		}
		nodes.SetState(n, state, a.pool)
		if nodes.HasAnyWarning(n) {
			nodes.SetWarning(n, time.Time{}, false)
		}
	}
	change(after)
	if equality.Semantic.DeepEqual(after, n) {
		return nodeStep{}, false
	}
	return nodeStep{change: change, uncordon: uncordon && nodes.CordonedByUs(n), last: last}, true
}

// String names an arm in test failures.
func (a readyArm) String() string {
	return fmt.Sprintf("%s/%s node %s relabel=%t uncordon=%t", a.pool, a.vm, a.node, a.relabel, a.uncordon)
}

// watch hands the node updates that change what readiness reads (nodes.Changed, or the
// node's Ready condition) and the nodes added to the follower, from the node informer of informers (the manager's
// cache).
func (f *readyFollow) watch(ctx context.Context, informers cache.Informers) error {
	inf, err := informers.GetInformer(ctx, &corev1.Node{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("the node informer for the ready follower: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if n, ok := o.(*corev1.Node); ok {
				f.consider(n)
			}
		},
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			// A parked node going NotReady wakes no pool (nodes.Changed), but an arm
			// after a power-on waits to see its node go down first (consider).
			if ok1 && ok2 && (nodes.Changed(on, nn) || nodes.Ready(on) != nodes.Ready(nn)) {
				f.consider(nn)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("watching nodes for the ready follower: %w", err)
	}
	return nil
}
