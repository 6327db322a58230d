package controllers

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/text"
	"github.com/gpupool/gpupool/internal/world"
)

// Events go on the object they concern, as Karpenter's and Cluster API's do: a step on a
// node (cordon, drain, park, relabel, uncordon, a vSphere task of its VM) on the Node,
// with the pool as related, so that `kubectl describe node` tells the node's story; what
// concerns the pool as a whole (a transition starting, completing, aborting; deletion;
// Stalled) on the pool.
//
// Note: the events API (events.k8s.io, and client-go's recorder before it) folds the
// events that share type, reason, action, regarding and related object into one series
// that keeps the first note. Events of many nodes on the pool under one reason would be
// folded into the first node's; on their nodes they are not. A VM step without a node
// stays on the pool with an action that names the VM, and a transition's events have an
// action that names the transition: each is a series of its own.

// nodeEvent records an event about one node of the pool: regarding the node, related
// the pool.
func (r *GPUPoolProfileReconciler) nodeEvent(pool *gpupoolv1.GPUPoolProfile, node *corev1.Node, typ, reason, format string, args ...any) {
	r.record(node, pool, typ, reason, reason, transitionTag(pool)+fmt.Sprintf(format, args...))
}

// vmEvent records an event about the VM of a worker (by its spec id, as status names
// it): on the VM's node when it has one, else on the pool with the VM in the action.
func (r *GPUPoolProfileReconciler) vmEvent(s *scope, vm, typ, reason, format string, args ...any) {
	if v, ok := s.w.VMs[vm]; ok {
		if n := s.w.Nodes[v.Name]; n != nil {
			r.nodeEvent(s.pool, n, typ, reason, format, args...)
			return
		}
	}
	r.record(s.pool, nil, typ, reason, distinctAction(reason, vm), transitionTag(s.pool)+fmt.Sprintf(format, args...))
}

// laterEvents keeps the events of the tasks phase for flushVMEvents: it runs before
// observe has matched the VMs to their nodes (execute.Events).
type laterEvents struct {
	r *GPUPoolProfileReconciler
	s *scope
}

func (e laterEvents) VM(vm, typ, reason, note string) {
	e.s.vmEvents = append(e.s.vmEvents, vmEventNote{vm: vm, typ: typ, reason: reason, msg: note})
}

// Node and Pool know their node already: they are told at once.
func (e laterEvents) Node(n *corev1.Node, typ, reason, note string) {
	passEvents(e).Node(n, typ, reason, note)
}

func (e laterEvents) Pool(n *corev1.Node, typ, reason, note string) {
	passEvents(e).Pool(n, typ, reason, note)
}

// flushVMEvents records the events laterEvents kept, on the VMs' nodes where the pass
// matched them, else on the pool.
func (r *GPUPoolProfileReconciler) flushVMEvents(s *scope) {
	for _, e := range s.vmEvents {
		r.vmEvent(s, e.vm, e.typ, e.reason, "%s", e.msg)
	}
	s.vmEvents = nil
}

// distinctAction is the action of an event kept on the pool that must not fold into another
// of its reason: the reason and what it concerns (a VM, a transition), within the 128
// characters the events API allows.
func distinctAction(reason, what string) string {
	a := reason + " " + what
	if len(a) > maxEventAction {
		a = a[:maxEventAction]
	}
	return a
}

func transitionTag(pool *gpupoolv1.GPUPoolProfile) string {
	if t := pool.Status.Transition; t != nil {
		return "[" + t.ID + "] "
	}
	return ""
}

// maxEventNote and maxEventAction are the longest note and action the events.k8s.io API
// accepts.
const (
	maxEventNote   = 1024
	maxEventAction = 128
)

// transitionEvent records an event about a transition on the pool. Its action names
// the transition, so that each transition's events are a series of their own and keep
// their notes (the summaries), however close together the transitions come.
func (r *GPUPoolProfileReconciler) transitionEvent(pool *gpupoolv1.GPUPoolProfile, t *gpupoolv1.TransitionStatus, typ, reason, format string, args ...any) {
	r.record(pool, nil, typ, reason, distinctAction(reason, t.ID), fmt.Sprintf(format, args...))
}

// emit records an event on the pool; the reason doubles as the event's action.
func (r *GPUPoolProfileReconciler) emit(pool *gpupoolv1.GPUPoolProfile, typ, reason, format string, args ...any) {
	r.record(pool, nil, typ, reason, reason, fmt.Sprintf(format, args...))
}

// record hands an event to the recorder. Notes are cut to what the events API accepts,
// or the API server would drop the event.
func (r *GPUPoolProfileReconciler) record(regarding, related runtime.Object, typ, reason, action, note string) {
	r.Recorder.Eventf(regarding, related, typ, reason, action, "%s", cutNote(note))
}

// cutNote cuts an event's note to what the events API accepts.
func cutNote(note string) string {
	return text.Cut(note, maxEventNote)
}

// maxNamesShown is how many nodes or VMs a summary names before it counts the rest.
const maxNamesShown = 8

// planSummary says in one line what a plan does to which nodes and VMs, for the
// TransitionStarted event: the steps each node's own events then tell in detail.
func planSummary(w *world.World, p *plan.Plan) string {
	byAction := map[plan.Action][]string{}
	for _, hp := range p.Hosts {
		for _, st := range slices.Concat(hp.Steps, hp.Later) {
			name := st.VM
			if n := w.Nodes[st.VM]; n != nil && (st.Action == plan.Drain || st.Action == plan.Relabel || st.Action == plan.Uncordon) {
				name = n.Name
			}
			if !slices.Contains(byAction[st.Action], name) {
				byAction[st.Action] = append(byAction[st.Action], name)
			}
		}
	}
	park := slices.Concat(byAction[plan.Suspend], byAction[plan.PowerOff])
	parts := []string{
		counted("cordon and drain", byAction[plan.Drain], "node"),
		counted("park", park, "VM"),
		counted("reconfigure", byAction[plan.Reconfigure], "VM"),
		counted("power on", byAction[plan.PowerOn], "VM"),
		counted("relabel", byAction[plan.Relabel], "node"),
		counted("uncordon", byAction[plan.Uncordon], "node"),
	}
	parts = slices.DeleteFunc(parts, func(p string) bool { return p == "" })
	if len(parts) == 0 {
		return "nothing to do"
	}
	return strings.Join(parts, ", ")
}

// outcomeSummary says, for the TransitionCompleted event, which nodes serve the layout
// now and which are parked, as observed: the pool's nodes in the layout, and the others
// that carry the parked label.
func outcomeSummary(s *scope) string {
	inLayout := map[string]bool{}
	if s.layout != nil {
		for _, w := range s.layout.Workers {
			if v, ok := s.w.VMs[w.VM]; ok {
				inLayout[v.Name] = true
			}
		}
	}
	var serving, parked []string
	for vm, n := range s.w.Nodes {
		switch {
		case inLayout[vm]:
			serving = append(serving, n.Name)
		case n.Labels[LabelParked] == "true" && n.Labels[LabelPool] == s.pool.Name:
			parked = append(parked, n.Name)
		}
	}
	slices.Sort(serving)
	slices.Sort(parked)
	out := fmt.Sprintf("%s serving it", names(serving, "node"))
	if len(parked) > 0 {
		out += fmt.Sprintf(", %s parked", names(parked, "node"))
	}
	return out + "; each node's steps are in its events (kubectl events --for node/NAME)"
}

// counted is "verb 2 nodes (a, b)", or "" for none.
func counted(verb string, items []string, noun string) string {
	if len(items) == 0 {
		return ""
	}
	return verb + " " + names(items, noun)
}

// names is "2 nodes (a, b)", naming at most maxNamesShown of them.
func names(items []string, noun string) string {
	if len(items) != 1 {
		noun += "s"
	}
	if len(items) == 0 {
		return "0 " + noun
	}
	shown := items[:min(len(items), maxNamesShown)]
	list := strings.Join(shown, ", ")
	if more := len(items) - len(shown); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("%d %s (%s)", len(items), noun, list)
}

// announceNextInfeasible records a Warning event when the next scheduled switch's layout
// cannot be reached from what gpupool observes now (its status.plan has problems): the
// pool is Ready on its current layout until the switch starts, so without it a person
// learns of a typo in the other layout only when the switch stalls. Once per next switch
// and set of problems.
func (r *GPUPoolProfileReconciler) announceNextInfeasible(before, after *gpupoolv1.GPUPoolProfile) {
	pv := after.Status.Plan
	if pv == nil || pv.For != gpupoolv1.PlanForNext || len(pv.Problems) == 0 {
		return
	}
	if was := before.Status.Plan; was != nil && was.For == pv.For && was.Layout == pv.Layout &&
		was.At.Equal(pv.At) && slices.Equal(was.Problems, pv.Problems) {
		return
	}
	when := "its next switch"
	if pv.At != nil {
		when = "the switch at " + clockTime(after, pv.At.Time, r.Clock.Now())
	}
	r.emit(after, corev1.EventTypeWarning, "NextLayoutInfeasible", "layout %s cannot be reached by %s from what gpupool sees now: %s; fix it before then (kubectl gpupool plan %s), or the switch will stall",
		pv.Layout, when, strings.Join(pv.Problems, "; "), after.Name)
}

// passEvents tells the executor's events (execute.Events), tagged with the pass's
// transition.
type passEvents struct {
	r *GPUPoolProfileReconciler
	s *scope
}

func (e passEvents) VM(vm, typ, reason, note string) { e.r.vmEvent(e.s, vm, typ, reason, "%s", note) }

func (e passEvents) Node(n *corev1.Node, typ, reason, note string) {
	e.r.nodeEvent(e.s.pool, n, typ, reason, "%s", note)
}

func (e passEvents) Pool(n *corev1.Node, typ, reason, note string) {
	e.r.record(e.s.pool, n, typ, reason, distinctAction(reason, n.Name), transitionTag(e.s.pool)+note)
}
