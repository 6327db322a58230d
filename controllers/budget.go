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
// 256 node writes and 256 evictions. Each pass also pays a fixed cost (it reads the
// pool's inventory from vCenter and lists its nodes and pods), and a smaller cap
// multiplies it: measured with 64 on 'make bench-transition' at 16 hosts (320 nodes to
// cordon, 256 pods to evict), the last cordon came at 53 s instead of 8.5 s and a switch
// took 1m29s instead of 50 s. With 256 such a switch needs two passes per kind of write;
// the writes still run maxConcurrentDrains (16) at a time, and a pool of 1,024 workers
// still ends a pass after at most 256 of each. The client's rate limiter (the manager's
// QPS) paces the writes, not the cap.
const (
	maxNodeWritesPerPass = 256
	maxEvictionsPerPass  = 256
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

// TakeEviction takes one eviction from the budget, as nodeWrite: the drain package's
// drain.Budget.
func (b *passBudget) TakeEviction() bool { return b == nil || b.take(&b.evictions) }

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
