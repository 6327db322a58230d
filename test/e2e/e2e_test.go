//go:build e2e

// Package e2e drives the demo scenario on the local environment (real control plane,
// kwok nodes, vgpusim, the operator as a process) and checks the outcome. Run it with
// `make test-e2e`.
package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/localenv"
)

func TestDayNightDayOnLocalCluster(t *testing.T) {
	root := testenv.Root()
	dir := t.TempDir()
	opts := localenv.Options{Dir: dir, Root: root, BinDir: filepath.Join(root, "bin"), ManagerEnv: cacheMutationDetector,
		Inventory: filepath.Join(root, "test", "vgpusim", "testdata", "daynight.yaml"), Log: os.Stdout,
		// The manager runs from the image 'make image' built: a broken image fails the test.
		Image: filepath.Join(root, "dist", "image"),
		// Kueue's own manager runs too: the training Job is queued through it.
		Kueue: true}
	ctx := context.Background()
	env, err := localenv.Up(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	pids := readPids(t, dir)
	downDone := false
	t.Cleanup(func() {
		if !downDone {
			_ = localenv.Down(opts)
		}
	})
	t.Cleanup(func() {
		if t.Failed() && !downDone { // before Down: the environment goes with the test
			env.Diagnose(context.Background(), os.Stdout)
		}
	})
	ctx = watchManager(t, ctx, dir)

	scraper := startMetricsScraper(t, dir)
	res, err := localenv.RunDemo(ctx, env, os.Stdout, 2*time.Minute, 12*time.Minute)
	seen, scrapes := scraper.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// Every metric the alerts and the Grafana dashboard query is one the manager exports.
	checkMetricNames(t, root, seen, scrapes)
	if got := strings.Join(res.Layouts, ","); got != "day,night,day" {
		t.Errorf("layouts %s, want day,night,day", got)
	}
	if res.MinReadyInference < 3 {
		t.Errorf("only %d inference pods were Ready at one point: the PDB (maxUnavailable 1 of 4) was violated", res.MinReadyInference)
	}
	for _, n := range res.InferenceNodesByDay {
		if !strings.HasPrefix(n, "gpu-day-") {
			t.Errorf("by day an inference pod ran on %s, want the day nodes: %v", n, res.InferenceNodesByDay)
		}
	}
	if len(res.InferenceNodesAtNight) != 4 {
		t.Errorf("at night %d inference pods ran, want 4 (rescheduled): %v", len(res.InferenceNodesAtNight), res.InferenceNodesAtNight)
	}
	for _, n := range res.InferenceNodesAtNight {
		if n != "cpu-1" {
			t.Errorf("at night an inference pod ran on %s, want cpu-1 (the day nodes are parked)", n)
		}
	}
	// Readiness means GPUs: night-1's node was Ready a few seconds before kwok's device
	// plugin advertised nvidia.com/gpu, and the worker was seen waiting for it.
	if len(res.WaitedForGPUs) == 0 {
		t.Errorf("no worker was seen waiting for nvidia.com/gpu")
	}
	// The schedulers were warned before each drain: the day nodes before the night, the
	// night node before the day.
	for _, n := range []string{"gpu-day-1", "gpu-day-4", "gpu-night-1"} {
		if !slices.Contains(res.Warned, n) {
			t.Errorf("node %s was not seen with gpupool.dev/draining-soon before its drain; warned: %v", n, res.Warned)
		}
	}
	if res.TrainingNode != "gpu-night-1" || !res.TrainingSucceeded {
		t.Errorf("training ran on %q (succeeded %v), want gpu-night-1", res.TrainingNode, res.TrainingSucceeded)
	}
	checkKueue(t, res)

	// Node labels after the cycle.
	for _, name := range []string{"gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4", "gpu-night-1"} {
		var n corev1.Node
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(name, "gpu-day-") {
			if n.Labels[gpupoolv1.LabelLayout] != "day" || n.Labels[gpupoolv1.LabelProfile] != "grid_p100-4q" ||
				n.Labels[gpupoolv1.LabelMemoryMiB] != "4096" || n.Labels["lab.example/workload"] != "inference" || n.Spec.Unschedulable {
				t.Errorf("node %s: labels %v unschedulable %v, want day labels and schedulable", name, n.Labels, n.Spec.Unschedulable)
			}
		} else if n.Labels[gpupoolv1.LabelParked] != "true" {
			t.Errorf("node %s: labels %v, want parked", name, n.Labels)
		}
	}

	// What a user sees with kubectl.
	kubectl := func(args ...string) string {
		out, err := exec.Command(filepath.Join(root, "bin", "kubectl"), append([]string{"--kubeconfig", env.Kubeconfig}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	get := kubectl("get", "gpp")
	for _, col := range []string{"NAME", "ACTIVE", "DESIRED", "PHASE", "NEXT", "AGE", "daynight", "day", "Steady"} {
		if !strings.Contains(get, col) {
			t.Errorf("kubectl get gpp lacks %q:\n%s", col, get)
		}
	}
	describe := kubectl("describe", "gpp", "daynight")
	for _, ev := range []string{"TransitionStarted", "TransitionCompleted"} {
		if !strings.Contains(describe, ev) {
			t.Errorf("kubectl describe gpp lacks event %s:\n%s", ev, describe)
		}
	}
	// Each node's steps are events on the node: describe tells its story.
	for _, name := range []string{"gpu-day-1", "gpu-day-4"} {
		node := kubectl("describe", "node", name)
		for _, ev := range []string{"Cordoned", "Drained", "SuspendStarted", "PowerOnStarted", "Relabelled", "Uncordoned"} {
			if !strings.Contains(node, ev) {
				t.Errorf("kubectl describe node %s lacks event %s:\n%s", name, ev, node)
			}
		}
	}

	checkPoolFromUp(t, env, kubectl, filepath.Join(dir, localenv.PoolFile), filepath.Join(root, "bin", "kubectl-gpupool"))

	// Down leaves no process behind.
	if t.Failed() {
		env.Diagnose(ctx, os.Stdout) // while the environment is up
	}
	if err := localenv.Down(opts); err != nil {
		t.Fatal(err)
	}
	downDone = true
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s (pid %d) still runs after down", name, pid)
		}
	}
	if out, _ := exec.Command("pgrep", "-f", dir).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("processes still run from %s after down: %s", dir, out)
	}
}

// checkPoolFromUp applies the pool.yaml 'up' wrote, as docs/local-environment.md's
// steps do, in place of the demo's pool of the same name: the webhook admits it, the
// operator connects with its thumbprint and brings the VMs to the layout its schedule
// wants now (day or night, by the wall clock in Berlin), and kubectl gpupool shows it in
// the schedule's zone.
func checkPoolFromUp(t *testing.T, env *localenv.Env, kubectl func(...string) string, file, plugin string) {
	t.Helper()
	kubectl("delete", "gpp", localenv.DemoPool, "--wait", "--timeout=3m")
	kubectl("apply", "-f", file)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var last gpupoolv1.GPUPoolProfile
	err := env.WaitPool(ctx, localenv.DemoPool, "the pool of "+file+" to be Ready", func(p *gpupoolv1.GPUPoolProfile) bool {
		last = *p
		return p.Status.Phase == gpupoolv1.PhaseSteady && p.Status.ActiveLayout != "" && p.Status.ActiveLayout == p.Status.DesiredLayout &&
			meta.IsStatusConditionTrue(p.Status.Conditions, gpupoolv1.ConditionReady)
	})
	if err != nil {
		t.Fatalf("%v: phase %s, active %q, wanted %q, conditions %+v", err, last.Status.Phase, last.Status.ActiveLayout, last.Status.DesiredLayout, last.Status.Conditions)
	}
	if last.Spec.VCenter.Insecure || last.Spec.VCenter.Thumbprint != env.Thumbprint {
		t.Errorf("the pool of %s is not pinned to vgpusim's thumbprint: %+v", file, last.Spec.VCenter)
	}
	out, err := exec.Command(plugin, "--kubeconfig", env.Kubeconfig, "status", localenv.DemoPool).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Times in:    Europe/Berlin (the pool's schedule.timeZone") ||
		!strings.Contains(string(out), "Layout now:  "+last.Status.ActiveLayout) {
		t.Errorf("kubectl gpupool status %s: %v\n%s", localenv.DemoPool, err, out)
	}
}

// alive tells whether a process runs (a zombie waiting to be reaped does not).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) < 3 || f[2] != "Z"
}

// watchManager returns ctx, cancelled (and t failed with the log's lines that say why)
// as soon as the manager's log shows that it panicked or the Go runtime ended it, such
// as the cache mutation detector's panic: the test's waits then end at once instead of at
// their deadlines, minutes later, with a timeout that hides the cause. A manager a fault
// test kills leaves no panic in its log, and one started again starts a new log.
func watchManager(t *testing.T, ctx context.Context, dir string) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		log := filepath.Join(dir, "logs", "manager.log")
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if why := managerCrash(log); why != "" {
				t.Errorf("the manager ended:\n%s", why)
				cancel()
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}

// managerCrash is what the manager's log says from its first line that tells of a panic
// or a fatal runtime error (with the mutation detector's line before it), the next 30
// lines at most; "" when there is none.
func managerCrash(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.Contains(l, "ALTERED!") {
			return strings.Join(lines[i:min(len(lines), i+30)], "\n")
		}
	}
	return ""
}

// cacheMutationDetector runs every end-to-end manager with client-go's cache mutation
// detector: it compares each object the manager's informers hold with a copy of it every
// second and ends the manager on the first change, so a pass that wrote into a node it
// shares with the cache (observe lists them without copying) fails the test.
var cacheMutationDetector = []string{"KUBE_CACHE_MUTATION_DETECTOR=true"}

// readPids reads every pid the environment recorded, including kwokctl's own.
func readPids(t *testing.T, dir string) map[string]int {
	files, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	more, _ := filepath.Glob(filepath.Join(dir, "kwok", "clusters", "*", "pids", "*.pid"))
	out := map[string]int{}
	for _, f := range append(files, more...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			out[filepath.Base(f)] = pid
		}
	}
	if len(out) < 6 {
		t.Fatalf("want the pids of at least 6 processes, found %v", out)
	}
	return out
}

// checkKueue: the training Job, queued through Kueue by day, was held by gpupool's check
// with when night comes, and admitted once night's nodes were ready for work; the day
// flavor's quota dropped at warnAhead, before any day node was cordoned, and a day Job
// submitted then was admitted only once day was back and ready.
func checkKueue(t *testing.T, res *localenv.DemoResult) {
	t.Helper()
	if !strings.HasPrefix(res.KueueHeld, "waiting for layout night: the switch to it starts at ") || !strings.Contains(res.KueueHeld, "(in ") {
		t.Errorf("by day the training Workload's check said %q, want \"waiting for layout night: the switch to it starts at HH:MM ZONE (in ...)\"", res.KueueHeld)
	}
	if res.KueueAdmittedWith != "night nodes ready for work: gpu-night-1" {
		t.Errorf("the training Workload was first seen admitted with %q, want the night node ready for work", res.KueueAdmittedWith)
	}
	if !res.DayQuotaDroppedBeforeDrain {
		t.Errorf("the day flavor's quota was not seen at 0 before the day nodes were cordoned")
	}
	if want := "day nodes ready for work: gpu-day-1,gpu-day-2,gpu-day-3,gpu-day-4; layouts seen day,night,day"; res.LateAdmittedWith != want {
		t.Errorf("the day Job submitted after the quota drop was first seen admitted with %q, want %q", res.LateAdmittedWith, want)
	}
}
