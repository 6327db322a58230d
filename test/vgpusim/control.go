package vgpusim

import (
	"maps"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// control holds the knobs tests and the command turn at run time: delays, held tasks,
// injected task failures, session expiry and call counts.
type control struct {
	mu         sync.Mutex
	delays     map[string]time.Duration
	taskDelays map[string]time.Duration
	hold       bool
	// holdOnly, when not empty, holds only the tasks of these methods (HoldTasksOf).
	holdOnly map[string]bool
	held     []*deferredOp
	failures map[string]*failure
	// guestFailures are injected failures of guest operations, by VM name.
	guestFailures map[string]*failure
	calls         map[string]int
	// passwordChecks counts the logins checked, SOAP and REST (checkLogin).
	passwordChecks int
	// vmCalls counts the calls made on each VM (by managed object id), by method.
	vmCalls map[string]map[string]int
	timers  map[*time.Timer]struct{}
	// tasks is the log of VM tasks with their start and finish times (TaskRecords).
	tasks   taskLog
	wg      sync.WaitGroup
	stopped bool

	// Session expiry: a session is expired when it was first seen, or logged in, before
	// the latest ExpireSessions.
	sessionGen map[string]int
	gen        int
	expiredAt  time.Time

	// password is what SetPassword set; empty means the one the simulator started with.
	password string
	// onCall runs before a call of a method is served (OnCall).
	onCall map[string]func()
}

type failure struct {
	n     int
	fault types.BaseMethodFault
}

// deferredOp is a state change that completes later: a held or delayed task, or a
// guest shutdown/standby in progress.
type deferredOp struct {
	method string
	vm     types.ManagedObjectReference
	task   *simulator.Task // nil for guest operations, which are not tasks
	op     func(*simulator.Context) types.BaseMethodFault
}

func newControl() control {
	return control{
		delays:        map[string]time.Duration{},
		taskDelays:    map[string]time.Duration{},
		failures:      map[string]*failure{},
		guestFailures: map[string]*failure{},
		calls:         map[string]int{},
		vmCalls:       map[string]map[string]int{},
		timers:        map[*time.Timer]struct{}{},
		sessionGen:    map[string]int{},
		onCall:        map[string]func(){},
	}
}

// stop cancels pending delayed operations and waits for running ones.
func (c *control) stop() {
	c.mu.Lock()
	c.stopped = true
	for t := range c.timers {
		if t.Stop() {
			c.wg.Done()
		}
	}
	c.timers = map[*time.Timer]struct{}{}
	c.mu.Unlock()
	c.wg.Wait()
}

// SetDelay slows every call of a SOAP method (such as RetrieveProperties or
// PowerOnVM_Task) by d before it is served, like vcsim's DelayConfig.MethodDelay, but
// safe to change while serving. Zero removes the delay.
func (s *Sim) SetDelay(method string, d time.Duration) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if d <= 0 {
		delete(s.ctl.delays, method)
		return
	}
	s.ctl.delays[method] = d
}

// SetTaskDelay keeps tasks of a method (PowerOnVM_Task, PowerOffVM_Task,
// SuspendVM_Task, ReconfigVM_Task) running for d before their state change happens, as
// a slow vCenter would. "ShutdownGuest" and "StandbyGuest" delay the guest's power
// change likewise. Zero makes them complete synchronously again.
func (s *Sim) SetTaskDelay(method string, d time.Duration) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if d <= 0 {
		delete(s.ctl.taskDelays, method)
		return
	}
	s.ctl.taskDelays[method] = d
}

// HoldTasks keeps every task started from now on running, with no state change, until
// ReleaseTasks. It makes "task still running" observable without timing.
func (s *Sim) HoldTasks() {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	s.ctl.hold, s.ctl.holdOnly = true, nil
}

// HoldTasksOf is HoldTasks for the tasks of the given methods only (such as
// "PowerOnVM_Task"); the others complete as usual. ReleaseTasks ends it.
func (s *Sim) HoldTasksOf(methods ...string) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	s.ctl.hold, s.ctl.holdOnly = true, map[string]bool{}
	for _, m := range methods {
		s.ctl.holdOnly[m] = true
	}
}

// holds tells whether a task of method is held now. Called with s.ctl.mu held.
func (c *control) holds(method string) bool {
	return c.hold && (len(c.holdOnly) == 0 || c.holdOnly[method])
}

// ReleaseTasks stops holding tasks and completes the held ones in the order they were
// started. It returns how many it completed.
func (s *Sim) ReleaseTasks() int {
	s.ctl.mu.Lock()
	held := s.ctl.held
	s.ctl.held = nil
	s.ctl.hold, s.ctl.holdOnly = false, nil
	s.ctl.mu.Unlock()
	for _, d := range held {
		s.complete(d)
	}
	return len(held)
}

// OnCall runs f before each call of a SOAP method is served (nil removes it), such as
// CompleteHeld on DirectPathProfileManagerQueryCapacity: tasks that end in the middle of
// a client's inventory read, after its property read and before its capacity query. f
// must not call vgpusim's SOAP API.
func (s *Sim) OnCall(method string, f func()) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if f == nil {
		delete(s.ctl.onCall, method)
		return
	}
	s.ctl.onCall[method] = f
}

// CompleteHeld completes the held tasks for which pick (given each one's index among
// the held, in the order they were started) returns true, in that order, and keeps the
// rest held and the hold in force: a test chooses which tasks of a batch end between
// two of the operator's reads. It returns how many it completed.
func (s *Sim) CompleteHeld(pick func(i int) bool) int {
	s.ctl.mu.Lock()
	var done, kept []*deferredOp
	for i, d := range s.ctl.held {
		if pick(i) {
			done = append(done, d)
		} else {
			kept = append(kept, d)
		}
	}
	s.ctl.held = kept
	s.ctl.mu.Unlock()
	for _, d := range done {
		s.complete(d)
	}
	return len(done)
}

// FailTasks makes the next n tasks of a method (PowerOnVM_Task, PowerOffVM_Task,
// SuspendVM_Task, ReconfigVM_Task) fail with fault without changing anything. A nil
// fault is a GenericVmConfigFault. The SOAP call itself succeeds: the failure shows in the
// task, as vCenter reports most failures. For failing calls, use Service().AddFaultRule.
func (s *Sim) FailTasks(method string, n int, fault types.BaseMethodFault) {
	if fault == nil {
		fault = withMessage(&types.GenericVmConfigFault{Reason: "injected failure"},
			"vgpusim: injected failure of "+method)
	}
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if n <= 0 {
		delete(s.ctl.failures, method)
		return
	}
	s.ctl.failures[method] = &failure{n: n, fault: fault}
}

// FailGuestOps makes the next n guest operations (ShutdownGuest, StandbyGuest) on the
// named VM fail with fault, as the call's own fault: ToolsUnavailable for a guest without
// VMware Tools running, or a transient fault such as HostCommunication. n < 0 fails them
// until FailGuestOps is called again with 0.
func (s *Sim) FailGuestOps(vm string, n int, fault types.BaseMethodFault) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if n == 0 {
		delete(s.ctl.guestFailures, vm)
		return
	}
	s.ctl.guestFailures[vm] = &failure{n: n, fault: fault}
}

// guestFailure takes the next injected failure of a guest operation on the VM, if any.
func (s *Sim) guestFailure(vm string) types.BaseMethodFault {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	f := s.ctl.guestFailures[vm]
	if f == nil {
		return nil
	}
	if f.n > 0 {
		if f.n--; f.n == 0 {
			delete(s.ctl.guestFailures, vm)
		}
	}
	return f.fault
}

// ExpireSessions ends every current session, as vCenter does after its idle timeout or a
// restart: the next call with one of them gets NotAuthenticated, and a new Login works.
func (s *Sim) ExpireSessions() {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	s.ctl.gen++
	s.ctl.expiredAt = time.Now()
	s.trackers.stop(s.model.Map(), "")
	s.log.Info("Expired all sessions")
}

// RefuseConnections closes the listening socket and every open connection, so clients
// get "connection refused" until AcceptConnections.
func (s *Sim) RefuseConnections() { s.gate.refuse() }

// AcceptConnections listens again, on the same address.
func (s *Sim) AcceptConnections() error { return s.gate.accept() }

// PollMethod is the name under which the call counts (Calls, CallCounts) hold the
// polls of a property collector (WaitForUpdatesEx with maxWaitSeconds 0): reads of the
// inventory, told apart from the waits for tasks counted as WaitForUpdatesEx.
const PollMethod = "WaitForUpdatesEx (poll)"

// Calls is how many times a SOAP method was called since the start or ResetCalls.
func (s *Sim) Calls(method string) int {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	return s.ctl.calls[method]
}

// CallCounts is how many times each SOAP method was called since the start or
// ResetCalls.
func (s *Sim) CallCounts() map[string]int {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	out := make(map[string]int, len(s.ctl.calls))
	for m, n := range s.ctl.calls {
		out[m] = n
	}
	return out
}

// VMCallCounts is how many times each SOAP method was called on each VM, by the VM's
// managed object id (such as vm-42), since the start or ResetCalls: what a test needs
// to tell that each VM's power operation happened once.
func (s *Sim) VMCallCounts() map[string]map[string]int {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	out := make(map[string]map[string]int, len(s.ctl.vmCalls))
	for vm, calls := range s.ctl.vmCalls {
		out[vm] = maps.Clone(calls)
	}
	return out
}

// ResetCalls zeroes the call counts.
func (s *Sim) ResetCalls() {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	s.ctl.calls = map[string]int{}
	s.ctl.vmCalls = map[string]map[string]int{}
}

// handle runs before vcsim dispatches each SOAP call (Registry.Handler): it counts the
// call, applies its delay and enforces session expiry.
func (s *Sim) handle(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
	s.ctl.mu.Lock()
	s.ctl.calls[countedAs(m)]++
	if m.This.Type == "VirtualMachine" {
		if s.ctl.vmCalls[m.This.Value] == nil {
			s.ctl.vmCalls[m.This.Value] = map[string]int{}
		}
		s.ctl.vmCalls[m.This.Value][m.Name]++
	}
	d := s.ctl.delays[m.Name]
	expired := ctx.Session != nil && s.ctl.sessionExpired(ctx.Session)
	hook := s.ctl.onCall[m.Name]
	s.ctl.mu.Unlock()

	if hook != nil {
		hook()
	}

	if d > 0 {
		time.Sleep(d)
	}
	if !expired {
		s.routeHostMethod(ctx, m)
		s.wrapPolling(ctx, m)
		if pc, ok := routeCollector(ctx, m); ok {
			return pc, nil
		}
		return nil, nil
	}
	switch m.Name {
	case "Login", "LoginByToken", "LoginExtensionByCertificate", "CloneSession",
		"RetrieveServiceContent", "RetrieveInternalContent":
		// Serve these as if no cookie had been sent, so that logging in again works.
		ctx.Session = nil
		return nil, nil
	}
	return nil, &types.NotAuthenticated{NoPermission: types.NoPermission{Object: &m.This, PrivilegeId: "System.View"}}
}

// countedAs is the name a call is counted under: its method's, but PollMethod for a poll.
func countedAs(m *simulator.Method) string {
	if r, ok := m.Body.(*types.WaitForUpdatesEx); ok && isPoll(r) {
		return PollMethod
	}
	return m.Name
}

// sessionExpired is called with c.mu held.
func (c *control) sessionExpired(sess *simulator.Session) bool {
	g, ok := c.sessionGen[sess.Key]
	if !ok {
		g = c.gen
		if sess.LoginTime.Before(c.expiredAt) {
			g = c.gen - 1
		}
		c.sessionGen[sess.Key] = g
	}
	return g < c.gen
}

// startTask starts a task of method on the VM: it fails at once when a failure is
// injected, completes at once by default, and stays running when held or delayed. The
// caller holds the VM's lock, as vcsim holds it while serving a method.
func (s *Sim) startTask(ctx *simulator.Context, vm types.ManagedObjectReference, method, name string,
	op func(*simulator.Context) types.BaseMethodFault) types.ManagedObjectReference {
	s.ctl.mu.Lock()
	var injected types.BaseMethodFault
	if f := s.ctl.failures[method]; f != nil {
		injected = f.fault
		if f.n--; f.n <= 0 {
			delete(s.ctl.failures, method)
		}
	}
	delay, hold := s.ctl.taskDelays[method], s.ctl.holds(method)
	s.ctl.mu.Unlock()

	task := s.newTask(ctx, vm, name)
	s.logTaskStart(ctx, vm, method, task)
	switch {
	case injected != nil:
		s.log.Info("Injected task failure", "method", method, "task", task.Self.Value)
		s.finishTask(ctx, task, injected)
	case hold || delay > 0:
		s.schedule(&deferredOp{method: method, vm: vm, task: task, op: op}, delay, hold)
	default:
		s.finishTask(ctx, task, op(ctx))
	}
	return task.Self
}

// runGuestOp runs a guest operation's power change now, or later when delayed or held.
func (s *Sim) runGuestOp(ctx *simulator.Context, vm types.ManagedObjectReference, method string,
	op func(*simulator.Context) types.BaseMethodFault) {
	s.ctl.mu.Lock()
	delay, hold := s.ctl.taskDelays[method], s.ctl.holds(method)
	s.ctl.mu.Unlock()
	if hold || delay > 0 {
		s.schedule(&deferredOp{method: method, vm: vm, op: op}, delay, hold)
		return
	}
	if fault := op(ctx); fault != nil {
		s.log.Info("Guest operation failed", "method", method, "vm", vm.Value, "reason", faultMessage(fault))
	}
}

func (s *Sim) schedule(d *deferredOp, delay time.Duration, hold bool) {
	s.ctl.mu.Lock()
	defer s.ctl.mu.Unlock()
	if hold {
		s.ctl.held = append(s.ctl.held, d)
		return
	}
	if s.ctl.stopped {
		return
	}
	s.ctl.wg.Add(1)
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		defer s.ctl.wg.Done()
		s.ctl.mu.Lock()
		delete(s.ctl.timers, t)
		s.ctl.mu.Unlock()
		s.complete(d)
	})
	s.ctl.timers[t] = struct{}{}
}

// complete runs a deferred state change under the VM's lock and finishes its task.
func (s *Sim) complete(d *deferredOp) {
	ctx := s.newContext()
	var fault types.BaseMethodFault
	ctx.WithLock(d.vm, func() { fault = d.op(ctx) })
	if d.task != nil {
		s.finishTask(ctx, d.task, fault)
	} else if fault != nil {
		s.log.Info("Guest operation failed", "method", d.method, "vm", d.vm.Value, "reason", faultMessage(fault))
	}
}

// newTask registers a running task for entity. Unlike vcsim's Task.Run it starts no
// goroutine: the caller decides when it finishes.
func (s *Sim) newTask(ctx *simulator.Context, entity types.ManagedObjectReference, name string) *simulator.Task {
	t := simulator.CreateTask(entity, name, nil)
	t.Info.State = types.TaskInfoStateRunning
	now := time.Now()
	t.Info.StartTime = &now
	ctx.Map.Put(t)
	ctx.Map.AtomicUpdate(ctx, t, []types.PropertyChange{
		{Name: "info.key", Val: t.Self.Value},
		{Name: "info.task", Val: t.Self},
	})
	return t
}

func (s *Sim) finishTask(ctx *simulator.Context, t *simulator.Task, fault types.BaseMethodFault) {
	now := time.Now()
	s.logTaskFinish(t, now, fault != nil)
	changes := []types.PropertyChange{{Name: "info.completeTime", Val: now}}
	if fault != nil {
		changes = append(changes,
			types.PropertyChange{Name: "info.state", Val: types.TaskInfoStateError},
			types.PropertyChange{Name: "info.error", Val: &types.LocalizedMethodFault{
				Fault:            fault,
				LocalizedMessage: faultMessage(fault),
			}})
	} else {
		changes = append(changes, types.PropertyChange{Name: "info.state", Val: types.TaskInfoStateSuccess})
	}
	ctx.Map.AtomicUpdate(ctx, t, changes)
}

// routeHostMethod serves the maintenance-mode and connection methods of a host with hostOps, through the
// calling session's registry: vcsim dispatches on the session's object first, and its own
// code keeps the plain HostSystem from the shared registry.
func (s *Sim) routeHostMethod(ctx *simulator.Context, m *simulator.Method) {
	if m.This.Type != "HostSystem" || ctx.Session == nil {
		return
	}
	switch m.Name {
	case "EnterMaintenanceMode_Task", "ExitMaintenanceMode_Task", "DisconnectHost_Task", "ReconnectHost_Task":
	default:
		return
	}
	if h := s.hosts[m.This]; h != nil && ctx.Session.Registry.Get(m.This) == nil {
		ctx.Session.Registry.Put(&hostOps{HostSystem: h.obj, sim: s})
	}
}
