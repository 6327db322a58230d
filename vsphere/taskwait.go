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
