package main

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyPackages are module paths the manager must not link: k8s.io/apiserver (with CEL,
// gRPC and OpenTelemetry behind it) was 254 packages and 34 MB of a 79 MB binary for one
// filter of the metrics endpoint (internal/metricsauth says why it matters); the
// simulators are test and local-environment code.
var heavyPackages = []string{
	"k8s.io/apiserver/",
	"github.com/google/cel-go/",
	"google.golang.org/grpc",
	"go.opentelemetry.io/otel/sdk",
	"github.com/vmware/govmomi/simulator",
	"github.com/gpupool/gpupool/cmd/vgpusim",
}

// TestManagerLinksNoHeavyPackage lists what the manager's binary links (go list, as the
// build resolves it) and fails on any of heavyPackages, naming who imports it.
func TestManagerLinksNoHeavyPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 100 {
		t.Fatalf("go list gave %d packages: not the manager's dependencies", len(lines))
	}
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			for _, heavy := range heavyPackages {
				if strings.HasPrefix(imp, heavy) && !strings.HasPrefix(pkg, heavy) {
					t.Errorf("%s imports %s: the manager must not link %s", pkg, imp, heavy)
				}
			}
		}
	}
}
