package execute

import (
	"errors"
	"net/http"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrCapped is the outcome of a write the pass had no budget left for: not a failure,
// the step goes on in the next pass.
var ErrCapped = errors.New("deferred to the next pass: this pass has made its share of writes")

// Budget counts what a pass may still write, and what it wrote. It is shared by the
// goroutines a pass runs its writes on. A nil budget allows everything (passes that
// tests build by hand).
//
// A write is taken from the budget before it is made (NodeWrite, TakeEviction), so that
// the writes a pass runs concurrently never exceed the cap, and settled once it was
// tried (NodeWritten, EvictionDone): one the API server refused goes back.
type Budget struct {
	nodeWrites, evictions atomic.Int32
	// cordons is the allowance of the cordons ahead of drains, when they have one of
	// their own (ownCordons: WithCordons).
	cordons    atomic.Int32
	ownCordons bool
	capped     atomic.Bool
	// made counts the writes that succeeded.
	made atomic.Int32
}

// NewBudget allows a pass nodeWrites node writes and evictions evictions.
func NewBudget(nodeWrites, evictions int) *Budget {
	b := &Budget{}
	b.nodeWrites.Store(int32(nodeWrites))
	b.evictions.Store(int32(evictions))
	return b
}

// WithCordons gives the cordons ahead of drains (Cordon) an allowance of n of their own
// and returns b. Without it they are node writes like any.
func (b *Budget) WithCordons(n int) *Budget {
	b.cordons.Store(int32(n))
	b.ownCordons = true
	return b
}

// Cordon takes one cordon ahead of a drain from the budget: from the cordons' own
// allowance when they have one (WithCordons), else as a node write; false when none is
// left. A cordon from the own allowance still counts as a node write: the node writes
// left shrink by one each, to below none, so that a pass that cordoned its share of
// node writes makes no other node write.
func (b *Budget) Cordon() bool {
	switch {
	case b == nil:
		return true
	case !b.ownCordons:
		return b.NodeWrite()
	case !b.take(&b.cordons):
		return false
	}
	b.nodeWrites.Add(-1)
	return true
}

// CordonWritten settles a cordon taken with Cordon, as NodeWritten settles a node write.
func (b *Budget) CordonWritten(err error) {
	switch {
	case b == nil:
	case !b.ownCordons:
		b.NodeWritten(err)
	case err == nil:
		b.made.Add(1)
	case refused(err):
		b.cordons.Add(1)
		b.nodeWrites.Add(1)
	}
}

// NodeWrite takes one node write from the budget; false when none is left, and the
// pass then asks to be followed soon (the controller's afterCapped).
func (b *Budget) NodeWrite() bool { return b == nil || b.take(&b.nodeWrites) }

// NodeWritten settles a node write taken with NodeWrite, from the node patch's own error
// (not that of the step it belongs to): see settle.
func (b *Budget) NodeWritten(err error) {
	if b != nil {
		b.settle(&b.nodeWrites, err)
	}
}

// NodeUnwritten gives back a node write taken with NodeWrite that was not tried at all
// (what it depended on failed first).
func (b *Budget) NodeUnwritten() {
	if b != nil {
		b.nodeWrites.Add(1)
	}
}

// TakeEviction takes one eviction from the budget, as NodeWrite: the drain package's
// drain.Budget.
func (b *Budget) TakeEviction() bool { return b == nil || b.take(&b.evictions) }

// EvictionDone settles an eviction taken with TakeEviction (drain.Budget).
func (b *Budget) EvictionDone(err error) {
	if b != nil {
		b.settle(&b.evictions, err)
	}
}

func (b *Budget) take(left *atomic.Int32) bool {
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
func (b *Budget) settle(left *atomic.Int32, err error) {
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

// Capped tells whether the pass left writes for the next one.
func (b *Budget) Capped() bool { return b != nil && b.capped.Load() }

// Progressed tells whether a write of the pass succeeded.
func (b *Budget) Progressed() bool { return b == nil || b.made.Load() > 0 }
