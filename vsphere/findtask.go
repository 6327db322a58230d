package vsphere

import (
	"context"
	"fmt"
	"slices"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// FindTask looks among the VM's recent tasks for one of the operation that is not in
// known, and returns the newest such task's id, or "" when there is none. It is how a
// controller that recorded its intent to start a task, and then lost track (a crash, a
// failed status write), tells whether vCenter started it: one read of the VM's
// recentTask and one of those tasks' descriptions.
func (c *client) FindTask(ctx context.Context, vmID string, op Op, known []string) (string, error) {
	want, ok := descriptionIDs[op]
	if !ok {
		return "", fmt.Errorf("vsphere: no task is known for operation %q", op)
	}
	vm, err := c.vm(ctx, vmID, "recentTask")
	if err != nil {
		return "", c.errorf(err, "read recent tasks of VM %s", vmID)
	}
	var refs []types.ManagedObjectReference
	for _, r := range vm.RecentTask {
		if !slices.Contains(known, r.Value) {
			refs = append(refs, r)
		}
	}
	if len(refs) == 0 {
		return "", nil
	}
	var tasks []mo.Task
	if err := property.DefaultCollector(c.s.vc).Retrieve(ctx, refs, []string{"info.descriptionId", "info.queueTime"}, &tasks); err != nil {
		return "", c.errorf(err, "read recent tasks of VM %s", vmID)
	}
	found := ""
	var newest types.TaskInfo
	for _, t := range tasks {
		if t.Info.DescriptionId != want {
			continue
		}
		if found == "" || t.Info.QueueTime.After(newest.QueueTime) {
			found, newest = t.Self.Value, t.Info
		}
	}
	return found, nil
}
