package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/version"
)

// TestReadVerbsAsViewer: status, plan, history and timeline work for a user bound only
// to gpupool-viewer, without vCenter access; that user cannot switch.
func TestReadVerbsAsViewer(t *testing.T) {
	w := newWorld(t, "rd-")
	w.create(w.pool())
	p := w.operate("day")

	w.ok("viewer", "", []string{"status"}, w.name, "True", "LayoutActive", "day", "Steady", "night in 9h50m")
	w.ok("viewer", "", []string{"status", w.name},
		"Times in:    Europe/Berlin (the pool's schedule.timeZone; --tz to change)",
		"Layout now:  day", "Wanted:      day (window 0 (0 8 * * 1-5 for 12h, Europe/Berlin) open since "+w.shownAt(mondayMorning.Add(-2*time.Hour))+
			" as of "+w.shownAt(mondayMorning.Add(10*time.Minute))+" (now + leadTime 10m))",
		"Next:        night at "+shown(mondayMorning.Add(9*time.Hour+50*time.Minute))+" (in 9h50m)", "Ready:       True (LayoutActive)",
		"Reconciling  False", "rd-day-1", "poweredOn")
	w.ok("viewer", "", []string{"status", w.name, "-o", "wide"}, "rd-esx-01", "0000:3b:00.0")
	w.ok("viewer", "", []string{"plan", w.name},
		"next transition to night at "+shown(mondayMorning.Add(9*time.Hour+50*time.Minute)), "ParkRequired", "rd-day-4", "PowerOnRequired", "rd-night-1", "freed GPUs")

	// -o json and yaml are the API's objects, as kubectl prints them.
	out := w.ok("viewer", "", []string{"status", w.name, "-o", "json"})
	var got gpupoolv1.GPUPoolProfile
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Name != w.name || got.Kind != "GPUPoolProfile" || got.Status.Plan == nil {
		t.Errorf("status -o json: %v, %s/%s, plan %v", err, got.Kind, got.Name, got.Status.Plan)
	}
	out = w.ok("viewer", "", []string{"plan", w.name, "-o", "yaml"})
	var pv gpupoolv1.PlanPreview
	if err := yaml.Unmarshal([]byte(out), &pv); err != nil || pv.Layout != "night" || pv.For != gpupoolv1.PlanForNext {
		t.Errorf("plan -o yaml: %v %+v", err, pv)
	}
	w.ok("viewer", "", []string{"status", w.name, "-o", "jsonpath={.status.activeLayout}"}, "day")
	w.ok("viewer", "", []string{"status", w.name, "-o", "jsonpath={.status.progress}"}, "5/5")

	// The viewer may not steer, nor read the credentials --live needs.
	before := w.get().ResourceVersion
	for _, args := range [][]string{{"switch", w.name, "night", "--yes"}, {"pause", w.name}} {
		if out, err := w.run("viewer", "", args...); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("%v as viewer: %v %s, want forbidden", args, err, out)
		}
	}
	if out, err := w.run("viewer", "", "plan", w.name, "--live"); err == nil {
		t.Errorf("plan --live as viewer worked without access to the credentials: %s", out)
	}
	if out, err := w.run("nobody", "", "status", w.name); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("status as a user without a role: %v %s", err, out)
	}
	if w.get().ResourceVersion != before {
		t.Errorf("the pool changed under a viewer")
	}
	_ = p
}

// TestSteerVerbsAsEditor: switch (asking first), the transition it causes in history,
// resume, pause and unpause, as a user bound to gpupool-viewer and gpupool-editor.
func TestSteerVerbsAsEditor(t *testing.T) {
	w := newWorld(t, "st-")
	w.create(w.pool())
	w.operate("day")

	// No answer, no change.
	out, err := w.run("editor", "n\n", "switch", w.name, "night", "--for", "2h", "--reason", "driver update", "--in-spec")
	if err == nil || !strings.Contains(err.Error(), "--yes") || !strings.Contains(out, "parked: st-day-1, st-day-2, st-day-3, st-day-4") || !strings.Contains(out, "Set the override? [y/N]") {
		t.Fatalf("switch answered no: %v\n%s", err, out)
	}
	if code := exitCode(err); code != exitDeclined {
		t.Errorf("switch answered no exits %d, want %d (declined)", code, exitDeclined)
	}
	if w.get().Spec.Override != nil {
		t.Fatal("override set without confirmation")
	}
	w.ok("editor", "y\n", []string{"switch", w.name, "night", "--for", "2h", "--reason", "driver update", "--in-spec"},
		"will want night (override to layout night until "+w.shownAt(mondayMorning.Add(2*time.Hour))+": driver update)", "then day from "+w.shownAt(mondayMorning.Add(2*time.Hour)), "gpupool planned these steps for layout night", "override set")
	o := w.get().Spec.Override
	if o == nil || o.Layout != "night" || o.Until == nil || !o.Until.Time.Equal(mondayMorning.Add(2*time.Hour)) || o.Reason != "driver update" {
		t.Fatalf("override %+v", o)
	}
	// A second switch replaces the override whole: no --reason, no --for keeps neither.
	w.ok("editor", "", []string{"switch", w.name, "night", "--yes", "--in-spec"}, "override set")
	if o := w.get().Spec.Override; o == nil || o.Layout != "night" || o.Until != nil || o.Reason != "" {
		t.Fatalf("override after a switch without --reason and --for: %+v, want night with no reason and no end", o)
	}
	w.ok("editor", "", []string{"switch", w.name, "night", "--for", "2h", "--reason", "driver update", "--yes", "--in-spec"}, "override set")
	// Halfway: the transition, Reconciling, and the current plan.
	w.pass()
	w.ok("viewer", "", []string{"status", w.name}, "Transition:", "Reconciling  True    Transitioning")
	w.ok("viewer", "", []string{"plan", w.name}, "to layout night now", "PowerOnRequired")
	w.operate("night")
	w.ok("viewer", "", []string{"history", w.name}, "day", "night", "Override", "Completed", "st-")
	w.ok("viewer", "", []string{"status", w.name}, "Override:    night until "+shown(mondayMorning.Add(2*time.Hour)), "Last transitions")

	w.ok("editor", "", []string{"resume", w.name, "--in-spec"}, "override to night removed; day is wanted")
	if w.get().Spec.Override != nil {
		t.Fatal("resume left the override")
	}
	w.operate("day")
	out = w.ok("viewer", "", []string{"history", w.name, "-o", "json"})
	var hs []gpupoolv1.TransitionRecord
	if err := json.Unmarshal([]byte(out), &hs); err != nil || len(hs) != 2 || hs[0].To != "day" || hs[1].To != "night" {
		t.Errorf("history -o json: %v %+v", err, hs)
	}

	w.ok("editor", "", []string{"pause", w.name, "--in-spec"}, "paused")
	if !w.get().Spec.Paused {
		t.Fatal("pause did not set spec.paused")
	}
	w.operate("day")
	w.ok("viewer", "", []string{"status", w.name}, "Paused:", "Ready:       False (Paused)")
	w.ok("editor", "", []string{"pause", w.name, "--in-spec"}, "already paused")
	w.ok("editor", "", []string{"unpause", w.name, "--in-spec"}, "unpaused")
	if w.get().Spec.Paused {
		t.Fatal("unpause left spec.paused")
	}
	if _, err := w.run("editor", "", "switch", w.name, "weekend", "--yes", "--in-spec"); err == nil {
		t.Error("switch to a layout the pool lacks worked")
	}
}

// TestTimelineAgreesWithOperator: the timeline's first change is the operator's
// status.nextTransition, for the same spec and time, and every change after it is what
// plan.Desired says at that instant; -f reads a pool not in the cluster.
func TestTimelineAgreesWithOperator(t *testing.T) {
	w := newWorld(t, "tl-")
	w.create(w.pool())
	for _, at := range []time.Time{mondayMorning, time.Date(2026, 3, 27, 19, 55, 0, 0, berlin), time.Date(2026, 10, 23, 21, 0, 0, 0, berlin)} {
		w.clock.SetTime(at)
		p := w.operate("")
		out := w.ok("viewer", "", []string{"timeline", w.name, "--days", "7", "-o", "json"})
		var tl []timelineEntry
		if err := json.Unmarshal([]byte(out), &tl); err != nil || len(tl) < 2 {
			t.Fatalf("timeline at %s: %v %s", at, err, out)
		}
		nt := p.Status.NextTransition
		if nt == nil || tl[0].Layout != p.Status.DesiredLayout || tl[1].Layout != nt.Layout || !tl[1].From.Equal(nt.At.Time) {
			t.Errorf("at %s: timeline starts %+v, %+v; operator: desired %s, next %+v", at, tl[0], tl[1], p.Status.DesiredLayout, nt)
		}
	}

	// A file, before the pool exists; the DST change of 29 March 2026 shows as CET ->
	// CEST with the switch still at 07:50 local time.
	dir := t.TempDir()
	pool := w.pool()
	pool.Name = "draft"
	data, err := yaml.Marshal(pool)
	w.must(err)
	file := filepath.Join(dir, "pool.yaml")
	w.must(os.WriteFile(file, append([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n---\n"), data...), 0o600))
	out := squeeze(w.ok("nobody", "", []string{"timeline", "-f", file, "--from", "2026-03-27T00:00:00Z", "--days", "4"}))
	for _, want := range []string{"pool draft, 4 days from " + w.shownAt(time.Date(2026, 3, 27, 1, 0, 0, 0, berlin)) + ", times in Europe/Berlin (the pool's schedule.timeZone; --tz to change):",
		w.shownAt(time.Date(2026, 3, 27, 19, 50, 0, 0, berlin)) + " " + w.shownAt(time.Date(2026, 3, 30, 7, 50, 0, 0, berlin)) + " night"} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline -f lacks %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	cmd := newRootCommand(ioStreams(&out))
	cmd.SetArgs([]string{"version"})
	if err := cmd.Execute(); err != nil || out.String() != "kubectl-gpupool "+version.Get()+"\n" {
		t.Errorf("version: %v %q", err, out.String())
	}
	out.Reset()
	cmd = newRootCommand(ioStreams(&out))
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil || out.String() != "kubectl-gpupool "+version.Get()+"\n" {
		t.Errorf("--version: %v %q", err, out.String())
	}
}

// TestNewPoolBeforeTheOperator: status and plan say that gpupool has not reconciled a
// pool yet, rather than guessing.
func TestNewPoolBeforeTheOperator(t *testing.T) {
	w := newWorld(t, "nw-")
	w.create(w.pool())
	out := w.ok("viewer", "", []string{"status", w.name}, "Layout now:  (none yet)", "Phase:       (not reconciled yet)")
	if strings.Contains(out, "Next:") {
		t.Errorf("status guesses the next switch before gpupool decided it:\n%s", out)
	}
	w.ok("viewer", "", []string{"plan", w.name}, "no plan published: gpupool has not observed the pool yet")
	found := false
	for _, line := range strings.Split(w.ok("viewer", "", []string{"status"}), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == w.name {
			found = f[1] == "Unknown"
		}
	}
	if !found {
		t.Errorf("status lists %s without READY Unknown", w.name)
	}
}

// TestResetBudget: reset-budget sets a new gpupool.dev/reset-demand-budget value each
// time, as an editor; a pool without spec.demand has no budget to reset; a viewer may not.
func TestResetBudget(t *testing.T) {
	w := newWorld(t, "rb-")
	p := w.pool()
	p.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{},
		Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn}}}
	w.create(p)
	w.ok("editor", "", []string{"reset-budget", w.name}, "switch budget reset")
	first := w.get().Annotations[gpupoolv1.AnnotationResetDemandBudget]
	if first == "" {
		t.Fatal("reset-budget set no annotation")
	}
	w.ok("editor", "", []string{"reset-budget", w.name}, "switch budget reset")
	if again := w.get().Annotations[gpupoolv1.AnnotationResetDemandBudget]; again == first {
		t.Fatalf("a second reset kept the value %q: gpupool would not see it", again)
	}
	if _, err := w.run("viewer", "", "reset-budget", w.name); err == nil {
		t.Error("a viewer reset the budget")
	}
	cur := w.get()
	cur.Spec.Demand = nil
	if err := admin.Update(w.ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := w.run("editor", "", "reset-budget", w.name); err == nil || !strings.Contains(err.Error(), "no spec.demand") {
		t.Errorf("reset-budget of a pool without demand: %v", err)
	}
}
