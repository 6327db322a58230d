package vsphere

import (
	"context"
	"fmt"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/types"
)

// WaitTasks blocks until one of the tasks is over (succeeded or failed), vCenter no
// longer knows one of them, or ctx ends. A property collector of its own watches every
// task's info.state in one WaitForUpdatesEx long poll, so that a caller waiting for
// tasks wakes when vCenter says so, not on a timer. The first answer carries the current
// states: a task that ended before the call ends the wait at once.
func (c *client) WaitTasks(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	filter := &property.WaitFilter{}
	for _, id := range ids {
		filter.Spec.ObjectSet = append(filter.Spec.ObjectSet, types.ObjectSpec{Obj: types.ManagedObjectReference{Type: "Task", Value: id}})
	}
	filter.Spec.PropSet = []types.PropertySpec{{Type: "Task", PathSet: []string{"info.state"}}}
	err := property.WaitForUpdates(ctx, property.DefaultCollector(c.s.vc), filter, func(updates []types.ObjectUpdate) bool {
		for _, u := range updates {
			if len(u.MissingSet) > 0 || u.Kind == types.ObjectUpdateKindLeave {
				return true
			}
			for _, ch := range u.ChangeSet {
				if st, ok := ch.Val.(types.TaskInfoState); ok && (st == types.TaskInfoStateSuccess || st == types.TaskInfoStateError) {
					return true
				}
			}
		}
		return false
	})
	if err != nil {
		return fmt.Errorf("vsphere: waiting for tasks %v: %w", ids, err)
	}
	// Note: govmomi answers a cancelled wait with CancelWaitForUpdates' result, nil when
	// the cancel went through; the wait did not see a task end then.
	return ctx.Err()
}

// WatchTasks calls ended once for each of the tasks as it ends (ok: it succeeded; a task
// vCenter forgets while watched ends not ok, since whether it succeeded cannot be told),
// a task already over at once, and returns nil when every one has ended; it returns an
// error when the watch fails (a task vCenter does not know when it starts:
// ManagedObjectNotFound), and ctx's error when ctx ends first. One property
// collector filter serves all the tasks, whatever their number.
func (c *client) WatchTasks(ctx context.Context, ids []string, ended func(id string, ok bool)) error {
	left := map[string]bool{}
	filter := &property.WaitFilter{}
	for _, id := range ids {
		if left[id] {
			continue
		}
		left[id] = true
		filter.Spec.ObjectSet = append(filter.Spec.ObjectSet, types.ObjectSpec{Obj: types.ManagedObjectReference{Type: "Task", Value: id}})
	}
	if len(left) == 0 {
		return nil
	}
	filter.Spec.PropSet = []types.PropertySpec{{Type: "Task", PathSet: []string{"info.state"}}}
	end := func(id string, ok bool) {
		if left[id] {
			delete(left, id)
			ended(id, ok)
		}
	}
	err := property.WaitForUpdates(ctx, property.DefaultCollector(c.s.vc), filter, func(updates []types.ObjectUpdate) bool {
		for _, u := range updates {
			if len(u.MissingSet) > 0 || u.Kind == types.ObjectUpdateKindLeave {
				end(u.Obj.Value, false)
				continue
			}
			for _, ch := range u.ChangeSet {
				switch ch.Val {
				case types.TaskInfoStateSuccess:
					end(u.Obj.Value, true)
				case types.TaskInfoStateError:
					end(u.Obj.Value, false)
				}
			}
		}
		return len(left) == 0
	})
	if err != nil {
		return fmt.Errorf("vsphere: watching tasks %v: %w", ids, err)
	}
	if len(left) > 0 {
		return ctx.Err() // a cancelled wait ends without an error of its own
	}
	return nil
}
