package localenv

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The environment's own time for the same work as gpupool's: the CPU seconds each
// process of the local environment used during the two switches, read from
// /proc/PID/stat before and after. On two shared cores the control plane, kwok and the
// power wire compete with the manager, so that gpupool's reactions and its share of the
// critical path also measure them; this table says how much of the machine each took.

// processOrder is the order the CPU table lists the environment's processes in: gpupool
// first, then what a real site would run too (the control plane), then the simulators.
var processOrder = []string{"manager", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler",
	"kwok-controller", "vgpusim", "powerwire"}

// processPIDs returns the pid of each long-running process of the environment, by name:
// those Up spawned (Dir/pids) and those kwokctl started (its cluster's pids folder). A
// process the power wire's supervisor restarted is read under its new pid.
func (e *Env) processPIDs() map[string]int {
	out := map[string]int{}
	for _, dir := range []string{filepath.Join(e.Dir, "pids"), filepath.Join(e.Dir, "kwok", "clusters", clusterName, "pids")} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range files {
			if pid, err := readPid(f); err == nil && pid > 0 {
				out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
			}
		}
	}
	return out
}

// cpuByProcess reads the CPU seconds each process used so far; a process that is gone
// is left out.
func cpuByProcess(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range pids {
		if s, err := cpuSeconds(pid); err == nil {
			out[name] = s
		}
	}
	return out
}

// cpuUsed is what each process used between two readings. A process missing from
// either (restarted under a new pid, or gone) is left out rather than counted from zero.
func cpuUsed(before, after map[string]float64, pidsBefore, pidsAfter map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, a := range after {
		b, ok := before[name]
		if !ok || pidsBefore[name] != pidsAfter[name] || a < b {
			continue
		}
		out[name] = a - b
	}
	return out
}

// FormatCPU prints, per size, the CPU seconds each process used during the two
// switches, their total, and gpupool's (the manager's) share of it.
func FormatCPU(rs []*BenchResult) string {
	names := map[string]bool{}
	for _, r := range rs {
		for n := range r.CPUSeconds {
			names[n] = true
		}
	}
	var cols []string
	for _, n := range processOrder {
		if names[n] {
			cols = append(cols, n)
			delete(names, n)
		}
	}
	cols = append(cols, slices.Sorted(maps.Keys(names))...)
	var b strings.Builder
	fmt.Fprintf(&b, "| hosts | node lease | control plane QPS | %s | total | gpupool's share |\n", strings.Join(cols, " | "))
	fmt.Fprintf(&b, "| --- | --- | --- |%s --- | --- |\n", strings.Repeat(" --- |", len(cols)))
	for _, r := range rs {
		total := 0.0
		cells := make([]string, len(cols))
		for i, n := range cols {
			s, ok := r.CPUSeconds[n]
			if !ok {
				cells[i] = "-"
				continue
			}
			total += s
			cells[i] = fmt.Sprintf("%.1f s", s)
		}
		share := "-"
		if total > 0 {
			share = fmt.Sprintf("%.0f %%", 100*r.CPUSeconds["manager"]/total)
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %.1f s | %s |\n", r.Hosts, r.NodeLease, qpsCell(r.ControlPlaneQPS), strings.Join(cells, " | "), total, share)
	}
	return b.String()
}

// qpsCell is the control plane's client QPS as the table shows it.
func qpsCell(qps int) string {
	if qps <= 0 {
		return "defaults"
	}
	return strconv.Itoa(qps)
}
