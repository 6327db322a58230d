package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestBadRequestsAreRejected: GPUPoolRequests the CRD's rules or the webhook refuse,
// each refusal naming the field, the value and what to write instead; and requests that
// are accepted.
func TestBadRequestsAreRejected(t *testing.T) {
	ctx := context.Background()
	pool := valid("rqpool")
	if err := k8s.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, pool) })
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: fixedNow.Add(d)} }
	switchTo := func(layout string) gpupoolv1.GPUPoolRequestSpec {
		return gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: gpupoolv1.RequestSwitch, Layout: layout, Until: at(time.Hour)}
	}
	cases := []struct {
		name             string
		spec             gpupoolv1.GPUPoolRequestSpec
		raw              func(map[string]any)
		path, value, fix string
	}{
		{name: "no such pool", spec: gpupoolv1.GPUPoolRequestSpec{Pool: "nopool", Action: gpupoolv1.RequestPause},
			path: "spec.pool", value: `"nopool"`, fix: "kubectl get gpp lists them"},
		{name: "no such layout", spec: switchTo("nigth"),
			path: "spec.layout", value: `"nigth"`, fix: "write one of day, night"},
		{name: "until past", spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: gpupoolv1.RequestPause, Until: at(-time.Minute)},
			path: "spec.until", value: fixedNow.Add(-time.Minute).UTC().Format(time.RFC3339), fix: "write a later time, or spec.duration"},
		{name: "switch without layout", spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: gpupoolv1.RequestSwitch},
			path: "spec", fix: "spec.layout is required for action Switch"},
		{name: "layout on a pause", spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: gpupoolv1.RequestPause, Layout: "day"},
			path: "spec", value: "Pause", fix: "remove it, or write action: Switch"},
		{name: "until and duration", spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: gpupoolv1.RequestPause, Until: at(time.Hour), Duration: &metav1.Duration{Duration: time.Hour}},
			path: "spec", fix: "set spec.until or spec.duration, not both"},
		{name: "expiry on a resume", spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: gpupoolv1.RequestResume, Duration: &metav1.Duration{Duration: time.Hour}},
			path: "spec", value: "Resume", fix: "takes effect once; remove them"},
		{name: "duration in days", spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: gpupoolv1.RequestPause},
			raw:  func(u map[string]any) { u["spec"].(map[string]any)["duration"] = "1d" },
			path: "spec.duration", value: `"1d"`, fix: "write 24h for a day"},
		{name: "unknown action", spec: gpupoolv1.GPUPoolRequestSpec{Pool: pool.Name, Action: "Swtich", Layout: "day"},
			path: "spec.action", value: `"Swtich"`, fix: `"Switch"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := createRequest(ctx, "bad-"+strings.ReplaceAll(tc.name, " ", "-"), tc.spec, tc.raw)
			if err == nil {
				t.Fatal("accepted, want refused")
			}
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{tc.path, tc.value, tc.fix} {
				if want != "" && !strings.Contains(msg, want) {
					t.Errorf("message does not contain %q", want)
				}
			}
			for _, raw := range rawCEL {
				if strings.Contains(msg, raw) {
					t.Errorf("message shows the raw CEL (%q)", raw)
				}
			}
		})
	}

	// Accepted: a switch for a while, a pause without expiry (8h), a resume. A
	// request's spec cannot be changed.
	for i, spec := range []gpupoolv1.GPUPoolRequestSpec{
		{Pool: pool.Name, Action: gpupoolv1.RequestSwitch, Layout: "night", Duration: &metav1.Duration{Duration: 2 * time.Hour}, Reason: "driver update"},
		{Pool: pool.Name, Action: gpupoolv1.RequestPause},
		{Pool: pool.Name, Action: gpupoolv1.RequestResume},
	} {
		name := "good-" + strings.ToLower(string(spec.Action))
		if err := createRequest(ctx, name, spec, nil); err != nil {
			t.Fatalf("good request %d refused: %v", i, err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, &gpupoolv1.GPUPoolRequest{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	}
	var q gpupoolv1.GPUPoolRequest
	if err := k8s.Get(ctx, client.ObjectKey{Name: "good-switch"}, &q); err != nil {
		t.Fatal(err)
	}
	q.Spec.Layout = "day"
	if err := k8s.Update(ctx, &q); err == nil || !strings.Contains(err.Error(), "cannot be changed: create a new request") {
		t.Errorf("changing a request's spec: %v, want refused with what to do instead", err)
	}
}

// createRequest creates a request through unstructured, so that raw can carry values
// the Go types cannot.
func createRequest(ctx context.Context, name string, spec gpupoolv1.GPUPoolRequestSpec, raw func(map[string]any)) error {
	q := &gpupoolv1.GPUPoolRequest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(q)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(gpupoolv1.GroupVersion.WithKind("GPUPoolRequest"))
	delete(u.Object, "status")
	if raw != nil {
		raw(u.Object)
	}
	return k8s.Create(ctx, u)
}
