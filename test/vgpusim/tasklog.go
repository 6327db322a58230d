package vgpusim

import (
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

// TaskRecord is one VM task as the simulator ran it, stamped by the simulator's clock:
// what a benchmark needs to tell vCenter's time from the time of the client between
// two tasks.
type TaskRecord struct {
	Task   string    `json:"task"`
	Method string    `json:"method"`
	VM     string    `json:"vm"`     // managed object id
	VMName string    `json:"vmName"` // the VM's name when the task started
	Start  time.Time `json:"start"`
	// Finish is zero while the task runs.
	Finish time.Time `json:"finish,omitzero"`
	Failed bool      `json:"failed,omitempty"`
}

// maxTaskRecords bounds the task log: a long-running simulator drops the oldest.
const maxTaskRecords = 100_000

type taskLog struct {
	records []TaskRecord
	index   map[string]int // task id -> position in records
}

// logTaskStart records a VM task that just started. The caller holds the VM's lock.
func (s *Sim) logTaskStart(ctx *simulator.Context, vm types.ManagedObjectReference, method string, t *simulator.Task) {
	name := ""
	switch v := ctx.Map.Get(vm).(type) {
	case *vgpuVM:
		name = v.Name
	case *simulator.VirtualMachine:
		name = v.Name
	}
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	l := &s.ctl.tasks
	if len(l.records) >= maxTaskRecords {
		l.records = append(l.records[:0:0], l.records[len(l.records)/2:]...)
		l.index = make(map[string]int, len(l.records))
		for i, r := range l.records {
			l.index[r.Task] = i
		}
	}
	if l.index == nil {
		l.index = map[string]int{}
	}
	l.index[t.Self.Value] = len(l.records)
	l.records = append(l.records, TaskRecord{Task: t.Self.Value, Method: method, VM: vm.Value, VMName: name, Start: *t.Info.StartTime})
}

// logTaskFinish records when a task of the log ended (tasks not in it are ignored).
func (s *Sim) logTaskFinish(t *simulator.Task, at time.Time, failed bool) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if i, ok := s.ctl.tasks.index[t.Self.Value]; ok {
		s.ctl.tasks.records[i].Finish, s.ctl.tasks.records[i].Failed = at, failed
	}
}

// TaskRecords returns the VM tasks the simulator ran, in the order they started.
func (s *Sim) TaskRecords() []TaskRecord {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	return append([]TaskRecord(nil), s.ctl.tasks.records...)
}
