package execute

import (
	"context"
	"sync"
	"time"

	"github.com/gpupool/gpupool/vsphere"
)

// Starts asks vCenter to start the vSphere tasks of passes past the passes that queue
// them (issue 37: the starts were a third of act, and a precondition met meanwhile
// waited for them to end). A pass stores the intents of its tasks in one status write,
// as before, hands the starts to Starts and goes on; the next pass takes each answer
// (take, from Follower.Check, before it reads the inventory) and records the task id,
// or the failure, on the worker, as the pass that started the task did before.
//
// Exactly once: a start is recorded, by pool and worker with its intent's operation and
// time, before the pass that hands it out ends, and runs once. A pass that finds the
// intent of a start still in flight counts the VM's task as in flight (the plan gives the
// VM no step) and does not ask vCenter for it (resolveIntent would find no task yet and
// plan the step again). An intent with no record (the process restarted, or the answer
// was taken and the status write that would have stored it failed) is resolved from
// vCenter, as before.
//
// Order: a host's power-ons go one after the other in the plan's order (startGroups), and
// a pass's power-ons of a host wait for an earlier pass's, which they may need placed
// first; the other starts each on their own. At most Limit starts of a pool are asked at
// once.
type Starts struct {
	// Limit bounds the starts of a pool asked at once; 0: maxConcurrentStarts.
	Limit int
	// Wake is told the pool once all the starts a pass handed out have been answered, so
	// that a pass records their task ids (and the task watch follows them). It must not
	// block.
	Wake func(pool string)

	ctx context.Context
	mu  sync.Mutex
	// records are the pools' starts by worker, running or answered and not yet taken.
	records map[string]map[string]*startRecord
	// hosts orders the power-ons of a pool's host across passes, by pool and host.
	hosts map[[2]string]*sync.Mutex
	// slots bound each pool's starts at once.
	slots map[string]chan struct{}
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
}

// StartTimeout bounds one start asked past the pass, as reconcileTimeout bounds a pass's.
const StartTimeout = 2 * time.Minute

// NewStarts returns the starts of a manager: ctx ends them.
func NewStarts(ctx context.Context, wake func(pool string)) *Starts {
	return &Starts{ctx: ctx, Wake: wake, records: map[string]map[string]*startRecord{},
		hosts: map[[2]string]*sync.Mutex{}, slots: map[string]chan struct{}{}}
}

// hand records the starts a pass of pool queued (their intents are stored) and asks
// vCenter for them past the pass, group by group (startGroups); the pool is woken once
// every one has an answer.
func (s *Starts) hand(pool string, queued []queuedStart, groups [][]int) {
	recs := make([]*startRecord, len(queued))
	s.mu.Lock()
	if s.records[pool] == nil {
		s.records[pool] = map[string]*startRecord{}
	}
	for i, q := range queued {
		recs[i] = &startRecord{op: q.op, at: q.at}
		s.records[pool][q.worker] = recs[i]
	}
	slots := s.slots[pool]
	if slots == nil {
		slots = make(chan struct{}, s.limit())
		s.slots[pool] = slots
	}
	s.mu.Unlock()
	var left sync.WaitGroup
	for _, g := range groups {
		left.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer left.Done()
			if queued[g[0]].op == vsphere.OpPowerOn {
				host := s.hostLock(pool, queued[g[0]].powerOnHost())
				host.Lock()
				defer host.Unlock()
			}
			slots <- struct{}{}
			defer func() { <-slots }()
			for _, i := range g {
				ctx, cancel := context.WithTimeout(s.ctx, StartTimeout)
				id, err := queued[i].start(ctx)
				cancel()
				s.mu.Lock()
				recs[i].ended, recs[i].id, recs[i].err = true, id, err
				s.mu.Unlock()
			}
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		left.Wait()
		if s.Wake != nil && s.ctx.Err() == nil {
			s.Wake(pool)
		}
	}()
}

// take returns the answer to the start of a worker's intent (op at at, to the second as
// status stores it) and forgets it (peek: keeps it, for a preview that records nothing),
// or reports that the worker has a start in flight (whichever intent it is for: a call
// to vCenter about the VM is under way), or that there is none.
func (s *Starts) take(pool, worker string, op vsphere.Op, at time.Time, peek bool) (id string, err error, ended, inFlight bool) {
	if s == nil {
		return "", nil, false, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.records[pool][worker]
	switch {
	case rec == nil:
		return "", nil, false, false
	case !rec.ended:
		return "", nil, false, true
	}
	if !peek {
		delete(s.records[pool], worker)
		if len(s.records[pool]) == 0 {
			delete(s.records, pool)
		}
	}
	if rec.op != op || !rec.at.Truncate(time.Second).Equal(at.Truncate(time.Second)) {
		return "", nil, false, false // the answer to an earlier intent: not this one's
	}
	return rec.id, rec.err, true, false
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
	for k := range s.hosts {
		if k[0] == pool {
			delete(s.hosts, k)
		}
	}
}

// InFlight is how many starts of the pool are recorded and not taken (the tests).
func (s *Starts) InFlight(pool string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records[pool])
}

// Wait waits until every start has been answered and its pool woken (the tests; a
// manager's shutdown).
func (s *Starts) Wait() { s.wg.Wait() }

func (s *Starts) hostLock(pool, host string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{pool, host}
	if s.hosts[k] == nil {
		s.hosts[k] = &sync.Mutex{}
	}
	return s.hosts[k]
}

func (s *Starts) limit() int {
	if s.Limit > 0 {
		return s.Limit
	}
	return maxConcurrentStarts
}
