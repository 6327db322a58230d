package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupool/gpupool/internal/loopback"
)

func intstrPort(p int32) intstr.IntOrString { return intstr.FromInt32(p) }

// row is one measurement: a manager at a pod count, with or without spec.demand.
type row struct {
	manager string
	pods    int
	demand  bool
	// rssMiB is the highest VmRSS sampled after the passes; peakMiB the process's
	// VmHWM (its peak, the initial lists included); heapMiB the highest
	// go_memstats_heap_inuse_bytes sampled.
	rssMiB, peakMiB, heapMiB float64
	// liveMiB is go_memstats_heap_inuse_bytes right after a garbage collection (asked
	// through pprof's heap profile, gc=1) at the end: what the caches and the pool hold.
	liveMiB float64
	// synced is how long from start until the passes were made.
	synced time.Duration
	passes int
}

func (r row) String() string {
	return fmt.Sprintf("%s, %d pods, demand %v: RSS %.0f MiB (peak %.0f), heap %.0f MiB (%.0f after a GC), %d passes after %s",
		r.manager, r.pods, r.demand, r.rssMiB, r.peakMiB, r.heapMiB, r.liveMiB, r.passes, r.synced.Round(time.Second))
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| pods | spec.demand | manager | RSS (MiB) | peak RSS (MiB) | Go heap in use (MiB) | heap after a GC (MiB) | passes after |")
	fmt.Fprintln(w, "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		d := "no"
		if r.demand {
			d = "yes"
		}
		fmt.Fprintf(w, "| %d | %s | %s | %.0f | %.0f | %.0f | %.0f | %s |\n", r.pods, d, r.manager, r.rssMiB, r.peakMiB, r.heapMiB, r.liveMiB, r.synced.Round(time.Second))
	}
}

// measure runs the manager at path until the pool was reconciled o.passes times, samples
// its memory for o.settle, and stops it.
func (w *world) measure(ctx context.Context, name, path string, o options) (r row, err error) {
	r.manager = name
	metrics, err := loopback.FreePort()
	if err != nil {
		return r, err
	}
	probe, err := loopback.FreePort()
	if err != nil {
		return r, err
	}
	pprof, err := loopback.FreePort()
	if err != nil {
		return r, err
	}
	logFile, err := os.Create(filepath.Join(w.dir, name+".log"))
	if err != nil {
		return r, err
	}
	defer logFile.Close()
	cmd := exec.Command(path, "--kubeconfig", w.kubeconfig, "--enable-webhook=false", "--leader-elect=false",
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(metrics), "--metrics-secure=false",
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probe), "--credentials-namespace", benchNamespace,
		"--pprof-bind-address", "127.0.0.1:"+strconv.Itoa(pprof))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	// exited is closed when the manager has exited, with waitErr set.
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if n, err := reconciles(url); err == nil && n >= o.passes {
			r.passes, r.synced = n, time.Since(start)
			break
		}
		select {
		case <-exited:
			return r, fmt.Errorf("manager %s exited: %w (log: %s)", name, waitErr, tailFile(logFile.Name()))
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(time.Second):
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("manager %s: fewer than %d reconciles in 10 minutes (log: %s)", name, o.passes, tailFile(logFile.Name()))
		}
	}
	for end := time.Now().Add(o.settle); time.Now().Before(end); {
		rss, peak, err := procMemory(cmd.Process.Pid)
		if err != nil {
			return r, err
		}
		r.rssMiB, r.peakMiB = max(r.rssMiB, rss), max(r.peakMiB, peak)
		if heap, err := metric(url, "go_memstats_heap_inuse_bytes"); err == nil {
			r.heapMiB = max(r.heapMiB, heap/(1<<20))
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if n, err := reconciles(url); err == nil {
		r.passes = n
	}
	if err := collectGarbage(pprof); err != nil {
		return r, err
	}
	if heap, err := metric(url, "go_memstats_heap_inuse_bytes"); err == nil {
		r.liveMiB = heap / (1 << 20)
	}
	return r, nil
}

// collectGarbage makes the manager collect its garbage: pprof's heap profile does with
// gc=1.
func collectGarbage(port int) error {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap?gc=1", port)) //nolint:gosec,noctx // loopback, the manager this process started
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// reconciles is how many times the pool controller reconciled.
func reconciles(url string) (int, error) {
	v, err := metric(url, `controller_runtime_reconcile_total{controller="gpupoolprofile",result="success"}`)
	if err != nil {
		return 0, err
	}
	more, _ := metric(url, `controller_runtime_reconcile_total{controller="gpupoolprofile",result="requeue_after"}`)
	return int(v + more), nil
}

// metric is the value of the sample whose name and labels start the line as given.
func metric(url, sample string) (float64, error) {
	resp, err := http.Get(url) //nolint:gosec,noctx // loopback, the manager this process started
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, sample+" ") {
			return strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, sample)), 64)
		}
	}
	return 0, fmt.Errorf("no sample %s", sample)
}

// procMemory is the process's VmRSS and VmHWM in MiB.
func procMemory(pid int) (rss, peak float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = kb / 1024
		} else {
			peak = kb / 1024
		}
	}
	return rss, peak, nil
}

func tailFile(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}
