//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/localenv"
	"github.com/gpupool/gpupool/vsphere"
)

// powerMethods are the vSphere operations a transition makes on a VM.
var powerMethods = []string{"PowerOnVM_Task", "SuspendVM_Task", "PowerOffVM_Task", "ReconfigVM_Task"}

// faultWorld is the local environment of the fault test, its pool and what it reads.
type faultWorld struct {
	t     *testing.T
	ctx   context.Context
	env   *localenv.Env
	dir   string
	names map[string]string // VM managed object id -> name
}

// TestFaultsOnLocalCluster drives the day/night pool on the local environment, with the
// manager from the image and vgpusim's tasks taking seconds (Suspend 3 s, PowerOn 4 s),
// through the faults of issue 21, from outside: the manager killed in the middle of a
// transition and started again; vgpusim and the API server frozen for 25 s; the wanted
// layout flipped while power-ons run; kube-scheduler killed; the pool deleted while its
// VMs power on. After each, every VM's vSphere operations happened once per transition
// (vgpusim counts them per VM), no power-on was refused, and no running VM's node is left
// cordoned or parked.
func TestFaultsOnLocalCluster(t *testing.T) {
	root := testenv.Root()
	dir := t.TempDir()
	opts := localenv.Options{Dir: dir, Root: root, BinDir: filepath.Join(root, "bin"), ManagerEnv: cacheMutationDetector,
		Inventory: filepath.Join(root, "test", "vgpusim", "testdata", "daynight.yaml"), Log: os.Stdout,
		Image: filepath.Join(root, "dist", "image"),
		VgpusimArgs: []string{"--task-delay", "SuspendVM_Task=3s", "--task-delay", "PowerOnVM_Task=4s",
			"--calls-file", filepath.Join(dir, "calls.json"), "--vm-calls-file", filepath.Join(dir, "vm-calls.json")}}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	env, err := localenv.Up(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = localenv.Down(opts) })
	diagnoseOnFailure(t, ctx, env, "powerwire.log", "manager.log")
	ctx = watchManager(t, ctx, dir)
	w := &faultWorld{t: t, ctx: ctx, env: env, dir: dir}
	w.readNames()

	pool := env.DemoPoolSpec(time.Now(), time.Minute)
	pool.Spec.Schedule = nil // the layout follows the override alone
	pool.Spec.Override = &gpupoolv1.Override{Layout: "day", Reason: "fault test"}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	w.waitLayout("day")

	t.Run("manager killed mid-transition", func(t *testing.T) {
		w.t = t
		before := w.ops()
		w.switchTo("night")
		w.waitCalls(before, "SuspendVM_Task", 1)
		if err := env.KillManager(); err != nil {
			t.Fatal(err)
		}
		if err := env.StartManager(ctx); err != nil {
			t.Fatal(err)
		}
		w.waitLayout("night")
		w.onceEach(before, map[string]int{"gpu-day-1": 1, "gpu-day-2": 1, "gpu-day-3": 1, "gpu-day-4": 1}, map[string]int{"gpu-night-1": 1})
		w.noStrandedNode()
	})

	t.Run("vgpusim and the API server frozen", func(t *testing.T) {
		w.t = t
		before := w.ops()
		w.switchTo("day")
		w.waitCalls(before, "SuspendVM_Task", 1)
		if err := env.Freeze("vgpusim", "kube-apiserver"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Second) // the fault itself: both hang for 25 s
		if err := env.Thaw("vgpusim", "kube-apiserver"); err != nil {
			t.Fatal(err)
		}
		// A manager that lost its leader lease exits, and its Deployment would start it
		// again: so does the test.
		if !env.ManagerRuns() {
			t.Log("the manager exited while the API server was frozen (leader lease lost); starting it again")
			if err := env.StartManager(ctx); err != nil {
				t.Fatal(err)
			}
		}
		w.waitLayout("day")
		w.onceEach(before, map[string]int{"gpu-night-1": 1}, map[string]int{"gpu-day-1": 1, "gpu-day-2": 1, "gpu-day-3": 1, "gpu-day-4": 1})
		w.noStrandedNode()
		w.componentsRun()
	})

	t.Run("kube-scheduler killed is started again", func(t *testing.T) {
		w.t = t
		if err := env.Kill("kube-scheduler"); err != nil {
			t.Fatal(err)
		}
		w.componentsRun()
	})

	t.Run("intent flipped while power-ons run", func(t *testing.T) {
		w.t = t
		w.switchTo("night")
		w.waitLayout("night")
		w.switchTo("day")
		before := w.ops()
		w.waitCalls(before, "PowerOnVM_Task", 4) // the way back to day powers its 4 VMs on
		flip, refused := w.ops(), len(w.poolEvents("PowerOnFailed"))
		w.switchTo("night")
		w.waitLayout("night")
		// From the flip on: the day VMs are parked once each (once their power-ons end),
		// night-1 powered on once, and vSphere refused nothing.
		w.onceEach(flip, map[string]int{"gpu-day-1": 1, "gpu-day-2": 1, "gpu-day-3": 1, "gpu-day-4": 1}, map[string]int{"gpu-night-1": 1})
		if evs := w.poolEvents("PowerOnFailed"); len(evs) > refused {
			t.Errorf("a power-on was refused after the flip: %v", evs[refused:])
		}
		w.noStrandedNode()
	})

	t.Run("pool deleted while its VMs power on", func(t *testing.T) {
		w.t = t
		before := w.ops()
		w.switchTo("day")
		w.waitCalls(before, "PowerOnVM_Task", 4)
		var p gpupoolv1.GPUPoolProfile
		if err := env.Client.Get(ctx, client.ObjectKey{Name: localenv.DemoPool}, &p); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, &p); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := env.Client.Get(ctx, client.ObjectKey{Name: localenv.DemoPool}, &p)
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool was not deleted within 2m: %v %+v", err, p.Status.Conditions)
			}
			time.Sleep(500 * time.Millisecond)
		}
		w.onceEach(before, map[string]int{"gpu-night-1": 1}, map[string]int{"gpu-day-1": 1, "gpu-day-2": 1, "gpu-day-3": 1, "gpu-day-4": 1})
		w.noStrandedNode()
		for _, name := range []string{"gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4"} {
			n := w.node(name)
			for k := range n.Labels {
				if strings.HasPrefix(k, gpupoolv1.KeyPrefix+"/") {
					t.Errorf("node %s keeps label %s after the pool was deleted", name, k)
				}
			}
		}
		if n := w.node("gpu-night-1"); n.Labels[gpupoolv1.LabelParked] != "true" || !n.Spec.Unschedulable {
			t.Errorf("node gpu-night-1 (its VM parked) lost its parked marks: %v", n.Labels)
		}
	})
}

func (w *faultWorld) readNames() {
	w.t.Helper()
	inv := w.inventory()
	w.names = map[string]string{}
	for _, vm := range inv.VMs {
		w.names[vm.Ref] = vm.Name
	}
}

func (w *faultWorld) inventory() *inventory.Inventory {
	w.t.Helper()
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	vc, err := conn.Connect(w.ctx, w.env.VCenter)
	if err != nil {
		w.t.Fatal(err)
	}
	inv, err := vc.Inventory(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	return inv
}

// ops reads vgpusim's per-VM call counts, by VM name.
func (w *faultWorld) ops() map[string]map[string]int {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, "vm-calls.json"))
	if err != nil {
		if os.IsNotExist(err) {
			return map[string]map[string]int{}
		}
		w.t.Fatal(err)
	}
	var byRef map[string]map[string]int
	if err := json.Unmarshal(b, &byRef); err != nil {
		w.t.Fatalf("vm-calls.json: %v", err)
	}
	out := map[string]map[string]int{}
	for ref, calls := range byRef {
		out[w.names[ref]] = calls
	}
	return out
}

// waitCalls waits until n more calls of method were made, over all VMs, than in before.
func (w *faultWorld) waitCalls(before map[string]map[string]int, method string, n int) {
	w.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := 0
		for vm, calls := range w.ops() {
			got += calls[method] - before[vm][method]
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d %s calls within 2m, want %d", got, method, n)
		}
		time.Sleep(100 * time.Millisecond) // vgpusim writes its counts four times a second
	}
}

// onceEach checks that since before, each VM had the parks (suspends) and power-ons
// given and no other power operation: once per transition, whatever failed between.
func (w *faultWorld) onceEach(before map[string]map[string]int, parks, powerOns map[string]int) {
	w.t.Helper()
	after := w.ops()
	for _, name := range w.names {
		for _, m := range powerMethods {
			want := 0
			switch m {
			case "SuspendVM_Task":
				want = parks[name]
			case "PowerOnVM_Task":
				want = powerOns[name]
			}
			if got := after[name][m] - before[name][m]; got != want {
				w.t.Errorf("VM %s: %d %s calls, want %d", name, got, m, want)
			}
		}
	}
}

func (w *faultWorld) switchTo(layout string) {
	w.t.Helper()
	var p gpupoolv1.GPUPoolProfile
	if err := w.env.Client.Get(w.ctx, client.ObjectKey{Name: localenv.DemoPool}, &p); err != nil {
		w.t.Fatal(err)
	}
	before := p.DeepCopy()
	p.Spec.Override = &gpupoolv1.Override{Layout: layout, Reason: "fault test"}
	if err := w.env.Client.Patch(w.ctx, &p, client.MergeFrom(before)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *faultWorld) waitLayout(layout string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(w.ctx, 3*time.Minute)
	defer cancel()
	var last *gpupoolv1.GPUPoolProfile
	if err := w.env.WaitPool(ctx, localenv.DemoPool, "layout "+layout, func(p *gpupoolv1.GPUPoolProfile) bool {
		last = p
		return p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout == layout
	}); err != nil {
		w.t.Fatalf("%v; last status: %s", err, statusLine(last))
	}
}

func statusLine(p *gpupoolv1.GPUPoolProfile) string {
	if p == nil {
		return "none"
	}
	var conds []string
	for _, c := range p.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("phase %s, active %q; %s", p.Status.Phase, p.Status.ActiveLayout, strings.Join(conds, "; "))
}

func (w *faultWorld) node(name string) *corev1.Node {
	w.t.Helper()
	var n corev1.Node
	if err := w.env.Client.Get(w.ctx, client.ObjectKey{Name: name}, &n); err != nil {
		w.t.Fatal(err)
	}
	return &n
}

// noStrandedNode checks that the node of every running VM is schedulable and not marked
// parked.
func (w *faultWorld) noStrandedNode() {
	w.t.Helper()
	for _, vm := range w.inventory().VMs {
		if vm.PowerState != inventory.PoweredOn {
			continue
		}
		n := w.node(vm.Name)
		if n.Spec.Unschedulable || n.Labels[gpupoolv1.LabelParked] == "true" {
			w.t.Errorf("VM %s runs, but its node is cordoned (%v) or parked (labels %v)", vm.Name, n.Spec.Unschedulable, n.Labels)
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == gpupoolv1.TaintParked {
				w.t.Errorf("VM %s runs, but its node has the parked taint", vm.Name)
			}
		}
	}
}

// componentsRun waits, bounded, until kube-controller-manager and kube-scheduler run
// again (the environment's supervisor restarts them) and the scheduler schedules.
func (w *faultWorld) componentsRun() {
	w.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !w.env.ComponentsRun() {
		if time.Now().After(deadline) {
			w.t.Fatal("kube-controller-manager or kube-scheduler did not run again within 1m")
		}
		time.Sleep(250 * time.Millisecond)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "scheduler-probe-", Namespace: "default"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "example.com/probe"}}}}
	if err := w.env.Client.Create(w.ctx, pod); err != nil {
		w.t.Fatal(err)
	}
	defer func() { _ = w.env.Client.Delete(context.Background(), pod) }()
	for {
		var cur corev1.Pod
		if err := w.env.Client.Get(w.ctx, client.ObjectKeyFromObject(pod), &cur); err == nil && cur.Spec.NodeName != "" {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatal("a probe pod was not scheduled within 1m: kube-scheduler does not work again")
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (w *faultWorld) poolEvents(reason string) []string {
	w.t.Helper()
	var evs corev1.EventList
	if err := w.env.Client.List(w.ctx, &evs); err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		// On the pool, or on one of its nodes with the pool as related.
		if e.Reason == reason && (e.InvolvedObject.Name == localenv.DemoPool || (e.Related != nil && e.Related.Name == localenv.DemoPool)) {
			out = append(out, e.Message)
		}
	}
	return out
}
