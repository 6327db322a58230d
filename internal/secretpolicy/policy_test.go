package secretpolicy

import (
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	p := Parse("gpupool-system", " team-a, ,gpupool-system,team-a,team-b")
	for ns, want := range map[string]bool{
		"gpupool-system": true, "team-a": true, "team-b": true,
		"kube-system": false, "default": false, "": false,
	} {
		if got := p.Allows(ns); got != want {
			t.Errorf("Allows(%q) = %v, want %v", ns, got, want)
		}
	}
	if got := strings.Join(p.Namespaces(), ","); got != "gpupool-system,team-a,team-b" {
		t.Errorf("Namespaces() = %s", got)
	}
	if !strings.Contains(p.Refusal("kube-system"), `"gpupool-system"`) {
		t.Errorf("refusal does not say where to put the Secret: %s", p.Refusal("kube-system"))
	}
	var zero Policy
	if zero.Allows("default") || zero.Allows("kube-system") {
		t.Error("the zero policy must allow no namespace")
	}
}
