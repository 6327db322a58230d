package controllers

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/nodes"
)

// stateBatches writes the node marks a pass publishes (publishMarks: state labels and
// draining-soon warnings) past that pass (issue 37: a quarter of act at 64 hosts went to
// the labels, and the warnings taken off drained nodes two fifths of act at 16 hosts),
// one batch per pool at a time.
//
// The marks are derived from the workers' steps and the plans: no step is decided from
// them, and a pass that finds one missing writes it again. What must not happen is a label of an
// earlier pass landing over the patch of a later one (a step's own marks, an uncordon of
// an abort, the marks taken off a deleted pool's nodes). So every other write to a node
// waits for the batch's write to that node (waitNode, from patchNode), and a batch runs
// between two passes, overlapping the next pass's start, its observe and its steps on
// other nodes. The pass waits for the whole batch only where it needs what the batch
// found: before it decides its own marks (publishMarks: which landed, which failed),
// and on the ways a pass stops early (an invalid spec, the pause, vCenter out of reach;
// the deletion and the NotFound path wait too). A batch's nodes are copies: the pass
// that made it may end before the batch does. A batch ends within stateBatchTimeout, so
// a slow API server cannot hold the next pass longer than a pass may take.
type stateBatches struct {
	ctx   context.Context
	mu    sync.Mutex
	pools map[string]*stateBatch
	// nodes are the batches' writes not yet returned, by node (a node some pool marked
	// may be written by another's batch too).
	nodes map[string][]*batchWrite
}

// batchWrite is a batch's write to one node.
type batchWrite struct {
	pool string
	// done is closed when the write has returned, or was taken over (takeNode).
	done chan struct{}
	// started: the patch is under way; skipped: the pool's ready follower took it over
	// before it started, with a write of its own that carries a newer state.
	started, skipped bool
}

// stateBatch is one pass's node-mark patches of a pool.
type stateBatch struct {
	done chan struct{}
	// errs and landed are set before done is closed.
	errs   []error
	landed map[string]landedState
}

// landedState is what a batch wrote to a node, and the node's resourceVersion as the
// pass that decided it had read it: a later pass that read the node at that same version
// read it before the write landed, and need not write it again.
type landedState struct {
	readAt string
	marks  nodeMarks
}

// nodeMarks is what a pass publishes on one node (publishMarks): its state label, with
// the pool as the owner of its marks ("": left as it is), and its draining-soon warning
// (left as it is unless warn.set), in one patch.
type nodeMarks struct {
	state string
	warn  warnChange
}

// warnChange is a draining-soon warning to write: announcing a drain at at (on), or
// taken off (!on); set says that the warning is written at all.
type warnChange struct {
	set, on bool
	at      time.Time
}

// apply puts the marks on n, a node of pool.
func (m nodeMarks) apply(n *corev1.Node, pool string) {
	if m.state != "" {
		nodes.SetState(n, m.state, pool)
	}
	if m.warn.set {
		nodes.SetWarning(n, m.warn.at, m.warn.on)
		if m.warn.on {
			nodes.SetMarksOwner(n, pool)
		}
	}
}

// stateBatchTimeout bounds a batch, as reconcileTimeout bounds a pass.
const stateBatchTimeout = reconcileTimeout

// newStateBatches makes the batches of a manager; they end with ctx.
func newStateBatches(ctx context.Context) *stateBatches {
	return &stateBatches{ctx: ctx, pools: map[string]*stateBatch{}, nodes: map[string][]*batchWrite{}}
}

// start runs the patch of each node (a copy of it, as the pass read it) to its marks
// wants[i] past the pass, at most execute.MaxConcurrentWrites at once. The pool must
// have no batch running (the pass waited for it).
func (b *stateBatches) start(pool string, copies []*corev1.Node, wants []nodeMarks, patch func(context.Context, *corev1.Node, nodeMarks) error) {
	b.wait(pool) // never two batches of a pool at once (a pass has waited already: waitStates)
	sb := &stateBatch{done: make(chan struct{})}
	writes := make([]*batchWrite, len(copies))
	b.mu.Lock()
	b.pools[pool] = sb
	for i, n := range copies {
		writes[i] = &batchWrite{pool: pool, done: make(chan struct{})}
		b.nodes[n.Name] = append(b.nodes[n.Name], writes[i])
	}
	b.mu.Unlock()
	go func() {
		defer close(sb.done)
		ctx, cancel := context.WithTimeout(b.ctx, stateBatchTimeout)
		defer cancel()
		errs := make([]error, len(copies))
		readAt := make([]string, len(copies))
		for i, n := range copies {
			readAt[i] = n.ResourceVersion
		}
		execute.ForEach(len(copies), execute.MaxConcurrentWrites, func(i int) {
			w := writes[i]
			b.mu.Lock()
			w.started = !w.skipped
			b.mu.Unlock()
			if w.started {
				errs[i] = patch(ctx, copies[i], wants[i])
			}
			if !w.skipped {
				close(w.done)
			}
			b.mu.Lock()
			name := copies[i].Name
			if b.nodes[name] = slices.DeleteFunc(b.nodes[name], func(o *batchWrite) bool { return o == w }); len(b.nodes[name]) == 0 {
				delete(b.nodes, name)
			}
			b.mu.Unlock()
		})
		sb.landed = map[string]landedState{}
		for i, err := range errs {
			switch {
			case writes[i].skipped:
			case err != nil:
				sb.errs = append(sb.errs, err)
			default:
				sb.landed[copies[i].Name] = landedState{readAt: readAt[i], marks: wants[i]}
			}
		}
	}()
}

// waitNode waits until the batches' writes to the node under way, if any, have
// returned: a write of the pass to the node then lands after them.
func (b *stateBatches) waitNode(node string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	ws := slices.Clone(b.nodes[node])
	b.mu.Unlock()
	for _, w := range ws {
		<-w.done
	}
}

// takeNode is waitNode for the pool's ready follower, whose write carries the node's
// newer state and takes its warning off (readyStep): the pool's batch writes to the
// node not yet started are not made (their marks are the arming pass's, older than the
// follower's), and it waits only for those under way and for other pools'. Without it a
// node ready for work waited for its place in a batch of hundreds of marks (seconds at
// 64 hosts). A write taken over is neither landed nor failed: the next pass reads the
// node and writes the marks it misses, unless the follower wrote it since that read
// (madeDuring).
func (b *stateBatches) takeNode(node, pool string) {
	if b == nil {
		return
	}
	for _, w := range b.takeOver(node, pool) {
		<-w.done
	}
}

// takeOver marks the pool's batch writes to the node not yet started as not to be
// made, and returns the writes to wait for.
func (b *stateBatches) takeOver(node, pool string) []*batchWrite {
	var wait []*batchWrite
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.nodes[node] {
		if w.pool == pool && !w.started && !w.skipped {
			w.skipped = true
			close(w.done)
			continue
		}
		wait = append(wait, w)
	}
	return wait
}

// wait waits until the pool's batch, if any, has ended, forgets it and returns what it
// found: the patches that failed, and the marks it wrote.
func (b *stateBatches) wait(pool string) ([]error, map[string]landedState) {
	if b == nil {
		return nil, nil
	}
	b.mu.Lock()
	sb := b.pools[pool]
	delete(b.pools, pool)
	b.mu.Unlock()
	if sb == nil {
		return nil, nil
	}
	<-sb.done
	return sb.errs, sb.landed
}
