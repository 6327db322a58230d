package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/testworld"
)

// nodeWrite is one write of a node by the reconciler: the pass it was made in and the
// merge patch it sent ("update" for an update).
type nodeWrite struct {
	pass  int
	patch string
}

// nodeWriteLog records the reconciler's writes of each node (patches and updates, as
// the API server receives them), by pass.
type nodeWriteLog struct {
	mu     sync.Mutex
	pass   int
	writes map[string][]nodeWrite
}

func (l *nodeWriteLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = map[string][]nodeWrite{}
}

func (l *nodeWriteLog) nextPass() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pass++
}

func (l *nodeWriteLog) add(obj client.Object, what string) {
	if _, isNode := obj.(*corev1.Node); !isNode {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes[obj.GetName()] = append(l.writes[obj.GetName()], nodeWrite{l.pass, what})
}

// wrap records the node writes made through c.
func (l *nodeWriteLog) wrap(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			l.add(obj, string(data))
			return c.Patch(ctx, obj, patch, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			l.add(obj, "update")
			return c.Update(ctx, obj, opts...)
		},
	})
}

func (l *nodeWriteLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.writes))
	for n := range l.writes {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s: %d\n", n, len(l.writes[n]))
		for _, w := range l.writes[n] {
			fmt.Fprintf(&b, "    pass %d: %s\n", w.pass, w.patch)
		}
	}
	return b.String()
}

// patchFields is what a node's merge patch changes: labels, annotations, spec fields.
type patchFields struct {
	Metadata struct {
		Labels      map[string]*string `json:"labels"`
		Annotations map[string]*string `json:"annotations"`
	} `json:"metadata"`
	Spec map[string]json.RawMessage `json:"spec"`
}

func parsePatch(t *testing.T, patch string) patchFields {
	t.Helper()
	var f patchFields
	if err := json.Unmarshal([]byte(patch), &f); err != nil {
		t.Fatalf("node patch %s: %v", patch, err)
	}
	return f
}

// stateOnly tells whether a node patch writes nothing but the state label and its
// owner (what publishMarks writes for a node whose warning stays).
func (f patchFields) stateOnly() bool {
	for k := range f.Metadata.Labels {
		if k != LabelState {
			return false
		}
	}
	for k := range f.Metadata.Annotations {
		if k != AnnotationMarkedBy {
			return false
		}
	}
	_, state := f.Metadata.Labels[LabelState]
	return state && len(f.Spec) == 0
}

// warningOnly tells whether a node patch writes nothing but the draining-soon warning
// (the drain-at annotation and the taints) and its owner (what publishMarks writes for a
// node whose state stays).
func (f patchFields) warningOnly() bool {
	if len(f.Metadata.Labels) > 0 {
		return false
	}
	for k := range f.Metadata.Annotations {
		if k != gpupoolv1.AnnotationDrainAt && k != AnnotationMarkedBy {
			return false
		}
	}
	for k := range f.Spec {
		if k != "taints" {
			return false
		}
	}
	_, at := f.Metadata.Annotations[gpupoolv1.AnnotationDrainAt]
	return at
}

// parks tells whether a node patch marks the node parked (its parked label).
func (f patchFields) parks() bool {
	v := f.Metadata.Labels[gpupoolv1.LabelParked]
	return v != nil && *v == "true"
}

// taintsParked tells whether a node patch's taints hold the parked taint.
func (f patchFields) taintsParked() bool {
	var taints []corev1.Taint
	_ = json.Unmarshal(f.Spec["taints"], &taints)
	return slices.ContainsFunc(taints, func(t corev1.Taint) bool { return t.Key == gpupoolv1.TaintParked })
}

// uncordons tells whether a node patch makes the node schedulable again.
func (f patchFields) uncordons() bool {
	u, ok := f.Spec["unschedulable"]
	return ok && (string(u) == "null" || string(u) == "false")
}

// TestDayNightDayNodeWrites counts the node writes of a day -> night -> day cycle of the
// one-host world (four day VMs with a pod each, one night VM) on the API server, from
// the first pass of the switch to night to the pool Steady by day again and three
// quiet passes after it. Each node is drained and parked once and powered on and
// relabelled once in the cycle, and is written at most maxPerNode times:
//
//   - drained and parked: the cordon, with the state draining and the draining-soon
//     warning (1); the parked labels and taint, with the state parked and the warning
//     taken off (2);
//   - powered on: the state reconfiguring when its power-on is due (3, no step patches
//     the node then); the layout's labels and taints with the uncordon (a day node,
//     cordoned by its drain) and the state ready, the worker's last step (4).
//
// Before the state label went into the steps' own patches and the relabel uncordoned,
// the same cycle wrote each day node 11 times (the state label on its own after the
// cordon, the park, the relabel and the uncordon; the uncordon on its own) and night-1
// 10 times (it is not cordoned by night); before the warning went into the cordon and
// the park, 6 times (the warning and its removal on their own). The test also checks
// that a node a step patched is not patched again in the same pass for its state or
// its warning alone, and that no uncordon goes without the relabel.
//
// The state labels are written in the pass (the tests' reconciler) and past it
// (stateBatches, as the manager writes them): each node is written the same state
// values in the same order in every mode, and in the same passes when the test waits
// for each pass's batch. In the last mode the task starts are asked past the pass too
// (execute.Starts, as the manager asks them), and a suspend's start writes its node's
// parked marks just before it asks: that write carries the node's state label, and
// neither that pass nor the next writes the label or the warning on its own.
func TestDayNightDayNodeWrites(t *testing.T) {
	modes := []string{"in the pass", "past the pass", "overlapping the next pass", "suspends' node writes past the pass"}
	states := map[string]map[string][]string{}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { states[mode] = dayNightDayNodeWrites(t, mode) })
	}
	want := states[modes[0]]
	if len(want) != 5 {
		t.Fatalf("state labels written in the pass: %v", want)
	}
	for _, mode := range modes[1:] {
		for vm, w := range want {
			got := states[mode][vm]
			if mode != "past the pass" {
				w, got = valuesOnly(w), valuesOnly(got)
			}
			if !slices.Equal(got, w) {
				t.Errorf("%s: node %s written states %v, want %v as in the pass", mode, vm, got, w)
			}
		}
	}
}

// valuesOnly drops the pass from "pass value" entries.
func valuesOnly(entries []string) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e[strings.Index(e, " ")+1:]
	}
	return out
}

// dayNightDayNodeWrites is TestDayNightDayNodeWrites in one mode. It returns the state
// values written to each node (by VM name) in order, as "pass value". The state labels are written in
// the pass (the tests' reconciler), or past it (stateBatches, as the manager writes
// them): the test waits for each pass's batch before the next pass, so that a write
// counts for the pass that decided it, or lets the batch run into the next pass's
// observe. Either way the same writes, and the same labels in the end.
func dayNightDayNodeWrites(t *testing.T, mode string) map[string][]string {
	const maxPerNode = 4
	h := newHarness(t, map[string]string{"in the pass": "nwr-", "past the pass": "nwb-", "overlapping the next pass": "nwo-",
		"suspends' node writes past the pass": "nws-"}[mode])
	log := &nodeWriteLog{}
	log.reset()
	h.client = log.wrap
	var states *stateBatches
	if mode != "in the pass" {
		states = newStateBatches(h.ctx)
		h.reconciler().states = states
	}
	// The manager's task starts: a suspend's start marks its node parked past the pass.
	var starts *execute.Starts
	if mode == "suspends' node writes past the pass" {
		starts = execute.NewStarts(h.ctx, nil)
		h.reconciler().starts = starts
	}
	reconcile := func(pool string) ctrl.Result {
		res := h.reconcile(pool)
		if starts != nil {
			starts.Wait() // its node writes count for the pass that handed them out
		}
		if mode != "in the pass" && mode != "overlapping the next pass" {
			states.idle(pool)
		}
		return res
	}
	pool := h.dayNight()
	h.clock.SetTime(monday1000)
	h.create(pool)
	for i := 1; i <= 4; i++ {
		h.addPod("infer-"+string(rune('0'+i)), h.prefix+"day-"+string(rune('0'+i)), map[string]string{"app": "infer"})
	}
	h.converge(pool.Name, "day", 30)
	h.passes(pool.Name, 3, testworld.MaxStep)

	// converge is h.converge, with the passes numbered in the log.
	converge := func(layout string) {
		t.Helper()
		for range 60 {
			log.nextPass()
			res := reconcile(pool.Name)
			h.settle()
			if testworld.Reached(h.get(pool.Name), layout) {
				for range 3 { // quiet passes: nothing is left to write
					log.nextPass()
					h.clock.Step(testworld.Step(reconcile(pool.Name)))
					h.settle()
				}
				return
			}
			h.clock.Step(testworld.Step(res))
		}
		t.Fatalf("pool did not converge to %s", layout)
	}
	states.idle(pool.Name)
	log.reset()
	h.clock.SetTime(monday1950)
	converge("night")
	states.idle(pool.Name)
	h.checkNight(h.get(pool.Name))
	h.checkStates(map[string]string{"day-1": "parked", "day-2": "parked", "day-3": "parked", "day-4": "parked", "night-1": "ready"})
	h.clock.SetTime(tuesday0750)
	converge("day")
	states.idle(pool.Name)
	h.checkDay(h.get(pool.Name))
	h.checkStates(map[string]string{"day-1": "ready", "day-2": "ready", "day-3": "ready", "day-4": "ready", "night-1": "parked"})

	t.Logf("node writes, day -> night -> day:\n%s", log)
	if len(log.writes) != 5 {
		t.Errorf("%d nodes written, want the 5 of the pool", len(log.writes))
	}
	written := map[string][]string{}
	for n, ws := range log.writes {
		for _, w := range ws {
			if v := parsePatch(t, w.patch).Metadata.Labels[LabelState]; v != nil {
				vm := strings.TrimPrefix(n, h.prefix)
				written[vm] = append(written[vm], fmt.Sprintf("%d %s", w.pass, *v))
			}
		}
		if len(ws) > maxPerNode {
			t.Errorf("node %s written %d times, want at most %d", n, len(ws), maxPerNode)
		}
		if mode == "overlapping the next pass" {
			continue // a batch's writes land in the next pass's numbering
		}
		if starts != nil {
			for _, w := range ws {
				if f := parsePatch(t, w.patch); f.parks() && (f.Metadata.Labels[LabelState] == nil || !f.taintsParked()) {
					t.Errorf("node %s: pass %d parked it without its state label or taint: %s", n, w.pass, w.patch)
				}
			}
		}
		perPass := map[int]int{}
		for _, w := range ws {
			perPass[w.pass]++
		}
		for _, w := range ws {
			f := parsePatch(t, w.patch)
			if f.stateOnly() && perPass[w.pass] > 1 {
				t.Errorf("node %s: pass %d patched its state on its own besides %d other patch(es)", n, w.pass, perPass[w.pass]-1)
			}
			if f.warningOnly() && perPass[w.pass] > 1 {
				t.Errorf("node %s: pass %d patched its draining-soon warning on its own besides %d other patch(es)", n, w.pass, perPass[w.pass]-1)
			}
			if _, relabels := f.Metadata.Labels[LabelLayout]; f.uncordons() && !relabels {
				t.Errorf("node %s: pass %d uncordoned it without the relabel: %s", n, w.pass, w.patch)
			}
		}
	}
	return written
}

// checkStates checks the state label of the nodes of the VMs (by VM name) and that the
// pool owns their marks.
func (h *harness) checkStates(want map[string]string) {
	h.t.Helper()
	for vm, st := range want {
		n := h.node(vm)
		if n.Labels[LabelState] != st || n.Annotations[AnnotationMarkedBy] == "" {
			h.t.Errorf("node %s: state %q marked by %q, want %q", n.Name, n.Labels[LabelState], n.Annotations[AnnotationMarkedBy], st)
		}
	}
}
