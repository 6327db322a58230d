package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// sizeByDemand gives the count world's pool a BringIn rule for night that sizes its
// count by demand between 1 and 4, with a 10 minute dwell, no cooldown and the given
// disruption limit.
func (cw countWorld) sizeByDemand(maxEvictions int32) {
	cw.h.patchPool(cw.pool.Name, func(p *gpupoolv1.GPUPoolProfile) {
		p.Spec.Demand = &gpupoolv1.DemandPolicy{
			NamespaceSelector: &metav1.LabelSelector{},
			Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn,
				For: &metav1.Duration{Duration: time.Minute}, IdleFor: &metav1.Duration{Duration: 5 * time.Minute},
				CountFromDemand: &gpupoolv1.CountFromDemand{Min: 1, Max: 4}}},
			MinDwell:     &metav1.Duration{Duration: 10 * time.Minute},
			Cooldown:     &metav1.Duration{Duration: 0},
			MaxEvictions: ptr.To(maxEvictions),
		}
	})
}

// runningNights are the night VMs (without prefix) that run.
func (cw countWorld) runningNights() []string {
	var out []string
	for hst := 1; hst <= 4; hst++ {
		for i := 1; i <= 4; i++ {
			if name := fmt.Sprintf("night-%d-%d", hst, i); cw.running(cw.h.prefix + name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// untilStepped reconciles until the pool has stepped night to count: active with that
// count, no transition, no task. A step announced ahead (status.demand.step) is waited
// out on the fake clock.
func (cw countWorld) untilStepped(count int32, l *opLedger) *gpupoolv1.GPUPoolProfile {
	h := cw.h
	h.t.Helper()
	for range 120 {
		res := h.reconcile(cw.pool.Name)
		h.settle()
		l.look()
		p := h.get(cw.pool.Name)
		if p.Status.ActiveLayout == "night" && p.Status.ActiveCount == count && p.Status.Transition == nil && len(inFlight(p)) == 0 {
			return p
		}
		if st := p.Status.Demand.Step; st != nil && h.clock.Now().Before(st.At.Time) {
			h.clock.SetTime(st.At.Time) // the warning runs out
			continue
		}
		h.clock.Step(min(max(res.RequeueAfter, time.Second), requeueTask))
	}
	p := h.get(cw.pool.Name)
	h.t.Fatalf("night not stepped to %d: active %s count %d, transition %+v, demand %q", count, p.Status.ActiveLayout, p.Status.ActiveCount,
		p.Status.Transition, demandMessage(p))
	return nil
}

func demandMessage(p *gpupoolv1.GPUPoolProfile) string {
	if p.Status.Demand == nil {
		return ""
	}
	return p.Status.Demand.Message
}

// gone tells whether the pod was deleted (evicted).
func (cw countWorld) gone(pod *corev1.Pod) bool {
	return apierrors.IsNotFound(k8s.Get(cw.h.ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}))
}

// TestCountFromDemandStepsUpAndDown: night is day with a count of GPUs converted that
// demand sizes (countFromDemand 1..4). One pending training pod brings night in with one
// GPU converted, the one whose emptying evicts nothing (maxEvictions 0); more pending
// work does not step the count while every step would evict more than maxEvictions;
// with maxEvictions 1 the count steps, after night's dwell and a warning, to the
// largest count allowed, as a transition of its own (history: from 1 to 2, by Demand),
// evicting exactly the pods of the GPU it adds and nothing that runs on the converted
// nodes; once the pending work is gone the count steps down to what runs, keeping the
// busy converted GPU. Every VM gets each vSphere operation at most once per step, every
// node at most one cordon, with the manager restarted before every pass of the steps.
func TestCountFromDemandStepsUpAndDown(t *testing.T) {
	cw := newCountWorld(t, "cfd-", false)
	h, name := cw.h, cw.pool.Name
	cw.sizeByDemand(0)
	h.reconcile(name)
	if p := h.get(name); p.Status.ActiveLayout != "day" || p.Status.DesiredLayout != "day" {
		t.Fatalf("without demand: active %s, desired %s; want day", p.Status.ActiveLayout, p.Status.DesiredLayout)
	}

	// One pending training pod: night comes in with one GPU converted, the empty one
	// (esx-03's GPU 0), evicting nothing.
	h.clock.Step(15 * time.Minute) // past day's dwell
	pending := h.gpuPod("train-a", "", true, nil)
	h.reconcile(name)
	h.clock.Step(2 * time.Minute)
	h.reconcile(name)
	p := h.get(name)
	if p.Status.DesiredLayout != "night" || p.Status.DesiredReason != gpupoolv1.DesiredByDemand {
		t.Fatalf("one pod pending for 2m: desired %s (%s), demand %q", p.Status.DesiredLayout, p.Status.DesiredReason, demandMessage(p))
	}
	if tr := p.Status.Transition; tr == nil || tr.To != "night" || tr.Count != 1 {
		t.Fatalf("transition %+v, want one to night with 1 GPU converted", tr)
	}
	l := h.ledger(cw.vmNames()...)
	p = h.untilLayout(name, "night", 120, l)
	l.once("day -> night (1 GPU)")
	if p.Status.ActiveCount != 1 || p.Status.History[0].Count != 1 {
		t.Fatalf("activeCount %d, history[0] %+v; want night with 1 GPU converted", p.Status.ActiveCount, p.Status.History[0])
	}
	first := map[[2]int]bool{{2, 0}: true}
	cw.checkConverted("night with 1 GPU", first, first, 1)
	nights := cw.runningNights()

	// The job runs on the night node; two more are pending: 3 GPUs needed, but every
	// step evicts GPU pods and maxEvictions is 0.
	h.must(k8s.Delete(h.ctx, pending, client.GracePeriodSeconds(0)))
	job := h.gpuPod("train-a-run", h.prefix+nights[0], true, nil)
	h.gpuPod("train-b", "", true, nil)
	h.gpuPod("train-c", "", true, nil)
	h.clock.Step(15 * time.Minute) // past night's dwell and the pods' `for`
	h.reconcile(name)
	h.reconcile(name)
	p = h.get(name)
	if p.Status.Transition != nil || p.Status.ActiveCount != 1 || !strings.Contains(demandMessage(p), "maxEvictions 0") {
		t.Fatalf("a step past maxEvictions: transition %+v, activeCount %d, demand %q; want no step, and why", p.Status.Transition, p.Status.ActiveCount, demandMessage(p))
	}

	// maxEvictions 1: the count steps to 2 (not 3: that would evict 4), announced
	// ahead, converting esx-02's GPU 1 (one pod). From here on the manager restarts
	// before every pass: the count in effect and the step come from status alone.
	h.patchPool(name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Demand.MaxEvictions = ptr.To(int32(1)) })
	h.restart = true
	h.reconcile(name)
	p = h.get(name)
	if st := p.Status.Demand.Step; st == nil || st.From != 1 || st.To != 2 || !st.At.After(st.DecidedTime.Time) {
		t.Fatalf("status.demand.step %+v (%q), want a step from 1 to 2 announced ahead: it evicts", st, demandMessage(p))
	}
	l = h.ledger(cw.vmNames()...)
	p = cw.untilStepped(2, l)
	l.once("night 1 -> 2 GPUs")
	rec := p.Status.History[0]
	if rec.From != "night" || rec.To != "night" || rec.FromCount != 1 || rec.Count != 2 || rec.Reason != gpupoolv1.DesiredByDemand || rec.Result != gpupoolv1.TransitionCompleted {
		t.Fatalf("history[0] %+v, want a completed demand step of night from 1 to 2 GPUs", rec)
	}
	second := map[[2]int]bool{{2, 0}: true, {1, 1}: true}
	cw.checkConverted("night with 2 GPUs", second, second, 2)
	if cw.gone(job) {
		t.Fatal("the step evicted the job running on a converted node")
	}

	// The pending work goes: the count steps down to what runs (1), keeping the busy
	// converted GPU and parking the idle night VM; esx-02's GPU 1 runs day VMs again.
	for _, n := range []string{"train-b", "train-c"} {
		h.must(k8s.Delete(h.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: h.prefix + "apps", Name: n}}, client.GracePeriodSeconds(0)))
	}
	h.clock.Step(11 * time.Minute) // past the step's dwell
	l = h.ledger(cw.vmNames()...)
	p = cw.untilStepped(1, l)
	l.once("night 2 -> 1 GPU")
	if h.restarts < 10 {
		t.Fatalf("%d restarts, want one before every pass of the steps", h.restarts)
	}
	if rec := p.Status.History[0]; rec.FromCount != 2 || rec.Count != 1 {
		t.Fatalf("history[0] %+v, want the step from 2 to 1", rec)
	}
	cw.checkConverted("night back to 1 GPU", first, second, 1)
	if cw.gone(job) || !cw.running(h.prefix+nights[0]) {
		t.Fatalf("the step down stopped the busy night VM %s or evicted its job", nights[0])
	}
}

// vmNames are the count world's VMs, without prefix.
func (cw countWorld) vmNames() []string {
	var out []string
	for vm := range cw.gpuOf {
		out = append(out, strings.TrimPrefix(vm, cw.h.prefix))
	}
	for hst := 1; hst <= 4; hst++ {
		for i := 1; i <= 4; i++ {
			out = append(out, fmt.Sprintf("night-%d-%d", hst, i))
		}
	}
	return out
}

// TestCountStepFromAPoolWithoutACountIsATransition: a pool whose active layout by count
// was made before counts were recorded (no status.activeCount) runs the count it was
// made with; once demand sizes it, a step from that count is a transition (from 4 to 1,
// nothing pending), not a repair.
func TestCountStepFromAPoolWithoutACountIsATransition(t *testing.T) {
	cw := newCountWorld(t, "cfu-", false)
	h, name := cw.h, cw.pool.Name
	h.clock.SetTime(monday1950)
	h.converge(name, "night", 80)
	p := h.get(name)
	before := p.DeepCopy()
	p.Status.ActiveCount = 0
	h.must(k8s.Status().Patch(h.ctx, p, client.MergeFrom(before)))
	cw.sizeByDemand(0)
	h.patchPool(name, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Demand.MinDwell = &metav1.Duration{} })
	h.reconcile(name)
	p = h.get(name)
	if tr := p.Status.Transition; tr == nil || tr.From != "night" || tr.To != "night" || tr.FromCount != 4 || tr.Count != 1 {
		t.Fatalf("transition %+v (demand %q), want a step of night from 4 to 1 GPUs", tr, demandMessage(p))
	}
	l := h.ledger(cw.vmNames()...)
	cw.untilStepped(1, l)
	l.once("night 4 -> 1 GPU")
}
