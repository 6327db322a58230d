package main

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// requestsOf lists the world's pool's requests, by action.
func (w *world) requestsOf(act gpupoolv1.RequestAction) []gpupoolv1.GPUPoolRequest {
	w.t.Helper()
	var all gpupoolv1.GPUPoolRequestList
	w.must(admin.List(w.ctx, &all))
	var out []gpupoolv1.GPUPoolRequest
	for _, q := range all.Items {
		if q.Spec.Pool == w.name && q.Spec.Action == act {
			out = append(out, q)
		}
	}
	return out
}

// TestSteerVerbsByRequest: switch, resume, pause and unpause as a user bound to
// gpupool-viewer and gpupool-requester create GPUPoolRequests and never write the
// pool's spec; the operator follows them; an override kept in the spec is left to Git.
func TestSteerVerbsByRequest(t *testing.T) {
	w := newWorld(t, "rq-")
	w.create(w.pool())
	w.operate("day")
	gen := w.get().Generation

	out, err := w.run("requester", "n\n", "switch", w.name, "night", "--for", "2h", "--reason", "driver update")
	if err == nil || !strings.Contains(out, "Create the request? [y/N]") || len(w.requestsOf(gpupoolv1.RequestSwitch)) != 0 {
		t.Fatalf("switch answered no: %v, %d requests\n%s", err, len(w.requestsOf(gpupoolv1.RequestSwitch)), out)
	}
	until := mondayMorning.Add(2 * time.Hour)
	w.ok("requester", "y\n", []string{"switch", w.name, "night", "--for", "2h", "--reason", "driver update"},
		"will want night (override to layout night until "+w.shownAt(until)+": driver update)", "request "+w.name+"-switch-")
	qs := w.requestsOf(gpupoolv1.RequestSwitch)
	// --for names the duration, which the operator counts on its own clock (from when it
	// takes the request into account), not an end this machine's clock stamped.
	if len(qs) != 1 || qs[0].Spec.Layout != "night" || qs[0].Spec.Until != nil || qs[0].Spec.Duration == nil || qs[0].Spec.Duration.Duration != 2*time.Hour || qs[0].Spec.Reason != "driver update" {
		t.Fatalf("switch requests %+v, want one to night for 2h", qs)
	}
	p := w.operate("night")
	if p.Generation != gen || p.Spec.Override != nil {
		t.Fatalf("the pool's spec changed (generation %d to %d, override %+v)", gen, p.Generation, p.Spec.Override)
	}
	w.ok("viewer", "", []string{"status", w.name}, "Wanted:      night (override to layout night until "+w.shownAt(until)+": request "+qs[0].Name+": driver update)",
		"Request:     "+qs[0].Name+": switch to night until "+w.shownAt(until))
	w.ok("viewer", "", []string{"history", w.name, "-o", "json"}, `"to": "night"`, `"reason": "Override"`, "request "+qs[0].Name+": driver update")

	// The requester may not write the pool's spec.
	if out, err := w.run("requester", "", "switch", w.name, "day", "--yes", "--in-spec"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("switch --in-spec as requester: %v, want forbidden\n%s", err, out)
	}

	w.ok("requester", "", []string{"resume", w.name}, "ends the switch to night (request "+qs[0].Name+"); day is wanted")
	p = w.operate("day")
	if p.Status.DesiredReason != gpupoolv1.DesiredBySchedule {
		t.Errorf("desired reason %s after resume, want Schedule", p.Status.DesiredReason)
	}
	w.ok("requester", "", []string{"resume", w.name}, "has no override")

	w.ok("requester", "", []string{"pause", w.name, "--for", "1h"}, "paused until about "+w.shownAt(mondayMorning.Add(time.Hour)), "request "+w.name+"-pause-")
	for range 3 {
		w.pass()
	}
	if p = w.get(); !meta.IsStatusConditionTrue(p.Status.Conditions, gpupoolv1.ConditionPaused) || p.Spec.Paused {
		t.Fatalf("after pause: Paused condition %v, spec.paused %t; want paused by the request only", meta.IsStatusConditionTrue(p.Status.Conditions, gpupoolv1.ConditionPaused), p.Spec.Paused)
	}
	w.ok("viewer", "", []string{"status", w.name}, "Paused:      yes (request "+w.name+"-pause-")
	w.ok("requester", "", []string{"pause", w.name}, "already paused")
	w.ok("requester", "", []string{"unpause", w.name}, "unpaused (request "+w.name+"-unpause-")
	w.pass()
	if meta.IsStatusConditionTrue(w.get().Status.Conditions, gpupoolv1.ConditionPaused) {
		t.Fatal("still paused after unpause")
	}

	// An override in the spec is Git's: resume says so and changes nothing.
	p = w.get()
	p.Spec.Override = &gpupoolv1.Override{Layout: "night"}
	w.must(admin.Update(w.ctx, p))
	if out, err := w.run("requester", "", "resume", w.name); err == nil || !strings.Contains(err.Error(), "--in-spec") {
		t.Errorf("resume of an override in the spec: %v, want a pointer to --in-spec\n%s", err, out)
	}
	if got := len(w.requestsOf(gpupoolv1.RequestResume)); got != 1 {
		t.Errorf("%d Resume requests, want 1 (the second resume had nothing to end)", got)
	}
}
