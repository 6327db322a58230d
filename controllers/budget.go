package controllers

import (
	"errors"
	"sync/atomic"
	"time"
)

// Per-pass caps. A pass that would write more waits for the next pass, which is asked
// for at once (requeueCapped): a pool's worker is never held for long, and every pass
// ends with a status patch, so progress shows as it happens.
//
// 64 node writes: the writes run maxConcurrentDrains (16) at a time, so 64 are four
// rounds of patches; at the 20-100 ms a patch takes on a busy API server that is well
// under the 1 s a pass of a 320-VM pool may take, and a switch of 1,024 nodes still
// needs only 16 passes per kind of write. The client's rate limiter (the manager's
// QPS) paces the passes, not the cap.
//
// 64 evictions: an eviction is a write too, and the one the disruption controller
// answers slowest (a PodDisruptionBudget not yet processed waits up to
// evictionTimeout); sixty-four of them, sixteen at a time, keep the pass short and keep
// the rate at which pods are put on the scheduler's queue at a few hundred a second.
const (
	maxNodeWritesPerPass = 64
	maxEvictionsPerPass  = 64
	// requeueCapped is how soon a pass that hit a cap is followed by the next.
	requeueCapped = time.Millisecond
)

// errCapped is the outcome of a write the pass had no budget left for: not a failure,
// the step goes on in the next pass.
var errCapped = errors.New("deferred to the next pass: this pass has made its share of writes")

// passBudget counts what a pass may still write. It is shared by the goroutines a pass
// runs its writes on. A nil budget allows everything (passes that tests build by hand).
type passBudget struct {
	nodeWrites, evictions atomic.Int32
	capped                atomic.Bool
}

func newPassBudget(nodeWrites, evictions int) *passBudget {
	b := &passBudget{}
	b.nodeWrites.Store(int32(nodeWrites))
	b.evictions.Store(int32(evictions))
	return b
}

// nodeWrite takes one node write from the budget; false when none is left, and the
// pass then asks to be followed at once.
func (b *passBudget) nodeWrite() bool { return b == nil || b.take(&b.nodeWrites) }

// eviction takes one eviction from the budget, as nodeWrite.
func (b *passBudget) eviction() bool { return b == nil || b.take(&b.evictions) }

func (b *passBudget) take(left *atomic.Int32) bool {
	if left.Add(-1) < 0 {
		left.Add(1)
		b.capped.Store(true)
		return false
	}
	return true
}

// wasCapped tells whether the pass left writes for the next one.
func (b *passBudget) wasCapped() bool { return b != nil && b.capped.Load() }
