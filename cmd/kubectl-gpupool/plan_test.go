package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestPrintPlanShowsTheConversion: a plan to a layout by count lists the GPUs chosen and
// not chosen with why, before the steps; what status.plan leaves out is named with how
// to see it.
func TestPrintPlanShowsTheConversion(t *testing.T) {
	p := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "lab", Generation: 3}}
	p.Status.Phase = gpupoolv1.PhaseTransitioning
	p.Status.Plan = &gpupoolv1.PlanPreview{For: gpupoolv1.PlanForCurrent, Layout: "night", Generation: 3, Steps: 1,
		Hosts: []gpupoolv1.HostPlanPreview{{Host: "esx-02", Steps: []gpupoolv1.PlanStepPreview{{VM: "day-2-02", Action: gpupoolv1.StepDrainRequired}}}},
		Conversion: &gpupoolv1.ConversionPreview{Profile: "grid_p100-16q", Count: 2, Evicted: 1, Cost: 1, Ineligible: 3,
			Chosen: []gpupoolv1.GPUChoicePreview{
				{Host: "esx-02", GPU: "0000:5b:00.0", Why: "chosen: evicts 1 GPU pod, displaces VMs day-2-02 -> night-2-1"},
				{Host: "esx-03", GPU: "0000:3b:00.0", Why: "chosen: free, evicts nothing"}},
			NotChosen: []gpupoolv1.GPUChoicePreview{{Host: "esx-01", GPU: "0000:7b:00.0", Why: "not chosen: emptying it disrupts VM day-1-03 (1 do-not-disrupt pod, 1 GPU pod), which the disruption weights forbid"}}}}
	var out bytes.Buffer
	if err := printPlan(&out, p, screen{loc: time.UTC, now: time.Unix(0, 0)}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"2 GPUs converted to grid_p100-16q, evicting 1 GPU pod (cost 1)",
		"esx-02  0000:5b:00.0  chosen: evicts 1 GPU pod",
		"esx-01  0000:7b:00.0  not chosen: emptying it disrupts VM day-1-03",
		"3 GPUs cannot be converted (kubectl gpupool plan lab --live lists them with why)",
		"layout night: 1 step on 1 host",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "converted to") > strings.Index(got, "layout night: 1 step") {
		t.Errorf("the conversion is printed after the steps:\n%s", got)
	}
}
