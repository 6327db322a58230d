package controllers

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// TestHoldMovedChoices: on a read taken while tasks ran, a layout by count whose choice
// moved keeps its last one (remembered, and in the pass's spec); the layout the pass
// makes is named for decide to settle when its choice moved, or when no choice of the
// same conversion is remembered (a restart, a count changed). A choice that did not move
// is taken, and another layout's moved choice is held without settling the pass.
func TestHoldMovedChoices(t *testing.T) {
	conv := func(count int32) *gpupoolv1.Conversion {
		return &gpupoolv1.Conversion{Base: "day", Count: count, Profile: "grid_p100-16q",
			Candidates: []gpupoolv1.Candidate{{VM: "night-1"}, {VM: "night-2"}}}
	}
	layout := func(name string, count int32, vms ...string) gpupoolv1.Layout {
		l := gpupoolv1.Layout{Name: name, Convert: conv(count), NodeLabels: map[string]string{"l": name}}
		for _, vm := range vms {
			l.Workers = append(l.Workers, gpupoolv1.Worker{VM: vm, Profile: "grid_p100-4q"})
		}
		return l
	}
	a := layout("night", 1, "day-2", "day-4", "night-1")     // GPU A converted
	b := layout("night", 1, "day-1", "day-3", "night-1")     // GPU B converted
	two := layout("night", 2, "night-1", "night-2")          // both
	other := layout("burst", 1, "day-2", "day-4", "night-2") // another layout by count
	otherMoved := layout("burst", 1, "day-1", "day-3", "night-2")
	for _, c := range []struct {
		name      string
		last, now []gpupoolv1.Layout
		makes     string
		// moved: choiceMoved; workers: night's workers in the pass's spec; kept: what is
		// remembered of night ("" = nothing).
		moved   bool
		workers []string
		kept    string
	}{
		{"same choice", []gpupoolv1.Layout{a}, []gpupoolv1.Layout{a}, "night", false, []string{"day-2", "day-4", "night-1"}, "a"},
		{"moved", []gpupoolv1.Layout{a}, []gpupoolv1.Layout{b}, "night", true, []string{"day-2", "day-4", "night-1"}, "a"},
		{"nothing remembered", nil, []gpupoolv1.Layout{b}, "night", true, []string{"day-1", "day-3", "night-1"}, ""},
		{"count changed", []gpupoolv1.Layout{a}, []gpupoolv1.Layout{two}, "night", true, []string{"night-1", "night-2"}, ""},
		{"moved, not made", []gpupoolv1.Layout{a}, []gpupoolv1.Layout{b}, "day", false, []string{"day-2", "day-4", "night-1"}, "a"},
		{"nothing remembered, not made", nil, []gpupoolv1.Layout{b}, "day", false, []string{"day-1", "day-3", "night-1"}, "b"},
		{"another layout moved", []gpupoolv1.Layout{a, other}, []gpupoolv1.Layout{a, otherMoved}, "night", false, []string{"day-2", "day-4", "night-1"}, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &GPUPoolProfileReconciler{}
			pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u"}}
			if c.last != nil {
				last := map[string]gpupoolv1.Layout{}
				for _, l := range c.last {
					last[l.Name] = l
				}
				r.conversions.remember(pool, last)
			}
			spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{{Name: "day"}}}
			sr := plan.SpecResolution{Spec: spec, Layouts: map[string]gpupoolv1.Layout{}}
			for _, l := range c.now {
				spec.Layouts = append(spec.Layouts, *l.DeepCopy())
				sr.Layouts[l.Name] = *l.DeepCopy()
			}
			s := &scope{pool: pool, decision: plan.Decision{Layout: c.makes}}
			keep := r.holdMovedChoices(s, sr)

			if got := slices.Contains(s.facts.choiceMoved, "night"); got != c.moved {
				t.Errorf("night named for the pass to settle: %v, want %v", got, c.moved)
			}
			if slices.Contains(s.facts.choiceMoved, "burst") {
				t.Errorf("burst, which the pass does not make, is named for it to settle")
			}
			var workers []string
			for _, w := range spec.LayoutNamed("night").Workers {
				workers = append(workers, w.VM)
			}
			if !slices.Equal(workers, c.workers) {
				t.Errorf("night's workers in the pass's spec %v, want %v", workers, c.workers)
			}
			if l := spec.LayoutNamed("night"); l.NodeLabels["l"] != "night" || l.Convert == nil {
				t.Errorf("night in the pass's spec lost its labels or conversion: %+v", l)
			}
			kept, ok := keep["night"]
			switch {
			case c.kept == "" && ok:
				t.Errorf("night's choice %v remembered, want none until a quiet read", kept.Workers)
			case c.kept == "a" && (!ok || !equalWorkers(kept, a)):
				t.Errorf("night remembered as %v, want the last choice %v", kept.Workers, a.Workers)
			case c.kept == "b" && (!ok || !equalWorkers(kept, b)):
				t.Errorf("night remembered as %v, want the new choice %v", kept.Workers, b.Workers)
			}
			if c.name == "another layout moved" {
				if k := keep["burst"]; !equalWorkers(k, other) {
					t.Errorf("burst remembered as %v, want its last choice %v", k.Workers, other.Workers)
				}
				if l := spec.LayoutNamed("burst"); !equalWorkers(*l, other) {
					t.Errorf("burst in the pass's spec %v, want its last choice %v", l.Workers, other.Workers)
				}
			}
		})
	}
}

func equalWorkers(a, b gpupoolv1.Layout) bool { return slices.Equal(a.Workers, b.Workers) }

// TestSettlingKeepsTheInfeasibleReport: a pass that settles because its layout by count's
// choice moved on a read taken while tasks ran (facts.choiceMoved) acts on nothing and
// leaves Stalled as the last pass wrote it: a LayoutInfeasible reported on quiet reads
// stands, with its message; one not reported is not made up.
func TestSettlingKeepsTheInfeasibleReport(t *testing.T) {
	w := newScaleWorld(320, true)
	ctx := context.Background()
	const msg = "layout night cannot be reached: GPU 0000:3b:00.0 of esx-001 is taken"
	for _, reported := range []bool{true, false} {
		persisted := w.pool.DeepCopy()
		if reported {
			setCond(persisted, gpupoolv1.ConditionStalled, true, ReasonInfeasible, msg)
		}
		s := &scope{pool: persisted.DeepCopy(), persisted: persisted, now: w.clock.Now()}
		s.decision = plan.Decision{Layout: "night", Reason: gpupoolv1.DesiredByDefault, Window: -1}
		s.wanted = s.pool.Spec.LayoutNamed("night")
		w.observe(ctx, t, s)
		s.facts.choiceMoved = []string{"night"} // as holdMovedChoices names it
		if _, _, err := w.r.decide(s); err != nil {
			t.Fatal(err)
		}
		if !s.facts.settling {
			t.Errorf("reported %v: the pass does not settle on a moved choice", reported)
		}
		summarize(s)
		c := findCondition(s.pool, gpupoolv1.ConditionStalled)
		switch {
		case c == nil:
			t.Errorf("reported %v: no Stalled condition", reported)
		case reported && (c.Status != metav1.ConditionTrue || c.Reason != ReasonInfeasible || c.Message != msg):
			t.Errorf("Stalled %s %s %q, want the report to stand: True %s %q", c.Status, c.Reason, c.Message, ReasonInfeasible, msg)
		case !reported && c.Status != metav1.ConditionFalse:
			t.Errorf("not reported before, Stalled is %s %s %q", c.Status, c.Reason, c.Message)
		}
	}
}
