package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupool/gpupool/internal/testenv"
)

// TestKubectlRunsThePlugin: with the binary on PATH, kubectl runs it as `kubectl
// gpupool`; kubectl get shows the READY and REASON columns, and kubectl wait (what
// scripts and GitOps tools use) sees Ready and Reconciling. With
// hack/kubectl_complete-gpupool on PATH too, kubectl's completion offers the plugin's
// pools and layouts; a declined prompt exits 3 through kubectl. As the viewer user.
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
	script, err := os.ReadFile(filepath.Join(testenv.Root(), "hack", "kubectl_complete-gpupool"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl_complete-gpupool"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(filepath.Join(assets, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfigs["viewer"], "TZ=Europe/Berlin",
			"PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if testing.Verbose() {
			t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
		}
		return string(out), err
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := run("", args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return out
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

	// kubectl's completion asks the plugin through kubectl_complete-gpupool.
	if out := kubectl("__complete", "gpupool", "switch", w.name, ""); !strings.Contains(out, "day\t4 workers, active") || !strings.Contains(out, "night\t1 worker") {
		t.Errorf("kubectl __complete gpupool switch %s '': want the pool's layouts:\n%s", w.name, out)
	}
	if out := kubectl("__complete", "gpupool", "status", "kc-"); !strings.Contains(out, w.name+"\t") {
		t.Errorf("kubectl __complete gpupool status kc-: want %s:\n%s", w.name, out)
	}
	// A declined prompt exits 3 (nothing changed), through kubectl too.
	out, err = run("n\n", "gpupool", "switch", w.name, "night")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitDeclined || !strings.Contains(out, "not confirmed") {
		t.Errorf("kubectl gpupool switch answered no: %v, want exit code %d\n%s", err, exitDeclined, out)
	}
}
