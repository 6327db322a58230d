// Package vsphere is gpupool's only door to vSphere: cached sessions, a batched inventory
// read, and operations that start a task and return its reference without waiting.
package vsphere

import (
	"context"

	"github.com/gpupool/gpupool/internal/inventory"
)

// TaskState is the state of a vSphere task.
type TaskState string

// Task states as vSphere names them.
const (
	TaskQueued  TaskState = "queued"
	TaskRunning TaskState = "running"
	TaskSuccess TaskState = "success"
	TaskError   TaskState = "error"
)

// TaskInfo is what a non-blocking check of a task found.
type TaskInfo struct {
	// State of the task.
	State TaskState
	// Error is the task's fault message when State is TaskError.
	Error string
	// Fault is the fault's type name, such as InsufficientResourcesFault or
	// InvalidPowerState, when State is TaskError.
	Fault string
}

// Config says how to reach one vCenter. Password is never logged or put in errors.
type Config struct {
	Server     string
	Datacenter string
	Username   string
	Password   string
	Thumbprint string
	CABundle   []byte
	Insecure   bool
	// CredentialsVersion identifies the version of Username and Password, such as the
	// resourceVersion of the Secret they come from. A login vCenter refused is not tried
	// again with the same version for LoginBackoff; a new version is tried at once.
	CredentialsVersion string
	// Owner names who uses the session, such as a GPUPoolProfile. When an owner moves to
	// another vCenter or user, or is released, a session no owner uses any more is logged
	// out rather than left to pile up on vCenter.
	Owner string
}

// Client is what the controller needs from vSphere. VMs are named by their managed
// object id (inventory.VM.Ref), which the controller takes from the last Inventory.
//
// Each operation starts a vSphere task and returns its id without waiting. When the VM
// is already in the operation's target state, it returns an empty task id and no error:
// nothing needs to be done.
type Client interface {
	// Inventory reads the datacenter's VMs and hosts in one batched round trip. With
	// vms (names or inventory paths, as a pool's spec gives them) it is scoped to them:
	// the hosts of their compute resources and every VM on those hosts are read in full,
	// the rest of the datacenter's VMs only by name, path, host and power state (enough
	// to find a VM and to tell an ambiguous name), its other hosts not at all.
	Inventory(ctx context.Context, vms ...string) (*inventory.Inventory, error)
	// PowerOn powers a VM on, or resumes it when suspended; on hostRef when it is not ""
	// (a host of the VM's compute resource).
	PowerOn(ctx context.Context, vmRef, hostRef string) (string, error)
	// Suspend suspends a powered-on VM.
	Suspend(ctx context.Context, vmRef string) (string, error)
	// ShutdownGuest asks the guest OS to shut down. It is not a task: the caller watches
	// the power state and falls back to PowerOff after its own timeout.
	ShutdownGuest(ctx context.Context, vmRef string) error
	// PowerOff powers a VM off hard; on a suspended VM it discards the suspended state.
	PowerOff(ctx context.Context, vmRef string) (string, error)
	// SetProfile gives the VM count vGPU devices of the profile (adding and removing
	// VirtualPCIPassthrough devices) and locks the memory reservation to the VM's memory
	// size. The VM must be powered off.
	SetProfile(ctx context.Context, vmRef, profile string, count int) (string, error)
	// Task checks a task without waiting.
	Task(ctx context.Context, taskID string) (TaskInfo, error)
	// Tasks checks several tasks in one call, without waiting. Tasks vCenter no longer
	// knows are missing from the answer.
	Tasks(ctx context.Context, taskIDs []string) (map[string]TaskInfo, error)
	// WaitTasks blocks until one of the tasks is over, vCenter forgets one, or ctx ends
	// (then it returns ctx's error).
	WaitTasks(ctx context.Context, taskIDs []string) error
	// WatchTasks calls ended for each of the tasks as it ends, ok when it succeeded (a
	// task vCenter forgot: not ok), and returns once all have; ctx's error when ctx ends
	// first.
	WatchTasks(ctx context.Context, taskIDs []string, ended func(id string, ok bool)) error
	// FindTask returns the newest of the VM's recent tasks of the operation
	// (OpPowerOn, OpPowerOff, OpSuspend, OpReconfigure) whose id is not in known, or "" when there is none.
	FindTask(ctx context.Context, vmRef string, op Op, known []string) (string, error)
	// InstanceUUID is vCenter's instance UUID, which identifies it whatever its address.
	InstanceUUID() string
	// SelectVMs lists the names of the datacenter's VMs that sel matches (a layout's
	// select), sorted; a name two VMs share as their inventory paths.
	SelectVMs(ctx context.Context, sel VMSelector) ([]string, error)
}

// Connector hands out Clients, one cached session per vCenter and user.
type Connector interface {
	Connect(ctx context.Context, cfg Config) (Client, error)
}
