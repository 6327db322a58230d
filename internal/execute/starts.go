package execute

import (
	"context"
	"sync"
	"time"

	"github.com/gpupool/gpupool/vsphere"
)

// Starts asks vCenter to start the vSphere tasks of passes past the passes that queue
// them (issue 37: the starts were a third of act, and a precondition met meanwhile
// waited for them to end). A pass records the intents of its tasks on the workers; once
// its status write has stored them (the pass's one write: Handout) the starts go to
// Starts, and the pass ends; the next pass takes each answer
// (take, from Follower.Check, before it reads the inventory) and records the task id,
// or the failure, on the worker, as the pass that started the task did before; the
// answer is forgotten once that pass's status write stored it (Commit), and taken again
// by the next pass when the write failed.
//
// Exactly once: a start is handed out only once its intent is stored, is recorded, by
// pool and worker with its intent's operation and time, before the pass that hands it
// out ends, and runs once. A pass that finds the intent of a start still in flight
// counts the VM's task as in flight (the plan gives the VM no step) and does not ask
// vCenter for it (resolveIntent would find no task yet and plan the step again). An
// intent with no record (the process restarted) is resolved from vCenter, as before.
// An answer taken again after a failed status write tells its event again.
//
// Order: a host's power-ons go one after the other in the plan's order (startGroups), and
// a pass's power-ons of a host wait for an earlier pass's, in the order the passes handed
// them out, which they may need placed first; the other starts each on their own. At most
// Limit starts of a pool are asked at once, each start taking a slot of its own: a start
// waiting for one that frees a GPU (a park) or readies a VM (a reconfigure) goes before
// the waiting power-ons (startSlots).
//
// Not asked: a start still queued when its pool is paused, its transition aborted or
// the pool deleted (Cancel), or queued longer than StartTimeout (a vCenter that answers
// slowly), is not asked at all: it is answered "not asked", and the next pass clears its
// intent and plans again from what it observes. Nothing was sent to vCenter, so the
// operation still happens once; and no start acts on a decision older than that. A
// start on a condition (ahead.go, afterdrains.go) counts StartTimeout from the last pass
// that planned the same switch while its condition was pending (Renew, renew.go).
type Starts struct {
	// Limit bounds the starts of a pool asked at once; 0: MaxConcurrentStarts.
	Limit int
	// Wake is told the pool once all the starts a pass handed out have been answered, so
	// that a pass records their task ids (and the task watch follows them). It must not
	// block.
	Wake func(pool string)
	// Now is the clock a start's queueing is measured on (nil: time.Now; the tests).
	Now func() time.Time
	// after calls f in d on the machine's timer, and stop keeps it from doing so (nil:
	// time.AfterFunc; the tests fire it themselves).
	after func(d time.Duration, f func()) (stop func() bool)

	ctx context.Context
	mu  sync.Mutex
	// records are the pools' starts by worker, running or answered and not yet taken.
	records map[string]map[string]*startRecord
	// hosts are the last power-on group handed out per pool and host, closed once it is
	// through: the next group of the host waits for it (FIFO across passes).
	hosts map[[2]string]chan struct{}
	// slots bound each pool's starts at once, parks before power-ons.
	slots map[string]*startSlots
	// follows end the pool's watches of the parks its power-ons ahead wait for.
	follows map[string]map[*int]context.CancelFunc
	// marks bound each pool's node writes made before their starts (queuedStart.mark),
	// apart from the starts' slots: a start asked waits for no other start's node write.
	marks map[string]chan struct{}
	wg    sync.WaitGroup
}

// startRecord is one task start: its intent (operation and time, as status stores it),
// and vCenter's answer once ended.
type startRecord struct {
	op    vsphere.Op
	at    time.Time
	ended bool
	id    string
	err   error
	// asking: the call to vCenter is under way (Cancel cannot stop it). cancelled: the
	// start is not to be asked. notAsked: it was answered without asking vCenter.
	asking, cancelled, notAsked bool
	// markErr: the node write to make before the start (queuedStart.mark) failed, and
	// the start was not asked.
	markErr error
	// marking: that node write is still to be made or under way (PendingMarks), and
	// stopMark ends it when the start is cancelled while it is under way.
	marking  bool
	stopMark context.CancelFunc
	// held: a pass took the answer and has not stored what it recorded yet (Commit).
	held bool
	// ahead: a start asked on a condition past the pass, a power-on ahead of parks
	// (ahead.go) or a suspend after drains (afterdrains.go), not asked before it holds,
	// and what it was planned for (CancelAhead).
	ahead      bool
	plannedFor aheadPlan
	// since is when the decision to make the start last stood, on the Starts' clock: its
	// handout, or the last pass that planned for the same generation and layout while
	// its condition was pending (Renew). A start not asked within StartTimeout of it is
	// stale. pending: an ahead start whose condition (its drains ended, its parks ended
	// well) has not held yet; once it has, the start only queues for vCenter, which
	// StartTimeout bounds from since, unrenewed.
	since   time.Time
	pending bool
	// stopGate ends the wait of a suspend after drains for them (awaitDrains), not
	// asked; opened is closed when a pass observed those drains ended (OpenGates), which
	// calls openGate to end the wait, asked; gateVMs are the VMs whose drains it waits
	// for.
	stopGate, openGate context.CancelFunc
	opened             chan struct{}
	gateVMs            []string
	// done is closed once the start is answered (ended).
	done chan struct{}
}

// StartTimeout bounds one start asked past the pass, as reconcileTimeout bounds a pass's,
// how long a start may queue before it is asked, and the node write a suspend makes
// before (Starts.mark; it may also wait for a state-label write to the same node under
// way, each bounded by its own request): an intent is answered within a few times that,
// well within the deletion's wait for a pool's tasks. A start on a condition waits for
// it while passes renew it (Renew), which the condition's own bounds end: drain.timeout
// (an abort cancels it, a forced drain ends the drains) and the parks' tasks.
const StartTimeout = 2 * time.Minute

// NewStarts returns the starts of a manager: ctx ends them.
func NewStarts(ctx context.Context, wake func(pool string)) *Starts {
	return &Starts{ctx: ctx, Wake: wake, records: map[string]map[string]*startRecord{},
		hosts: map[[2]string]chan struct{}{}, slots: map[string]*startSlots{}, follows: map[string]map[*int]context.CancelFunc{},
		marks: map[string]chan struct{}{}}
}

// hand records the starts a pass of pool queued (their intents are stored) and asks
// vCenter for them past the pass, group by group (startGroups); the pool is woken once
// every one has an answer. A group of power-ons ahead of parks (ahead.go) is asked once
// those parks have ended well (followParks), and answered not asked otherwise; the pool
// is woken again once each such group has its answers.
func (s *Starts) hand(pool string, queued []queuedStart, groups [][]int) {
	handed, handedAt := s.now(), time.Now() // handedAt: the machine's clock, for StartStages
	recs := make([]*startRecord, len(queued))
	after := make([]chan struct{}, len(groups)) // the host's earlier group, for power-ons
	mine := make([]chan struct{}, len(groups))
	cond := make([]chan bool, len(groups)) // groups ahead of parks: whether they may go
	s.mu.Lock()
	if s.records[pool] == nil {
		s.records[pool] = map[string]*startRecord{}
	}
	for i, q := range queued {
		ahead := q.after != nil || q.gate != nil
		recs[i] = &startRecord{op: q.op, at: q.at, ahead: ahead, pending: ahead, plannedFor: q.plannedFor, since: handed,
			marking: q.writes, done: make(chan struct{})}
		if q.gate != nil {
			recs[i].opened, recs[i].gateVMs = make(chan struct{}), q.gateVMs
		}
		s.records[pool][q.worker] = recs[i]
	}
	var aheads []aheadGroup
	for g, idx := range groups {
		if queued[idx[0]].op == vsphere.OpPowerOn {
			k := [2]string{pool, queued[idx[0]].powerOnHost()}
			after[g], mine[g] = s.hosts[k], make(chan struct{})
			s.hosts[k] = mine[g]
		}
		if q := queued[idx[0]]; q.after != nil {
			cond[g] = make(chan bool, 1)
			aheads = append(aheads, aheadGroup{after: aheadOf(queued, idx), watch: q.watch, result: cond[g], recs: pick(recs, idx)})
		}
	}
	slots := s.slots[pool]
	if slots == nil {
		slots = newStartSlots(s.limit())
		s.slots[pool] = slots
	}
	marks := s.marks[pool]
	if marks == nil {
		marks = make(chan struct{}, MaxConcurrentWrites)
		s.marks[pool] = marks
	}
	s.mu.Unlock()
	if len(aheads) > 0 {
		byWorker := make(map[string]*startRecord, len(queued))
		for i, q := range queued {
			byWorker[q.worker] = recs[i]
		}
		s.followParks(pool, aheads, byWorker)
	}
	var left sync.WaitGroup
	plain := 0
	for g, idx := range groups {
		grp := startGroup{pool: pool, queued: queued, idx: idx, recs: recs, handedAt: handedAt,
			after: after[g], mine: mine[g], cond: cond[g], gate: queued[idx[0]].gate, marks: marks, slots: slots}
		if grp.gate != nil { // no goroutine until its drains end (drainwait.go)
			s.wg.Add(1)
			rec := recs[idx[0]]
			s.awaitDrains(grp, rec, func(open bool) {
				defer s.wg.Done()
				defer s.wake(pool) // asked on its own condition, after the others' wake
				s.afterDrains(grp, rec, open)
			})
			continue
		}
		waits := grp.cond != nil
		if !waits {
			plain++
			left.Add(1)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if waits {
				defer s.wake(pool) // asked on its own condition, after the others' wake
			} else {
				defer left.Done()
			}
			s.run(grp)
		}()
	}
	if plain == 0 {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		left.Wait()
		s.wake(pool)
	}()
}

// parksEnded waits until followParks says whether a group ahead of parks may go (cond),
// and reports true when it may and one of its starts (recs) is not stale: its parks must
// have ended well within StartTimeout of the handout, or of the last pass that renewed
// the decision (Renew), as any start must be asked within it, so that no older decision
// is acted on. It stops waiting once they are all stale whatever the watch does (a
// vCenter that does not answer may hold it longer), and when the Starts' context ends.
// Either way the starts' condition is no longer pending: Renew leaves them.
func (s *Starts) parksEnded(cond <-chan bool, recs []*startRecord) bool {
	expired := make(chan struct{})
	stop := s.afterStale(recs, func() { close(expired) })
	defer stop()
	var ok bool
	select {
	case ok = <-cond:
	case <-expired:
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range recs {
		rec.pending = false
	}
	return ok && s.left(recs) >= 0
}

// wake tells the pool that starts of it were answered.
func (s *Starts) wake(pool string) {
	if s.Wake != nil && s.ctx.Err() == nil {
		s.Wake(pool)
	}
}

// notAsked answers a start without asking vCenter.
func (s *Starts) notAsked(rec *startRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	notAskedLocked(rec)
}

// notAskedLocked is notAsked with s.mu held.
func notAskedLocked(rec *startRecord) {
	if !rec.ended {
		rec.ended, rec.notAsked, rec.marking = true, true, false
		close(rec.done)
	}
}

// mark makes the node write a start needs before it is asked (queuedStart.mark: the
// parked marks of a suspend's node), at most MaxConcurrentWrites of a pool at once, and
// reports whether the start may be asked. A start cancelled, or stale (queued for
// longer than StartTimeout), is answered not asked without the write, as ask would; one
// whose write fails is answered not asked with the error (markErr): its VM must not go
// down unmarked, and the next pass plans it again from what it observes.
func (s *Starts) mark(marks chan struct{}, q queuedStart, rec *startRecord) bool {
	if q.mark == nil {
		return true
	}
	marks <- struct{}{}
	defer func() { <-marks }()
	ctx, cancel := context.WithTimeout(s.ctx, StartTimeout)
	defer cancel()
	s.mu.Lock()
	stale := s.stale(rec)
	if !stale {
		rec.stopMark = cancel // Cancel ends the write under way: its pass is moot
	}
	s.mu.Unlock()
	if stale {
		s.notAsked(rec)
		return false
	}
	began := time.Now()
	err := q.mark(ctx)
	StartStages.WithLabelValues("mark").Observe(time.Since(began).Seconds())
	s.mu.Lock()
	defer s.mu.Unlock()
	rec.marking, rec.stopMark = false, nil
	switch {
	case rec.ended:
		return false
	case rec.cancelled: // not asked, as any start cancelled before it is asked
		err = nil
	case err == nil:
		return true
	}
	rec.ended, rec.notAsked, rec.markErr = true, true, err
	close(rec.done)
	return false
}

// stale tells whether a start is no longer to be asked, nor its node written: it was
// cancelled, has queued for longer than StartTimeout since its decision last stood
// (since), or the Starts' context ended. s.mu is held.
func (s *Starts) stale(rec *startRecord) bool {
	return rec.cancelled || s.now().Sub(rec.since) > StartTimeout || s.ctx.Err() != nil
}

// PendingMarks are the workers of the pool whose start still has its node write to make
// (queuedStart.mark: a suspend's parked marks), by status key: a later pass leaves those
// nodes' state labels and warnings to that write, which carries them, rather than write
// the node before it and make it wait and conflict.
func (s *Starts) PendingMarks(pool string) map[string]bool {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out map[string]bool
	for w, rec := range s.records[pool] {
		if rec.marking && !rec.ended {
			if out == nil {
				out = map[string]bool{}
			}
			out[w] = true
		}
	}
	return out
}

// ask asks vCenter for one start, unless it is stale (cancelled, or queued for longer
// than StartTimeout): then it is answered not asked. ready is when it could go
// but for the queue (its handout, or its parks' end), timed on the machine's clock
// (StartStages), not the Starts' clock, which tests may fake.
func (s *Starts) ask(q queuedStart, rec *startRecord, ready time.Time) {
	s.mu.Lock()
	if s.answerStaleLocked(rec) {
		s.mu.Unlock()
		return
	}
	rec.asking = true
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, StartTimeout)
	asked := time.Now()
	StartStages.WithLabelValues("queue").Observe(asked.Sub(ready).Seconds())
	id, err := q.start(ctx)
	StartStages.WithLabelValues("ask").Observe(time.Since(asked).Seconds())
	cancel()
	s.mu.Lock()
	rec.ended, rec.id, rec.err = true, id, err
	close(rec.done)
	s.mu.Unlock()
}

// answerStale answers a start not asked when it is no longer to be asked (stale), and
// reports whether it did.
func (s *Starts) answerStale(rec *startRecord) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answerStaleLocked(rec)
}

// answerStaleLocked is answerStale with s.mu held.
func (s *Starts) answerStaleLocked(rec *startRecord) bool {
	if !s.stale(rec) {
		return false
	}
	notAskedLocked(rec)
	return true
}

// hostDone ends a power-on group of the pool's host: the next group may go, and the host
// is forgotten when no later group was handed out.
func (s *Starts) hostDone(pool, host string, mine chan struct{}) {
	close(mine)
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := [2]string{pool, host}; s.hosts[k] == mine {
		delete(s.hosts, k)
	}
}

// Cancel answers the pool's starts not yet asked "not asked" (its pool is paused, its
// transition aborted, or it is being deleted: nothing more is to start on the snapshot
// they were decided on). A call already under way goes on; its answer is taken as any.
func (s *Starts) Cancel(pool string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range s.records[pool] {
		if !rec.asking && !rec.ended {
			rec.cancelled = true
			if rec.stopMark != nil {
				rec.stopMark() // a node write under way for it is ended
			}
			if rec.stopGate != nil {
				rec.stopGate() // and a wait for its drains
			}
		}
	}
	for _, stop := range s.follows[pool] {
		stop() // the power-ons ahead are cancelled: their parks need no watching
	}
}

// take returns the answer to the start of a worker's intent (op at at, to the second as
// status stores it), or reports that the worker has a start in flight (whichever intent
// it is for: a call to vCenter about the VM is under way), or that there is none. The
// answer is kept until the pool's next Commit, which the pass that took it calls once
// its status write has stored the task id it recorded: a pass whose write fails leaves
// it for the next pass, which takes it again rather than ask vCenter for the task
// (peek: a preview, which records nothing). An answer to an earlier intent is dropped.
func (s *Starts) take(pool, worker string, op vsphere.Op, at time.Time, peek bool) (a answer, ended, inFlight bool) {
	if s == nil {
		return answer{}, false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.records[pool][worker]
	switch {
	case rec == nil:
		return answer{}, false, false
	case !rec.ended:
		return answer{ahead: rec.ahead && !rec.asking, afterDrains: rec.opened != nil}, false, true
	}
	if rec.op != op || !rec.at.Truncate(time.Second).Equal(at.Truncate(time.Second)) {
		if !peek {
			s.drop(pool, worker) // the answer to an earlier intent: not this one's
		}
		return answer{}, false, false
	}
	if !peek {
		rec.held = true
	}
	return answer{id: rec.id, err: rec.err, notAsked: rec.notAsked, markErr: rec.markErr, afterDrains: rec.opened != nil}, true, false
}

// Commit forgets the answers the pool's passes took: call it once a pass's status write
// has stored what the pass recorded of them (or the pass had nothing to write).
func (s *Starts) Commit(pool string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for worker, rec := range s.records[pool] {
		if rec.held {
			s.drop(pool, worker)
		}
	}
}

// drop forgets a worker's record; s.mu is held.
func (s *Starts) drop(pool, worker string) {
	delete(s.records[pool], worker)
	if len(s.records[pool]) == 0 {
		delete(s.records, pool)
	}
}

// answer is what became of one start: vCenter's task id or error, or notAsked.
type answer struct {
	id       string
	err      error
	notAsked bool
	// markErr: not asked because the node write before it failed (Starts.mark).
	markErr error
	// ahead: in flight, a start on a condition that waits for it (a power-on ahead of
	// parks, a suspend after drains).
	ahead bool
	// afterDrains: a suspend after drains (its not asked most often says its drains did
	// not end in time).
	afterDrains bool
}

// Forget drops the answers of a pool's starts not taken (the pool is gone); starts in
// flight go on, and their answers are dropped when they come.
func (s *Starts) Forget(pool string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, pool)
	delete(s.slots, pool)
	delete(s.marks, pool)
	for _, stop := range s.follows[pool] {
		stop()
	}
}

// InFlight is how many starts of the pool are recorded and not committed (the tests).
func (s *Starts) InFlight(pool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records[pool])
}

// Wait waits until every start has been answered and its pool woken (the tests).
func (s *Starts) Wait() { s.wg.Wait() }

func (s *Starts) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Starts) limit() int {
	if s.Limit > 0 {
		return s.Limit
	}
	return MaxConcurrentStarts
}
