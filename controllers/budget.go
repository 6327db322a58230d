package controllers

import (
	"sync"
	"time"

	"github.com/gpupool/gpupool/internal/execute"
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
// the writes still run execute.MaxConcurrentWrites (16) at a time, and a pool of 1,024 workers
// still ends a pass after at most 256 of each. The client's rate limiter (the manager's
// QPS) paces the writes, not the cap.
//
// The cordons ahead of drains have 1,024 of their own, a layout's most workers
// (execute.Budget.WithCordons): nothing is evicted, parked or started for a drained
// worker before every node to drain is cordoned (execute's cordonAhead), so spreading
// them over passes bought nothing but a full read of vCenter and the cluster between
// every 256 (start -> cordon p99 13-14 s at 64 hosts, 1,024 nodes to cordon, against
// 6.3-7 s for as many patches from a bare client: docs/performance.md). They still
// count as node writes: a pass that cordons 256 or more makes no other node write. The
// parked marks of the suspends a pass hands out are not counted: their starts make them
// past the pass, execute.MaxConcurrentWrites of a pool at once (execute.Starts.mark).
const (
	maxNodeWritesPerPass = 256
	maxCordonsPerPass    = 1024
	maxEvictionsPerPass  = 256
	// requeueCapped is how soon a pass that hit a cap and made progress is followed by
	// the next.
	requeueCapped = time.Millisecond
	// maxCappedBackoff bounds the back-off of capped passes that make no progress.
	maxCappedBackoff = time.Minute
)

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
func (c *stallCount) next(pool string, after time.Duration, b *execute.Budget) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	after, n := afterCapped(after, b.Capped(), b.Progressed(), c.n[pool])
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
