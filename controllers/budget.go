package controllers

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Per-pass caps. A pass that would write more waits for the next pass, which is asked
// for at once (requeueCapped) when the pass made progress: a pool's worker is never held
// for long, and every pass ends with a status patch, so progress shows as it happens. A
// capped pass whose writes all failed backs off instead (afterCapped).
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
	// requeueCapped is how soon a pass that hit a cap and made progress is followed by
	// the next.
	requeueCapped = time.Millisecond
	// maxCappedBackoff bounds the back-off of capped passes that make no progress.
	maxCappedBackoff = time.Minute
)

// errCapped is the outcome of a write the pass had no budget left for: not a failure,
// the step goes on in the next pass.
var errCapped = errors.New("deferred to the next pass: this pass has made its share of writes")

// passBudget counts what a pass may still write, and what it wrote. It is shared by the
// goroutines a pass runs its writes on. A nil budget allows everything (passes that
// tests build by hand).
//
// A write is taken from the budget before it is made (nodeWrite, TakeEviction), so that
// the writes a pass runs concurrently never exceed the cap, and settled once it was
// tried (nodeWritten, EvictionDone): one the API server refused goes back.
type passBudget struct {
	nodeWrites, evictions atomic.Int32
	capped                atomic.Bool
	// made counts the writes that succeeded.
	made atomic.Int32
}

func newPassBudget(nodeWrites, evictions int) *passBudget {
	b := &passBudget{}
	b.nodeWrites.Store(int32(nodeWrites))
	b.evictions.Store(int32(evictions))
	return b
}

// nodeWrite takes one node write from the budget; false when none is left, and the
// pass then asks to be followed soon (afterCapped).
func (b *passBudget) nodeWrite() bool { return b == nil || b.take(&b.nodeWrites) }

// nodeWritten settles a node write taken with nodeWrite, from the node patch's own error
// (not that of the step it belongs to): see settle.
func (b *passBudget) nodeWritten(err error) {
	if b != nil {
		b.settle(&b.nodeWrites, err)
	}
}

// nodeUnwritten gives back a node write taken with nodeWrite that was not tried at all
// (what it depended on failed first).
func (b *passBudget) nodeUnwritten() {
	if b != nil {
		b.nodeWrites.Add(1)
	}
}

// TakeEviction takes one eviction from the budget, as nodeWrite: the drain package's
// drain.Budget.
func (b *passBudget) TakeEviction() bool { return b == nil || b.take(&b.evictions) }

// EvictionDone settles an eviction taken with TakeEviction (drain.Budget).
func (b *passBudget) EvictionDone(err error) {
	if b != nil {
		b.settle(&b.evictions, err)
	}
}

func (b *passBudget) take(left *atomic.Int32) bool {
	if left.Add(-1) < 0 {
		left.Add(1)
		b.capped.Store(true)
		return false
	}
	return true
}

// settle records a write's outcome. A write that succeeded is progress. One the API
// server refused (it answered 4xx: forbidden, invalid, conflict, gone, too many
// requests) changed nothing, and goes back to the budget: failures must not use up the
// pass's share, nor make the pass look capped for nothing. One without such an answer
// (a timeout, a lost connection, a 5xx) may have been made, and stays spent: the cap
// bounds what a pass may have done to the cluster.
func (b *passBudget) settle(left *atomic.Int32, err error) {
	switch {
	case err == nil:
		b.made.Add(1)
	case refused(err):
		left.Add(1)
	}
}

// refused tells whether the API server answered a write with an error that says it
// made nothing of it: a 4xx status but 408 (the request timed out, maybe after it was
// applied).
func refused(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	code := st.Status().Code
	return code >= 400 && code < 500 && code != http.StatusRequestTimeout
}

// wasCapped tells whether the pass left writes for the next one.
func (b *passBudget) wasCapped() bool { return b != nil && b.capped.Load() }

// progressed tells whether a write of the pass succeeded.
func (b *passBudget) progressed() bool { return b == nil || b.made.Load() > 0 }

// afterCapped decides when a pass comes back, from the requeue its phases asked for
// (after), whether it was capped and made progress, and how many capped passes in a
// row before it made none (stalls); it returns the new count. A capped pass that made
// progress is followed at once: the writes it left are due. One that made none would,
// followed at once, read vCenter and fail the same writes every millisecond: it comes
// back after a back-off that doubles with each such pass in a row, from requeueStep to
// maxCappedBackoff, whatever its phases asked. What they asked for (a step's retry in
// a second, say) assumed that the writes go through; a boundary or a task's end is
// then late by the back-off at most, and a task's end wakes the pool anyway (taskWatch).
//
// Note: an explicit back-off rather than an error for controller-runtime's rate limiter:
// the pass did not fail (its step errors are in the status, and an error would skip
// observedGeneration), the limiter starts at 5 ms, which is still a busy loop for the
// first passes, and grows to 16 min, too slow to notice that writes work again.
func afterCapped(after time.Duration, capped, progressed bool, stalls int) (time.Duration, int) {
	switch {
	case !capped:
		return after, 0
	case progressed:
		return requeueCapped, 0
	}
	return min(requeueStep<<min(stalls, 6), maxCappedBackoff), stalls + 1
}

// stallCount keeps, per pool, the count afterCapped needs: how many capped passes in a
// row made no write. It is the only memory a pass leaves to the next one, and losing it
// (a restart) only starts the back-off over.
type stallCount struct {
	mu sync.Mutex
	n  map[string]int
}

// next applies afterCapped to a pass of pool and records the new count.
func (c *stallCount) next(pool string, after time.Duration, b *passBudget) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, n := afterCapped(after, b.wasCapped(), b.progressed(), c.n[pool])
	if n == 0 {
		delete(c.n, pool)
		return after
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[pool] = n
	return after
}

// forget drops the count of a pool that is gone.
func (c *stallCount) forget(pool string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.n, pool)
}
