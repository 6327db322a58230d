//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/localenv"
)

// TestSwitchesOnceAtScaleOnLocalCluster: the benchmark's world at 4 hosts x 4 P100s
// (each GPU with four 4Q day VMs and one 16Q night VM, 80 VMs), one pod per day node,
// the manager from the image and vgpusim's tasks taking seconds, switched three times
// in a row (day -> night -> day -> night). Counted from outside, from vgpusim's task
// log and a watch of the nodes: each changed VM gets each operation once per switch,
// each drained node is cordoned once, and the pool never reports a layout infeasible.
func TestSwitchesOnceAtScaleOnLocalCluster(t *testing.T) {
	root := testenv.Root()
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yaml")
	if err := localenv.WriteBenchInventory(inv, 4, 4); err != nil {
		t.Fatal(err)
	}
	opts := localenv.Options{Dir: dir, Root: root, BinDir: filepath.Join(root, "bin"), ManagerEnv: cacheMutationDetector, Inventory: inv, Log: os.Stdout,
		Image: filepath.Join(root, "dist", "image"),
		VgpusimArgs: []string{"--task-delay", "SuspendVM_Task=2s", "--task-delay", "PowerOnVM_Task=3s",
			"--task-delay", "PowerOffVM_Task=2s", "--task-delay", "ReconfigVM_Task=2s",
			"--calls-file", filepath.Join(dir, "vgpusim-calls.json"), "--tasks-file", filepath.Join(dir, "vgpusim-tasks.json")}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	env, err := localenv.Up(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = localenv.Down(opts) })
	diagnoseOnFailure(t, ctx, env)
	ctx = watchManager(t, ctx, dir)
	checks, err := localenv.RunSwitchesOnce(ctx, env, localenv.BenchOptions{Hosts: 4, GPUs: 4, Pods: true}, []string{"night", "", "night"})
	t.Logf("\n%s", localenv.FormatOnce([]*localenv.BenchResult{{Hosts: 4, Once: checks}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 3 {
		t.Fatalf("%d switches checked, want 3", len(checks))
	}
	for _, c := range checks {
		if len(c.Repeats) > 0 {
			t.Errorf("%s repeated: %v", c.Switch, c.Repeats)
		}
		if c.CordonsPerNode != 1 {
			t.Errorf("%s: %.2f cordons per drained node, want 1", c.Switch, c.CordonsPerNode)
		}
	}
	var evs corev1.EventList
	if err := env.Client.List(ctx, &evs); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "LayoutInfeasible" && e.InvolvedObject.Name == localenv.BenchPool {
			t.Errorf("the pool reported a layout infeasible: %s", e.Message)
		}
	}
}
