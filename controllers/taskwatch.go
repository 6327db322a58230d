package controllers

import (
	"context"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/vsphere"
)

// taskWatch wakes a pool as soon as one of its vSphere tasks ends, so that a step
// waiting for a task goes on when vCenter says the task is over rather than on the next
// requeue (which stays, as the safety net: a watch that fails, or a session logged out
// under it, only costs the wait its timer). One long poll per pool with tasks in flight;
// a pass that finds other tasks replaces it, a pass with none ends it.
type taskWatch struct {
	ctx    context.Context
	events chan event.GenericEvent

	mu      sync.Mutex
	watches map[string]*poolWatch
	wg      sync.WaitGroup
}

type poolWatch struct {
	key    string
	cancel context.CancelFunc
}

func newTaskWatch(ctx context.Context) *taskWatch {
	return &taskWatch{ctx: ctx, events: make(chan event.GenericEvent, 64), watches: map[string]*poolWatch{}}
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
	return ids
}

// watch makes the pool's watch cover exactly ids, through vc (nil: no vCenter session
// this pass, which ends the watch).
func (w *taskWatch) watch(pool string, vc vsphere.Client, ids []string) {
	if w == nil {
		return
	}
	key := strings.Join(ids, ",")
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur := w.watches[pool]; cur != nil {
		if cur.key == key && vc != nil {
			return
		}
		cur.cancel()
		delete(w.watches, pool)
	}
	if vc == nil || len(ids) == 0 || w.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(w.ctx)
	pw := &poolWatch{key: key, cancel: cancel}
	w.watches[pool] = pw
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer cancel()
		err := vc.WaitTasks(ctx, ids)
		w.mu.Lock()
		if w.watches[pool] == pw {
			delete(w.watches, pool)
		}
		w.mu.Unlock()
		if err != nil {
			return // cancelled, or the watch failed: the pool's requeue covers it
		}
		select {
		case w.events <- event.GenericEvent{Object: &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: pool}}}:
		case <-ctx.Done():
		}
	}()
}

// watching is how many pools have a watch running.
func (w *taskWatch) watching() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

// stop ends every watch and waits for their goroutines.
func (w *taskWatch) stop() {
	w.mu.Lock()
	for pool, pw := range w.watches {
		pw.cancel()
		delete(w.watches, pool)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
