package execute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// orderLog is one log of the node writes and the vCenter calls of a test, in the order
// they were made, from any goroutine.
type orderLog struct {
	mu  sync.Mutex
	log []string
}

func (o *orderLog) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.log = append(o.log, s)
}

func (o *orderLog) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.log)
}

// loggedNodes writes nodes in memory and logs each patch and protect; patches of the
// nodes in fail fail. store, when set (storeOf), is the nodes as the API server has them
// (by name): Current reads them, a patch that succeeds writes them.
type loggedNodes struct {
	log   *orderLog
	fail  map[string]bool
	store map[string]*corev1.Node
	// writing, most: node patches under way now, and at most (Starts.mark's bound).
	mu            sync.Mutex
	writing, most int
	gate          chan struct{} // when set, each patch waits for it
}

func (l *loggedNodes) Patch(ctx context.Context, n *corev1.Node, change func(*corev1.Node)) error {
	l.mu.Lock()
	l.writing++
	l.most = max(l.most, l.writing)
	l.mu.Unlock()
	defer func() { l.mu.Lock(); l.writing--; l.mu.Unlock() }()
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.log.add("patch " + n.Name)
	if l.fail[n.Name] {
		return errors.New("admission webhook denied the request")
	}
	change(n)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		l.store[n.Name] = nodes.WriteCopy(n)
	}
	return nil
}

func (l *loggedNodes) Current(_ context.Context, name string) (*corev1.Node, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.store[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
	}
	return nodes.WriteCopy(n), nil
}

// storeOf is the API server's nodes for w: copies of w's, by name.
func storeOf(w *world.World) map[string]*corev1.Node {
	out := map[string]*corev1.Node{}
	for _, n := range w.Nodes {
		if n != nil {
			out[n.Name] = nodes.WriteCopy(n)
		}
	}
	return out
}

func (l *loggedNodes) Protect(_ context.Context, n *corev1.Node) error {
	l.log.add("protect " + n.Name)
	return nil
}
func (l *loggedNodes) Release(context.Context, *corev1.Node) error { return nil }

// suspendVC answers suspends with a task per VM and logs them.
type suspendVC struct {
	vsphere.Client
	log *orderLog
}

func (v *suspendVC) Suspend(_ context.Context, ref string) (string, error) {
	v.log.add("suspend " + ref)
	return "task-" + ref, nil
}

// suspendWorld is a pool of n drained VMs, each with its cordoned node (node-<vm>), the
// nodes in marked already parked, and a plan that suspends every VM.
func suspendWorld(n int, marked map[string]bool) (*gpupoolv1.GPUPoolProfile, *world.World, *plan.Plan) {
	var workers []gpupoolv1.Worker
	inv := &inventory.Inventory{Hosts: []inventory.Host{{Name: "esx-01"}}}
	p := &plan.Plan{Layout: "night", Hosts: []plan.HostPlan{{Host: "esx-01"}}}
	for i := range n {
		vm := fmt.Sprintf("vm-%02d", i)
		workers = append(workers, gpupoolv1.Worker{VM: vm, Profile: "grid_a100-40c"})
		inv.VMs = append(inv.VMs, inventory.VM{Name: vm, Ref: vm, Host: "esx-01", Profile: "grid_a100-10c", PowerState: inventory.PoweredOn})
		p.Hosts[0].Steps = append(p.Hosts[0].Steps, plan.Step{Action: plan.Suspend, VM: vm})
	}
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "pool"}, Spec: gpupoolv1.GPUPoolProfileSpec{MaxParallel: int32(n),
		Layouts: []gpupoolv1.Layout{{Name: "night", Workers: workers}}}}
	w := world.Resolve(&pool.Spec, inv)
	w.Nodes = map[string]*corev1.Node{}
	for _, vm := range inv.VMs {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + vm.Name}}
		nodes.Cordon(node)
		if marked[vm.Name] {
			nodes.ApplyMeta(node, nodes.ParkedMeta("pool"))
		}
		w.Nodes[vm.Name] = node
	}
	return pool, w, p
}

// TestSuspendMarksLater: with Starts, a pass protects the Machines of the nodes it parks
// but leaves their parked marks to the start of each suspend, which writes them, with
// the pass's marks, before it asks vCenter, past the pass, once the pass's status has
// stored the intents. A node marked already is not written again. Every VM is asked
// once, each after its own node's write; the pass leaves the written nodes' labels to
// those writes (Outcome.MarksLater). One VM and many (parkAhead) go the same way.
func TestSuspendMarksLater(t *testing.T) {
	for _, n := range []int{1, 3, MaxConcurrentWrites + 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			marked := map[string]bool{"vm-01": true}
			pool, w, p := suspendWorld(n, marked)
			log := &orderLog{}
			ln := &loggedNodes{log: log, store: storeOf(w)}
			s := NewStarts(t.Context(), nil)
			e := &Executor{Nodes: ln, Events: noEvents{}, VSphere: &suspendVC{log: log}, Starts: s}
			var marks []string
			var marksMu sync.Mutex
			out := e.Run(t.Context(), Input{Pool: pool, Now: startsAt, Plan: p, Layout: &pool.Spec.Layouts[0], World: w,
				Marks: func(vm string, done bool, n *corev1.Node) {
					marksMu.Lock()
					marks = append(marks, vm)
					marksMu.Unlock()
					nodes.SetState(n, "parking", "pool")
				}})
			for _, l := range log.all() {
				if !strings.HasPrefix(l, "protect ") {
					t.Fatalf("the pass made %q: want only the Machines protected in it", l)
				}
			}
			if got := len(log.all()); got != n {
				t.Errorf("%d Machines protected in the pass, want %d", got, n)
			}
			for vm := range w.Nodes {
				if want := !marked[vm]; out.MarksLater[vm] != want {
					t.Errorf("Outcome.MarksLater[%s] = %v, want %v", vm, out.MarksLater[vm], want)
				}
			}
			if out.Starts.Len() != n {
				t.Fatalf("%d starts handed out, want %d", out.Starts.Len(), n)
			}
			for _, ws := range pool.Status.Workers {
				if ws.Task == nil || ws.Task.Operation != string(vsphere.OpSuspend) || ws.Task.ID != "" {
					t.Errorf("worker %s: task %+v, want the suspend's intent recorded", ws.VM, ws.Task)
				}
			}
			out.Starts.Hand()
			s.Wait()
			got := log.all()[n:]
			for vm := range w.Nodes {
				node := "node-" + vm
				patch, suspend := slices.Index(got, "patch "+node), slices.Index(got, "suspend "+vm)
				switch {
				case suspend < 0 || slices.Index(got[suspend+1:], "suspend "+vm) >= 0:
					t.Errorf("%s: suspends in %v, want one", vm, got)
				case marked[vm] && patch >= 0:
					t.Errorf("%s: its node, parked already, was written again", vm)
				case !marked[vm] && (patch < 0 || patch > suspend || slices.Index(got[patch+1:], "patch "+node) >= 0):
					t.Errorf("%s: want one write of its node before its suspend, got %v", vm, got)
				}
				if !marked[vm] && nodes.HasMeta(w.Nodes[vm], nodes.ParkedMeta("pool")) {
					// The write is on a copy: the pass's world is not changed past it.
					t.Errorf("%s: the pass's node changed past the pass", vm)
				}
				a, ended, _ := s.take("pool", vm, vsphere.OpSuspend, startsAt, false)
				if !ended || a.id != "task-"+vm || a.notAsked {
					t.Errorf("%s: answer %+v ended %v, want its task", vm, a, ended)
				}
			}
			if want := len(out.MarksLater); len(marks) != want {
				t.Errorf("the pass's marks put on %d node writes (%v), want %d: each write carries them", len(marks), marks, want)
			}
			if ln.most > MaxConcurrentWrites {
				t.Errorf("%d node writes at once, want at most %d", ln.most, MaxConcurrentWrites)
			}
		})
	}
}

// TestSuspendMarkFails: a suspend whose node cannot be marked parked is not asked (its
// VM must not go down unmarked), the others go on; the next pass clears its intent,
// says why and reports a step error, so that it is planned again. A start cancelled
// before its write (a pause, an abort) writes nothing and asks nothing.
func TestSuspendMarkFails(t *testing.T) {
	for _, c := range []struct {
		name      string
		fail      map[string]bool
		cancel    bool
		asked     []string
		stepError bool
		gone      string // a node deleted between the pass and its write
	}{
		{"one node refused", map[string]bool{"node-vm-01": true}, false, []string{"vm-00", "vm-02"}, true, ""},
		{"one node gone", nil, false, []string{"vm-00", "vm-01"}, true, "node-vm-02"},
		// More than are written at once: the writes under way end, those waiting for
		// their turn never begin, and nothing is reported as failed.
		{"cancelled while the first are written", nil, true, nil, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := 3
			if c.cancel {
				n = MaxConcurrentWrites + 4
			}
			pool, w, p := suspendWorld(n, nil)
			log := &orderLog{}
			s := NewStarts(t.Context(), nil)
			ln := &loggedNodes{log: log, fail: c.fail, store: storeOf(w)}
			if c.cancel {
				ln.gate = make(chan struct{})
			}
			e := &Executor{Nodes: ln, Events: noEvents{}, VSphere: &suspendVC{log: log}, Starts: s}
			out := e.Run(t.Context(), Input{Pool: pool, Now: startsAt, Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
			delete(ln.store, c.gone)
			out.Starts.Hand()
			if c.cancel {
				for i := 0; ; i++ { // bounded: the writes run on the Starts' goroutines
					ln.mu.Lock()
					writing := ln.writing
					ln.mu.Unlock()
					if writing == MaxConcurrentWrites {
						break
					}
					if i == 10000 {
						t.Fatalf("%d node writes under way, want %d", writing, MaxConcurrentWrites)
					}
					time.Sleep(time.Millisecond)
				}
				if got := len(s.PendingMarks("pool")); got != n {
					t.Errorf("%d marks pending while the first are written, want %d", got, n)
				}
				s.Cancel("pool") // ends the writes under way: the gate never opens
			}
			s.Wait()
			if got := s.PendingMarks("pool"); len(got) != 0 {
				t.Errorf("marks pending once every start is answered: %v", got)
			}
			var asked []string
			for _, l := range log.all() {
				if vm, ok := strings.CutPrefix(l, "suspend "); ok {
					asked = append(asked, vm)
				}
			}
			if patches := len(log.all()) - n - len(asked); c.cancel && patches != 0 {
				t.Errorf("cancelled: %d nodes written, want none (those under way ended)", patches)
			}
			slices.Sort(asked)
			if !slices.Equal(asked, c.asked) {
				t.Errorf("suspends asked %v, want %v", asked, c.asked)
			}
			vc := &askedVC{tasks: map[string]vsphere.TaskInfo{}}
			for _, vm := range c.asked {
				vc.tasks["task-"+vm] = vsphere.TaskInfo{State: vsphere.TaskRunning}
			}
			f := &Follower{Pool: pool, Now: startsAt.Add(time.Second), VSphere: vc, Events: noEvents{}, Starts: s}
			f.Check(t.Context())
			for _, ws := range pool.Status.Workers {
				if slices.Contains(c.asked, ws.VM) {
					if ws.Task == nil || ws.Task.ID != "task-"+ws.VM {
						t.Errorf("%s: task %+v, want its id recorded", ws.VM, ws.Task)
					}
					continue
				}
				if ws.Task != nil {
					t.Errorf("%s: intent %+v kept, want it cleared (not asked)", ws.VM, ws.Task)
				}
			}
			if got := len(f.StepErrors) > 0; got != c.stepError {
				t.Errorf("step errors %q, want some: %v", f.StepErrors, c.stepError)
			}
		})
	}
}

// TestSuspendMarksInThePassWithoutStarts: a pass that starts its tasks itself (no
// Starts) marks the nodes in the pass, before it records the intents, as before.
func TestSuspendMarksInThePassWithoutStarts(t *testing.T) {
	pool, w, p := suspendWorld(3, nil)
	log := &orderLog{}
	e := &Executor{Nodes: &loggedNodes{log: log, store: storeOf(w)}, Events: noEvents{}, VSphere: &suspendVC{log: log},
		Persist: func(context.Context) error { log.add("persist"); return nil }}
	out := e.Run(t.Context(), Input{Pool: pool, Now: startsAt, Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
	got := log.all()
	persist := slices.Index(got, "persist")
	for vm := range w.Nodes {
		if i := slices.Index(got, "patch node-"+vm); i < 0 || i > persist {
			t.Errorf("%s: its node not written before the intents were stored: %v", vm, got)
		}
	}
	if len(out.MarksLater) != 0 {
		t.Errorf("Outcome.MarksLater = %v, want none", out.MarksLater)
	}
}

// TestSuspendMarksTheNodeAsItIsThen: a suspend's node write, made past its pass, starts
// from the node as it is when it is made (execute.Nodes.Current), not from a copy taken
// in the pass: what others wrote meanwhile stays, and no copy waits with the suspend.
func TestSuspendMarksTheNodeAsItIsThen(t *testing.T) {
	pool, w, p := suspendWorld(3, nil)
	log := &orderLog{}
	s := NewStarts(t.Context(), nil)
	ln := &loggedNodes{log: log, store: storeOf(w)}
	e := &Executor{Nodes: ln, Events: noEvents{}, VSphere: &suspendVC{log: log}, Starts: s}
	out := e.Run(t.Context(), Input{Pool: pool, Now: startsAt, Plan: p, Layout: &pool.Spec.Layouts[0], World: w})
	// Meanwhile someone labels a node and taints another.
	ln.store["node-vm-00"].Labels = map[string]string{"lab.example/team": "vision"}
	ln.store["node-vm-01"].Spec.Taints = append(ln.store["node-vm-01"].Spec.Taints, corev1.Taint{Key: "lab.example/maintenance", Effect: corev1.TaintEffectNoSchedule})
	out.Starts.Hand()
	s.Wait()
	for _, vm := range []string{"vm-00", "vm-01", "vm-02"} {
		if n := ln.store["node-"+vm]; !nodes.HasMeta(n, nodes.ParkedMeta("pool")) {
			t.Errorf("node-%s: not marked parked: %+v", vm, n.ObjectMeta)
		}
	}
	if got := ln.store["node-vm-00"].Labels["lab.example/team"]; got != "vision" {
		t.Errorf("node-vm-00: the label written meanwhile is %q after the mark, want vision kept", got)
	}
	if !slices.ContainsFunc(ln.store["node-vm-01"].Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == "lab.example/maintenance" }) {
		t.Errorf("node-vm-01: the taint written meanwhile is gone after the mark: %v", ln.store["node-vm-01"].Spec.Taints)
	}
	if nodes.HasMeta(w.Nodes["vm-00"], nodes.ParkedMeta("pool")) || w.Nodes["vm-00"].Labels["lab.example/team"] != "" {
		t.Error("the pass's node changed past the pass")
	}
}
