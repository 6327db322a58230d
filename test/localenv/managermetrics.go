package localenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// histogram is one Prometheus histogram series as scraped from the text format: the
// cumulative count of each bucket by its upper bound, the count and the sum.
type histogram struct {
	buckets    []histBucket // by le, ascending
	count, sum float64
}

type histBucket struct{ le, count float64 }

// parseHistograms reads the histograms named metric among lines of the text format,
// keeping the series whose labels contain match ("" for all), grouped by the value of
// the label by ("" groups them all under ""). Series of one group add up.
func parseHistograms(lines []string, metric, match, by string) map[string]*histogram {
	out := map[string]*histogram{}
	group := func(labels string) *histogram {
		key := ""
		if by != "" {
			key = labelValue(labels, by)
		}
		if out[key] == nil {
			out[key] = &histogram{}
		}
		return out[key]
	}
	for _, line := range lines {
		name, labels, value, ok := splitSample(line)
		if !ok || (match != "" && !strings.Contains(labels, match)) {
			continue
		}
		switch name {
		case metric + "_bucket":
			le := math.Inf(1)
			if v := labelValue(labels, "le"); v != "+Inf" {
				le, _ = strconv.ParseFloat(v, 64)
			}
			h := group(labels)
			h.add(le, value)
		case metric + "_count":
			group(labels).count += value
		case metric + "_sum":
			group(labels).sum += value
		}
	}
	return out
}

// add adds a bucket's count, summing the series of a group bucket by bucket.
func (h *histogram) add(le, count float64) {
	i := sort.Search(len(h.buckets), func(i int) bool { return h.buckets[i].le >= le })
	if i < len(h.buckets) && h.buckets[i].le == le {
		h.buckets[i].count += count
		return
	}
	h.buckets = append(h.buckets, histBucket{})
	copy(h.buckets[i+1:], h.buckets[i:])
	h.buckets[i] = histBucket{le, count}
}

// minus is what was observed between an earlier scrape of the same series and this one
// (nil before: everything).
func (h *histogram) minus(before *histogram) *histogram {
	if before == nil {
		return h
	}
	out := &histogram{count: h.count - before.count, sum: h.sum - before.sum}
	for _, b := range h.buckets {
		c := b.count
		for _, o := range before.buckets {
			if o.le == b.le {
				c -= o.count
			}
		}
		out.buckets = append(out.buckets, histBucket{b.le, c})
	}
	return out
}

// quantile is the upper bound of the bucket that holds quantile p (bucket resolution);
// -1 when it falls in +Inf or the histogram is empty.
func (h *histogram) quantile(p float64) time.Duration {
	if h == nil || len(h.buckets) == 0 {
		return -1
	}
	total := h.buckets[len(h.buckets)-1].count
	if total <= 0 {
		return -1
	}
	for _, b := range h.buckets {
		if b.count >= p*total {
			if math.IsInf(b.le, 1) {
				return -1
			}
			return time.Duration(b.le * float64(time.Second))
		}
	}
	return -1
}

// splitSample splits a sample line "name{labels} value" (labels may be absent);
// comments and malformed lines are not samples.
func splitSample(line string) (name, labels string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", "", 0, false
	}
	var rest string
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", "", 0, false
		}
		name, labels, rest = line[:i], line[i+1:j], line[j+1:]
	} else {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", "", 0, false
		}
		name, rest = f[0], strings.Join(f[1:], " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", "", 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return name, labels, v, err == nil
}

// labelValue is the value of label key in a label list `a="x",b="y"` ("" when absent).
func labelValue(labels, key string) string {
	for labels != "" {
		k, rest, ok := strings.Cut(labels, `="`)
		if !ok {
			return ""
		}
		v, after, ok := strings.Cut(rest, `"`)
		if !ok {
			return ""
		}
		if strings.TrimSpace(k) == key {
			return v
		}
		labels = strings.TrimPrefix(after, ",")
	}
	return ""
}

// The manager's own figures: its metrics, its vCenter calls (as vgpusim counts them),
// its CPU time and memory.

// managerCounter sums a counter of the manager's metrics over its labels (0 before the
// first increment).
func (e *Env) managerCounter(name string) (float64, error) {
	sum := 0.0
	err := e.scrapeManager(func(line string) {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			return
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	})
	return sum, err
}

// scrapeManager reads the manager's metrics endpoint once and hands each line to line.
func (e *Env) scrapeManager(line func(string)) error {
	u, err := os.ReadFile(filepath.Join(e.Dir, "metrics-url"))
	if err != nil {
		return err
	}
	resp, err := http.Get(strings.TrimSpace(string(u)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line(sc.Text())
	}
	return sc.Err()
}

func (e *Env) vgpusimCalls() (map[string]int, error) {
	b, err := os.ReadFile(filepath.Join(e.Dir, "vgpusim-calls.json"))
	if err != nil {
		return map[string]int{}, err
	}
	out := map[string]int{}
	return out, json.Unmarshal(b, &out)
}

func (e *Env) managerPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(e.Dir, "pids", "manager.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// cpuSeconds is the CPU time a process used so far (user + system).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

func rssPeakMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM for pid %d", pid)
}

// reconcileStats reads the controller's reconcile count and duration quantiles from the
// manager's metrics (controller-runtime's histogram; quantiles at bucket resolution).
func (e *Env) reconcileStats() (int, time.Duration, time.Duration, error) {
	lines, err := e.scrapeLines()
	if err != nil {
		return 0, 0, 0, err
	}
	h := parseHistograms(lines, "controller_runtime_reconcile_time_seconds", `controller="gpupoolprofile"`, "")[""]
	if h == nil || len(h.buckets) == 0 {
		return 0, 0, 0, fmt.Errorf("no reconcile histogram")
	}
	return int(h.buckets[len(h.buckets)-1].count), h.quantile(0.5), h.quantile(0.99), nil
}

// scrapeLines reads the manager's metrics once.
func (e *Env) scrapeLines() ([]string, error) {
	var lines []string
	err := e.scrapeManager(func(l string) { lines = append(lines, l) })
	return lines, err
}

// PhaseStat is what the reconcile passes of the switches spent in one phase: how many
// times it ran, its p50 and p99 (bucket resolution) and the total.
type PhaseStat struct {
	N        int
	P50, P99 time.Duration
	Total    time.Duration
}

// phaseStats are the passes' phase durations (gpupool_pass_phase_duration_seconds)
// observed between two scrapes.
func phaseStats(before, after []string) map[string]PhaseStat {
	return histogramStats(before, after, "gpupool_pass_phase_duration_seconds", "phase")
}

// startStageStats are the stages of the task starts asked past the passes
// (gpupool_task_start_stage_seconds) observed between two scrapes.
func startStageStats(before, after []string) map[string]PhaseStat {
	return histogramStats(before, after, "gpupool_task_start_stage_seconds", "stage")
}

// histogramStats are metric's observations between two scrapes, by the label by.
func histogramStats(before, after []string, metric, by string) map[string]PhaseStat {
	b, a := parseHistograms(before, metric, "", by), parseHistograms(after, metric, "", by)
	out := map[string]PhaseStat{}
	for key, h := range a {
		d := h.minus(b[key])
		if d.count <= 0 {
			continue
		}
		out[key] = PhaseStat{N: int(d.count), P50: d.quantile(0.5), P99: d.quantile(0.99), Total: time.Duration(d.sum * float64(time.Second))}
	}
	return out
}
