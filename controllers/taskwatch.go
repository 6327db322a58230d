package controllers

import (
	"context"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/vsphere"
)

// taskWatch wakes a pool as soon as one of its vSphere tasks ends, so that a step
// waiting for a task goes on when vCenter says the task is over rather than on the next
// requeue (which stays, as the safety net: a watch that fails, or a session logged out
// under it, only costs the wait its timer).
//
// A watch follows a batch of tasks until every one of them has ended (one property
// collector and one filter for the batch, vsphere.Client.WatchTasks), waking the pool at
// each end: a task's end does not restart the watch of the others, which would cost
// vCenter a collector, a filter and a first read each time. A pass that finds tasks no
// watch follows (just started) adds a watch of those; one that no longer follows any
// task of a watch (they ended, or their workers went) ends it; a pass with no tasks or no
// session ends them all. A pool has at most maxTaskWatches at once: past that, one
// watch of all its tasks replaces them.
type taskWatch struct {
	ctx    context.Context
	events chan event.GenericEvent

	mu      sync.Mutex
	watches map[string][]*poolWatch // by pool
	wg      sync.WaitGroup
}

// maxTaskWatches bounds a pool's watches, each a long poll vCenter holds open.
const maxTaskWatches = 4

type poolWatch struct {
	left   map[string]bool // the tasks it follows that have not ended
	cancel context.CancelFunc
}

func newTaskWatch(ctx context.Context) *taskWatch {
	return &taskWatch{ctx: ctx, events: make(chan event.GenericEvent, 64), watches: map[string][]*poolWatch{}}
}

// inFlight are the ids of the pool's tasks that have been started and not seen to end.
func inFlight(pool *gpupoolv1.GPUPoolProfile) []string {
	var ids []string
	for _, w := range pool.Status.Workers {
		if w.Task != nil && w.Task.ID != "" {
			ids = append(ids, w.Task.ID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// watch makes the pool's watches cover exactly ids, through vc (nil: no vCenter session
// this pass, which ends them).
func (w *taskWatch) watch(pool string, vc vsphere.Client, ids []string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if vc == nil || len(ids) == 0 || w.ctx.Err() != nil {
		w.endLocked(pool, slices.Clone(w.watches[pool])) // endLocked removes from the pool's list
		return
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var keep, end []*poolWatch
	for _, pw := range w.watches[pool] {
		follows := false
		for id := range pw.left {
			if want[id] {
				follows = true
				delete(want, id) // covered
			}
		}
		if follows {
			keep = append(keep, pw)
		} else {
			end = append(end, pw)
		}
	}
	w.endLocked(pool, end)
	if len(want) == 0 {
		return
	}
	batch := ids
	if len(keep) < maxTaskWatches {
		batch = make([]string, 0, len(want))
		for _, id := range ids {
			if want[id] {
				batch = append(batch, id)
			}
		}
	} else {
		w.endLocked(pool, keep) // one watch of all the pool's tasks instead
	}
	w.startLocked(pool, vc, batch)
}

// startLocked starts a watch of ids for the pool.
func (w *taskWatch) startLocked(pool string, vc vsphere.Client, ids []string) {
	ctx, cancel := context.WithCancel(w.ctx)
	pw := &poolWatch{left: map[string]bool{}, cancel: cancel}
	for _, id := range ids {
		pw.left[id] = true
	}
	w.watches[pool] = append(w.watches[pool], pw)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cancel()
		// An error (cancelled, or the watch failed) wakes nobody: the pool's requeue
		// covers a failed watch, and its next pass starts another.
		err := vc.WatchTasks(ctx, ids, func(id string, _ bool) {
			w.mu.Lock()
			delete(pw.left, id)
			if len(pw.left) == 0 {
				w.removeLocked(pool, pw) // over before its last wake: the next pass starts afresh
			}
			w.mu.Unlock()
			select {
			case w.events <- event.GenericEvent{Object: &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: pool}}}:
			case <-ctx.Done():
			}
		})
		if err != nil && ctx.Err() == nil {
			log.FromContext(w.ctx).V(1).Info("A watch of the pool's vSphere tasks failed; its next pass starts another", "pool", pool, "tasks", len(ids), "error", err.Error())
		}
		w.mu.Lock()
		w.removeLocked(pool, pw)
		w.mu.Unlock()
	}()
}

// endLocked cancels the watches and forgets them.
func (w *taskWatch) endLocked(pool string, end []*poolWatch) {
	for _, pw := range end {
		pw.cancel()
		w.removeLocked(pool, pw)
	}
}

func (w *taskWatch) removeLocked(pool string, pw *poolWatch) {
	// A new slice: callers may range over the old one.
	rest := slices.DeleteFunc(slices.Clone(w.watches[pool]), func(o *poolWatch) bool { return o == pw })
	if len(rest) == 0 {
		delete(w.watches, pool)
		return
	}
	w.watches[pool] = rest
}

// watching is how many watches run, of every pool.
func (w *taskWatch) watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, ws := range w.watches {
		n += len(ws)
	}
	return n
}

// stop ends every watch and waits for their goroutines.
func (w *taskWatch) stop() {
	w.mu.Lock()
	for pool, ws := range w.watches {
		w.endLocked(pool, slices.Clone(ws))
	}
	w.mu.Unlock()
	w.wg.Wait()
}
