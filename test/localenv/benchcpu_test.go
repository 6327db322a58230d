package localenv

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestControlPlaneArgs(t *testing.T) {
	for _, c := range []struct {
		lease time.Duration
		qps   int
		want  []string
	}{
		{0, 0, []string{"--node-lease-duration-seconds", "40"}},
		{40 * time.Second, 0, []string{"--node-lease-duration-seconds", "40"}},
		// Shorter than the default: the controller's own grace period (40 s) is longer.
		{20 * time.Second, 0, []string{"--node-lease-duration-seconds", "20"}},
		{400 * time.Second, 0, []string{"--node-lease-duration-seconds", "400",
			"--extra-args", "kube-controller-manager=node-monitor-grace-period=400s"}},
		{0, 200, []string{"--node-lease-duration-seconds", "40",
			"--extra-args", "kube-controller-manager=kube-api-qps=200", "--extra-args", "kube-scheduler=kube-api-qps=200",
			"--extra-args", "kube-controller-manager=kube-api-burst=400", "--extra-args", "kube-scheduler=kube-api-burst=400"}},
		// Each component's first flag before any second one (kwokctl v0.8.0 indexes
		// its patches by the first flag's position).
		{400 * time.Second, 10, []string{"--node-lease-duration-seconds", "400",
			"--extra-args", "kube-controller-manager=node-monitor-grace-period=400s", "--extra-args", "kube-scheduler=kube-api-qps=10",
			"--extra-args", "kube-controller-manager=kube-api-qps=10", "--extra-args", "kube-scheduler=kube-api-burst=20",
			"--extra-args", "kube-controller-manager=kube-api-burst=20"}},
	} {
		got := controlPlaneArgs(c.lease, c.qps)
		if !slices.Equal(got, c.want) {
			t.Errorf("controlPlaneArgs(%s, %d) = %q, want %q", c.lease, c.qps, got, c.want)
		}
		checkKwokctlReads(t, got)
	}
}

// checkKwokctlReads replays kwokctl v0.8.0's reading of --extra-args
// (mutationComponentPatches): a component's patch is looked up at the index of the
// component's first flag among all of them, which must be below the number of patches.
func checkKwokctlReads(t *testing.T, args []string) {
	t.Helper()
	first := map[string]int{}
	patches, n := 0, 0
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "--extra-args" {
			continue
		}
		comp, _, _ := strings.Cut(args[i+1], "=")
		if p, ok := first[comp]; ok {
			if p >= patches {
				t.Errorf("%q: kwokctl would look up patch %d of %d", args, p, patches)
			}
		} else {
			first[comp] = n
			patches++
		}
		n++
	}
}

func TestCPUUsedLeavesOutRestartedAndGoneProcesses(t *testing.T) {
	before := map[string]float64{"manager": 10, "etcd": 5, "kwok-controller": 7, "vgpusim": 1}
	after := map[string]float64{"manager": 12.5, "etcd": 9, "kwok-controller": 1, "powerwire": 3}
	pidsBefore := map[string]int{"manager": 1, "etcd": 2, "kwok-controller": 3, "vgpusim": 4}
	// kwok-controller was restarted under a new pid; vgpusim is gone; powerwire was not
	// read before.
	pidsAfter := map[string]int{"manager": 1, "etcd": 2, "kwok-controller": 30, "powerwire": 5}
	got := cpuUsed(before, after, pidsBefore, pidsAfter)
	want := map[string]float64{"manager": 2.5, "etcd": 4}
	if len(got) != len(want) || got["manager"] != 2.5 || got["etcd"] != 4 {
		t.Errorf("cpuUsed = %v, want %v", got, want)
	}
}

func TestFormatCPU(t *testing.T) {
	out := FormatCPU([]*BenchResult{{Hosts: 16, NodeLease: 400 * time.Second, ControlPlaneQPS: 200,
		CPUSeconds: map[string]float64{"etcd": 10, "manager": 5, "kube-apiserver": 25, "other": 10}}})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header, a rule and a row, got:\n%s", out)
	}
	if want := "| hosts | node lease | control plane QPS | manager | kube-apiserver | etcd | other | total | gpupool's share |"; lines[0] != want {
		t.Errorf("header %q, want %q", lines[0], want)
	}
	if want := "| 16 | 6m40s | 200 | 5.0 s | 25.0 s | 10.0 s | 10.0 s | 50.0 s | 10 % |"; lines[2] != want {
		t.Errorf("row %q, want %q", lines[2], want)
	}
}

// TestCPUByProcessReadsThisProcess reads the test's own CPU time through its pid, and
// leaves out a pid that does not exist.
func TestCPUByProcessReadsThisProcess(t *testing.T) {
	got := cpuByProcess(map[string]int{"self": os.Getpid(), "gone": 1 << 30})
	if _, ok := got["gone"]; ok {
		t.Errorf("a missing process was read: %v", got)
	}
	if s, ok := got["self"]; !ok || s < 0 {
		t.Errorf("this process's CPU seconds: %v", got)
	}
}

func TestFormatFloor(t *testing.T) {
	r := &BenchResult{Hosts: 16, DayToNight: 45 * time.Second, BoundDayToNight: 9 * time.Second, EvictionLatency: time.Second,
		Floor: Floor{N: 256, NodePatches: 3210 * time.Millisecond, Cordons: 4500 * time.Millisecond, EvictionsOut: 12 * time.Second, Suspends: 1500 * time.Millisecond, PowerOns: 2 * time.Second,
			InventoryRead: 750 * time.Millisecond}}
	if got, want := r.SwitchFloor(), 20*time.Second; got != want {
		t.Errorf("SwitchFloor = %s, want %s (the evictions alone, then the bound without its eviction)", got, want)
	}
	out := FormatFloor([]*BenchResult{r, {Hosts: 4}})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != "16 256 3.21s 4.5s 12s 1.5s 2s 750ms 20s 45s 2.25" {
		t.Errorf("FormatFloor: want a header and the row of the size with a floor, got:\n%s", out)
	}
	j := floorJSONOf(r)
	for k, want := range map[string]float64{"nodes": 256, "nodePatches": 3.21, "cordons": 4.5, "evictionsGone": 12, "suspendsAsked": 1.5, "powerOnsAsked": 2, "inventoryRead": 0.75, "dayToNightFloor": 20} {
		if j[k] != want {
			t.Errorf("the floor's JSON %s = %v, want %v (all: %v)", k, j[k], want, j)
		}
	}
}

// TestBenchIdleCPUBothMinutes: the table and the JSON report the manager's CPU at rest
// of both minutes, the one while the cluster settles the switch and the one after, each
// in its place.
func TestBenchIdleCPUBothMinutes(t *testing.T) {
	r := &BenchResult{Hosts: 4, GPUs: 4, DayToNight: time.Minute, NightToDay: time.Minute, BoundDayToNight: time.Second, BoundNightToDay: time.Second,
		IdleCPUPercent: 1.7, IdleCPUPercentLater: 0.42}
	if out := FormatBench([]*BenchResult{r}); !strings.Contains(out, " 1.70/0.42 ") {
		t.Errorf("the table does not show both minutes as first/then:\n%s", out)
	}
	path := filepath.Join(t.TempDir(), "bench.json")
	if err := WriteBenchJSON(path, []*BenchResult{r}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(raw, &got); err != nil || len(got) != 1 {
		t.Fatalf("%v: %s", err, raw)
	}
	if got[0]["idleCPUPercentOfCore"] != 1.7 || got[0]["idleCPUPercentOfCoreLater"] != 0.42 {
		t.Errorf("JSON idle CPU %v then %v, want 1.7 then 0.42", got[0]["idleCPUPercentOfCore"], got[0]["idleCPUPercentOfCoreLater"])
	}
}
