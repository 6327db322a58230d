package webhook

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestGPUResourceRule checks the webhook's own extended-resource rule, without the CRD's
// CEL rule in front of it (the admission tables see CEL's refusal first): classes of
// names a device plugin can and cannot register.
func TestGPUResourceRule(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"", true},
		{"nvidia.com/gpu", true},
		{"nvidia.com/gpu.shared", true},
		{"nvidia.com/mig-1g.10gb", true},
		{"nvidia.com/GRID-P100-4Q", true},
		{"example.org/x_y", true},
		{"kubernetes.io.example.com/gpu", true}, // a domain of its own, not a kubernetes.io subdomain
		{"gpu", false},
		{"cpu", false},
		{"memory", false},
		{"pods", false},
		{"nvidia.com", false},
		{"kubernetes.io/gpu", false},
		{"Kubernetes.IO/gpu", false},
		{"node.kubernetes.io/gpu", false},
		{"requests.nvidia.com/gpu", false},
		{"nvidia gpu", false},
		{"nvidia.com/", false},
		{"/gpu", false},
		{"nvidia.com/" + strings.Repeat("g", 64), false},
	}
	for _, c := range cases {
		why := extendedResourceProblem(c.name)
		if (why == "") != c.ok {
			t.Errorf("extendedResourceProblem(%q) = %q, want ok %v", c.name, why, c.ok)
		}
		if !c.ok && !strings.Contains(why, "such as nvidia.com/gpu") {
			t.Errorf("extendedResourceProblem(%q) = %q: no hint of what to write", c.name, why)
		}
		r := c.name
		spec := &gpupoolv1.GPUPoolProfileSpec{Readiness: gpupoolv1.ReadinessSpec{GPUResource: &r}}
		errs := validateReadiness(field.NewPath("spec", "readiness"), spec)
		if (len(errs) == 0) != c.ok || (!c.ok && errs[0].Field != "spec.readiness.gpuResource") {
			t.Errorf("validateReadiness(gpuResource %q) = %v, want ok %v", c.name, errs, c.ok)
		}
	}
}

// TestReadinessLabelsGPUPoolSets: every key some layout sets, and every gpupool.dev/
// key, is refused with the layout's index; keys nobody in the spec sets pass.
func TestReadinessLabelsGPUPoolSets(t *testing.T) {
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{
		{Name: "day", NodeLabels: map[string]string{"example.com/a": "1"}},
		{Name: "night", NodeLabels: map[string]string{"example.com/a": "2", "example.com/b": "x"}},
	}}
	cases := map[string]string{
		"example.com/a":             "spec.layouts[0].nodeLabels",
		"example.com/b":             "spec.layouts[1].nodeLabels",
		gpupoolv1.LabelPool:         "gpupool sets itself",
		gpupoolv1.LabelState:        "gpupool sets itself",
		"example.com/c":             "",
		"nvidia.com/vgpu.present":   "",
		"gpupool.dev.example.com/x": "",
	}
	for key, want := range cases {
		spec.Readiness.NodeLabels = map[string]string{key: "true"}
		errs := validateReadiness(field.NewPath("spec", "readiness"), spec)
		if want == "" {
			if len(errs) != 0 {
				t.Errorf("%s: refused: %v", key, errs)
			}
			continue
		}
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) || !strings.Contains(errs[0].Field, "spec.readiness.nodeLabels["+key+"]") || !strings.Contains(errs[0].Error(), "nodeReadyTimeout") {
			t.Errorf("%s: got %v, want one error at spec.readiness.nodeLabels[%s] saying %q", key, errs, key, want)
		}
	}
}

// TestWarnAheadNotNegative: the webhook refuses a negative warnAhead on its own
// (docs/admission.md lists it as checked by CEL and the webhook).
func TestWarnAheadNotNegative(t *testing.T) {
	known := func(*field.Path, string) *field.Error { return nil }
	for _, d := range []time.Duration{-time.Nanosecond, -time.Minute, 0, time.Minute} {
		s := &gpupoolv1.Schedule{WarnAhead: &metav1.Duration{Duration: d}}
		errs := validateSchedule(field.NewPath("spec", "schedule"), s, known)
		if refused := len(errs) > 0; refused != (d < 0) {
			t.Errorf("warnAhead %s: errors %v", d, errs)
		}
		if d < 0 && (errs[0].Field != "spec.schedule.warnAhead" || !strings.Contains(errs[0].Error(), "such as 15m")) {
			t.Errorf("warnAhead %s: %v", d, errs[0])
		}
	}
}

// TestGPUReplicasRule checks the webhook's own gpuReplicas rule (the CRD's CEL rule
// refuses first on a real API server) and the warning when nothing waits for them.
func TestGPUReplicasRule(t *testing.T) {
	for r, ok := range map[int32]bool{-1: false, 0: false, 1: true, 4: true, MaxGPUReplicas: true, MaxGPUReplicas + 1: false} {
		l := &gpupoolv1.Layout{Name: "day", GPUReplicas: &r}
		errs := validateGPUReplicas(field.NewPath("spec", "layouts").Index(0), l)
		if (len(errs) == 0) != ok {
			t.Errorf("gpuReplicas %d: errors %v, want ok %v", r, errs, ok)
		}
		if !ok && (errs[0].Field != "spec.layouts[0].gpuReplicas" || !strings.Contains(errs[0].Error(), "leave it out to wait for at least one per vGPU")) {
			t.Errorf("gpuReplicas %d: %v", r, errs[0])
		}
	}
	if errs := validateGPUReplicas(field.NewPath("spec", "layouts").Index(0), &gpupoolv1.Layout{Name: "day"}); len(errs) != 0 {
		t.Errorf("gpuReplicas left out: %v", errs)
	}
	four, none := int32(4), ""
	spec := &gpupoolv1.GPUPoolProfileSpec{Layouts: []gpupoolv1.Layout{{Name: "night"}, {Name: "day", GPUReplicas: &four}}}
	if w := gpuReplicasWarnings(spec); len(w) != 0 {
		t.Errorf("warnings with the default gpuResource: %v", w)
	}
	spec.Readiness.GPUResource = &none
	if w := gpuReplicasWarnings(spec); len(w) != 1 || !strings.Contains(w[0], "spec.layouts[1].gpuReplicas has no effect") {
		t.Errorf("warnings with gpuResource \"\": %v, want one naming spec.layouts[1].gpuReplicas", w)
	}
}
