package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlRunsThePlugin: with the binary on PATH, kubectl runs it as `kubectl
// gpupool`; kubectl get shows the READY and REASON columns, and kubectl wait (what
// scripts and GitOps tools use) sees Ready and Reconciling. As the viewer user.
func TestKubectlRunsThePlugin(t *testing.T) {
	w := newWorld(t, "kc-")
	w.create(w.pool())
	w.operate("day")

	// The test binary runs as the plugin under that name (see TestMain).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "kubectl-gpupool")); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(assets, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigs["viewer"], "TZ=Europe/Berlin",
			"PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if testing.Verbose() {
			t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
		}
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := kubectl("gpupool", "version"); !strings.HasPrefix(out, "kubectl-gpupool ") {
		t.Errorf("kubectl gpupool version: %q", out)
	}
	if out := kubectl("gpupool", "status", w.name); !strings.Contains(out, "Layout now:  day") {
		t.Errorf("kubectl gpupool status: %s", out)
	}
	out := kubectl("get", "gpp", w.name)
	if lines := strings.Split(out, "\n"); len(lines) < 2 || !strings.HasPrefix(lines[0], "NAME") ||
		strings.Join(strings.Fields(lines[0])[:3], " ") != "NAME READY REASON" || strings.Join(strings.Fields(lines[1])[:3], " ") != w.name+" True LayoutActive" {
		t.Errorf("kubectl get gpp:\n%s", out)
	}
	for _, cond := range []string{"condition=Ready", "condition=Reconciling=false", "condition=Stalled=false"} {
		if out := kubectl("wait", "--for="+cond, "gpp/"+w.name, "--timeout=10s"); !strings.Contains(out, "condition met") {
			t.Errorf("kubectl wait --for=%s: %s", cond, out)
		}
	}
}
