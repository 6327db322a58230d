package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// bound is how long a test waits for the plugin to see a change it just made: a bound
// against a hang, not a delay the tests rely on.
const bound = 30 * time.Second

// running is the plugin running in the background (status -w, switch --wait).
type running struct {
	t      *testing.T
	cancel context.CancelFunc
	seen   chan *gpupoolv1.GPUPoolProfile // every pool state the plugin handled
	done   chan error
	out    bytes.Buffer // read only after done
}

// start runs the plugin as user in the background, at the world's time.
func (w *world) start(user string, args ...string) *running {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	r := &running{t: w.t, cancel: cancel, seen: make(chan *gpupoolv1.GPUPoolProfile, 1024), done: make(chan error, 1)}
	a := newApp(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &r.out, ErrOut: &r.out}, w.clock.Now)
	a.watched = func(p *gpupoolv1.GPUPoolProfile) {
		select {
		case r.seen <- p.DeepCopy():
		default: // a test that stopped reading does not block the plugin
		}
	}
	cmd := a.command()
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfigs[user]}, args...))
	go func() { r.done <- cmd.ExecuteContext(ctx) }()
	w.t.Cleanup(cancel)
	return r
}

// await returns the first pool state the plugin handles that satisfies ok.
func (r *running) await(what string, ok func(*gpupoolv1.GPUPoolProfile) bool) *gpupoolv1.GPUPoolProfile {
	r.t.Helper()
	timeout := time.After(bound)
	for {
		select {
		case p := <-r.seen:
			if ok(p) {
				return p
			}
		case err := <-r.done:
			r.t.Fatalf("the plugin ended before %s: %v\n%s", what, err, r.out.String())
		case <-timeout:
			r.t.Fatalf("the plugin did not see %s within %s", what, bound)
		}
	}
}

// result waits for the plugin to end and returns its error and output.
func (r *running) result() (string, error) {
	r.t.Helper()
	select {
	case err := <-r.done:
		return r.out.String(), err
	case <-time.After(bound):
		r.t.Fatalf("the plugin did not end within %s", bound)
		return "", nil
	}
}

func anyPool(*gpupoolv1.GPUPoolProfile) bool { return true }

// TestStatusWatch: status -w prints the pool, then again on each change, until its
// context ends (an interrupt), which ends it without an error.
func TestStatusWatch(t *testing.T) {
	w := newWorld(t, "sw-")
	w.create(w.pool())
	w.operate("day")

	r := w.start("viewer", "status", w.name, "-w")
	r.await("the pool", anyPool)
	w.ok("editor", "", []string{"pause", w.name, "--in-spec"})
	w.pass()
	r.await("the pool paused", func(p *gpupoolv1.GPUPoolProfile) bool { return p.Status.Phase == gpupoolv1.PhasePaused })
	r.cancel()
	out, err := r.result()
	if err != nil {
		t.Fatalf("status -w ended with %v\n%s", err, out)
	}
	steady, paused := strings.Index(out, "Phase:       Steady"), strings.Index(out, "Phase:       Paused")
	if steady < 0 || paused < steady || !strings.Contains(out, "Paused:      yes") {
		t.Errorf("status -w did not print the pool steady, then paused:\n%s", out)
	}
	if n := strings.Count(out, "Pool:        "+w.name); n < 2 || n > 4 {
		t.Errorf("status -w printed the pool %d times for a spec change and a status change:\n%s", n, out)
	}

	if out, err := w.run("viewer", "", "status", w.name, "-w", "--timeout", "1ms"); err != nil {
		t.Errorf("status -w --timeout: %v\n%s", err, out)
	}
	if out, err := w.run("viewer", "", "status", "-w"); err == nil {
		t.Errorf("status -w without a name: %s", out)
	}
}

// TestSwitchWait: switch --wait returns once the layout is active and Ready for the new
// spec, fails when the pool stalls, and fails with where the pool is on a timeout.
func TestSwitchWait(t *testing.T) {
	w := newWorld(t, "sa-")
	p := w.pool()
	w.create(p)
	w.operate("day")

	r := w.start("editor", "switch", w.name, "night", "--yes", "--wait", "--timeout", "10m", "--in-spec")
	// Ready=True from before the switch must not count.
	r.await("the override", func(p *gpupoolv1.GPUPoolProfile) bool { return p.Spec.Override != nil })
	w.operate("night")
	out, err := r.result()
	if err != nil || !strings.Contains(out, "pool "+w.name+": layout night is active and Ready") {
		t.Fatalf("switch --wait: %v\n%s", err, out)
	}
	if got := w.get(); got.Status.ActiveLayout != "night" || got.Status.Transition != nil {
		t.Errorf("switch --wait returned with layout %s, transition %v", got.Status.ActiveLayout, got.Status.Transition)
	}

	out, err = w.run("editor", "", "switch", w.name, "day", "--yes", "--wait", "--timeout", "100ms", "--in-spec")
	if err == nil || !strings.Contains(err.Error(), "layout day not reached within 100ms") || !strings.Contains(err.Error(), "gpupool has not acted on spec generation") {
		t.Errorf("switch --wait that times out: %v\n%s", err, out)
	}
	w.operate("day")
	w.ok("editor", "", []string{"resume", w.name, "--in-spec"}) // the schedule wants day too

	// A layout with a VM vCenter does not have stalls the pool.
	cur := w.get()
	cur.Spec.Layouts[1].Workers[0].VM = "sa-night-missing"
	w.must(admin.Update(w.ctx, cur))
	w.operate("day")
	// switch refuses a layout the operator's plan says cannot be reached, unless --force.
	if pv := w.get().Status.Plan; pv == nil || pv.Layout != "night" || len(pv.Problems) == 0 {
		t.Fatalf("status.plan does not show night's problem: %+v", pv)
	}
	out, err = w.run("editor", "", "switch", w.name, "night", "--yes", "--in-spec")
	if err == nil || !strings.Contains(err.Error(), "layout night cannot be reached (") || !strings.Contains(err.Error(), "--force") || w.get().Spec.Override != nil {
		t.Fatalf("switch to a layout that cannot be reached: %v\n%s", err, out)
	}
	r = w.start("editor", "switch", w.name, "night", "--yes", "--force", "--wait", "--in-spec")
	r.await("the override", func(p *gpupoolv1.GPUPoolProfile) bool { return p.Spec.Override != nil })
	for range 5 {
		w.pass()
	}
	out, err = r.result()
	if err == nil || !strings.Contains(err.Error(), "pool "+w.name+" is stalled (") {
		t.Errorf("switch --wait to a layout that cannot be reached: %v\n%s", err, out)
	}
}
