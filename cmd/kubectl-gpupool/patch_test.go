package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// changeBeforePatch is the plugin's client with change run (as admin) just before its
// first Patch, as the operator's status writes or another user would between the
// plugin's read and its write. It counts the Patch calls.
type changeBeforePatch struct {
	client.Client
	change  func()
	patches int
}

func (c *changeBeforePatch) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.patches++
	if c.patches == 1 {
		c.change()
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// changeBefore makes the plugin's next command meet change before its first Patch.
func (w *world) changeBefore(change func()) *changeBeforePatch {
	cp := &changeBeforePatch{change: change}
	w.wrap = func(c client.Client) client.Client { cp.Client = c; return cp }
	return cp
}

// bumpStatus writes the pool's status as the operator does in a transition: the
// resourceVersion changes, the generation does not.
func (w *world) bumpStatus(n int) {
	w.t.Helper()
	p := w.get()
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: "TestBump", Status: metav1.ConditionTrue, Reason: "Bumped", Message: fmt.Sprint(n)})
	w.must(admin.Status().Update(w.ctx, p))
}

// TestSteerVerbsRetryOverStatusWrites: switch, pause, unpause and resume succeed when the
// operator writes the pool's status between their read and their patch (a conflict on
// the resourceVersion they read), by applying the same change on the pool read again.
func TestSteerVerbsRetryOverStatusWrites(t *testing.T) {
	w := newWorld(t, "rs-")
	w.create(w.pool())
	w.operate("day")
	steps := []struct {
		args  []string
		want  string
		check func(*gpupoolv1.GPUPoolProfile) bool
	}{
		{[]string{"switch", w.name, "night", "--for", "5m", "--yes", "--in-spec"}, "override set",
			func(p *gpupoolv1.GPUPoolProfile) bool {
				return p.Spec.Override != nil && p.Spec.Override.Layout == "night"
			}},
		{[]string{"pause", w.name, "--in-spec"}, "paused", func(p *gpupoolv1.GPUPoolProfile) bool { return p.Spec.Paused }},
		{[]string{"unpause", w.name, "--in-spec"}, "unpaused", func(p *gpupoolv1.GPUPoolProfile) bool { return !p.Spec.Paused }},
		{[]string{"resume", w.name, "--in-spec"}, "override to night removed", func(p *gpupoolv1.GPUPoolProfile) bool { return p.Spec.Override == nil }},
	}
	for i, s := range steps {
		cp := w.changeBefore(func() { w.bumpStatus(i) })
		w.ok("editor", "", s.args, s.want)
		if cp.patches != 2 {
			t.Errorf("%v: %d patches, want 2 (a conflict, then the same change again)", s.args, cp.patches)
		}
		if !s.check(w.get()) {
			t.Errorf("%v: the pool's spec was not changed: %+v", s.args, w.get().Spec)
		}
	}
}

// TestSteerVerbsRefuseSpecChanges: when the pool's spec changed between a verb's read and
// its patch, the verb changes nothing and says what changed.
func TestSteerVerbsRefuseSpecChanges(t *testing.T) {
	w := newWorld(t, "rf-")
	w.create(w.pool())
	w.operate("day")
	setSpec := func(spec string) func() {
		return func() {
			w.must(admin.Patch(w.ctx, w.get(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":`+spec+`}`))))
		}
	}

	// Someone else switches to day while this user switches to night.
	w.changeBefore(setSpec(`{"override":{"layout":"day","reason":"other"}}`))
	out, err := w.run("editor", "", "switch", w.name, "night", "--for", "5m", "--yes", "--in-spec")
	if err == nil || !strings.Contains(err.Error(), `spec.override changed from none to day ("other") since the command read it; run it again`) {
		t.Fatalf("switch over another's override: %v\n%s", err, out)
	}
	if o := w.get().Spec.Override; o == nil || o.Layout != "day" {
		t.Fatalf("the other override was replaced: %+v", o)
	}

	// Someone pauses the pool while this user resumes it.
	w.changeBefore(setSpec(`{"paused":true}`))
	out, err = w.run("editor", "", "resume", w.name, "--in-spec")
	if err == nil || !strings.Contains(err.Error(), "spec.paused changed from false to true since the command read it") {
		t.Fatalf("resume over a pause: %v\n%s", err, out)
	}
	if w.get().Spec.Override == nil {
		t.Fatal("resume removed the override after the spec changed")
	}
}
