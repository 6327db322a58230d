package localenv

import (
	"strings"
	"testing"
	"time"
)

const scrapeBefore = `# HELP gpupool_pass_phase_duration_seconds Time a reconcile pass spends in each phase.
# TYPE gpupool_pass_phase_duration_seconds histogram
gpupool_pass_phase_duration_seconds_bucket{phase="observe",le="0.001"} 0
gpupool_pass_phase_duration_seconds_bucket{phase="observe",le="0.002"} 1
gpupool_pass_phase_duration_seconds_bucket{phase="observe",le="+Inf"} 2
gpupool_pass_phase_duration_seconds_sum{phase="observe"} 10.5
gpupool_pass_phase_duration_seconds_count{phase="observe"} 2
controller_runtime_reconcile_time_seconds_bucket{controller="gpupoolprofile",le="0.5"} 3
controller_runtime_reconcile_time_seconds_bucket{controller="gpupoolprofile",le="1"} 4
controller_runtime_reconcile_time_seconds_bucket{controller="gpupoolprofile",le="+Inf"} 4
controller_runtime_reconcile_time_seconds_bucket{controller="other",le="0.5"} 100
controller_runtime_reconcile_time_seconds_bucket{controller="other",le="+Inf"} 100
`

const scrapeAfter = `gpupool_pass_phase_duration_seconds_bucket{phase="observe",le="0.001"} 0
gpupool_pass_phase_duration_seconds_bucket{phase="observe",le="0.002"} 11
gpupool_pass_phase_duration_seconds_bucket{phase="observe",le="+Inf"} 22
gpupool_pass_phase_duration_seconds_sum{phase="observe"} 30.5
gpupool_pass_phase_duration_seconds_count{phase="observe"} 22
gpupool_pass_phase_duration_seconds_bucket{phase="act",le="0.001"} 5
gpupool_pass_phase_duration_seconds_bucket{phase="act",le="0.002"} 10
gpupool_pass_phase_duration_seconds_bucket{phase="act",le="+Inf"} 10
gpupool_pass_phase_duration_seconds_sum{phase="act"} 0.012
gpupool_pass_phase_duration_seconds_count{phase="act"} 10
malformed{ 3
`

// TestPhaseStatsDiffScrapes: the phases' figures are what was observed between the two
// scrapes, per phase; a quantile in +Inf reads as unknown (-1), not as the last bound.
func TestPhaseStatsDiffScrapes(t *testing.T) {
	got := phaseStats(strings.Split(scrapeBefore, "\n"), strings.Split(scrapeAfter, "\n"))
	obs, act := got["observe"], got["act"]
	if obs.N != 20 || obs.Total != 20*time.Second || obs.P50 != 2*time.Millisecond || obs.P99 != -1 {
		t.Errorf("observe = %+v, want 20 passes, 20s in all, p50 2ms, p99 past the last bound", obs)
	}
	if act.N != 10 || act.P50 != time.Millisecond || act.P99 != 2*time.Millisecond || act.Total != 12*time.Millisecond {
		t.Errorf("act = %+v, want 10, p50 1ms, p99 2ms, 12ms (no earlier scrape: all of it)", act)
	}
	if len(got) != 2 {
		t.Errorf("phases %v, want observe and act", got)
	}
}

// TestParseHistogramsFiltersAndGroups: only the series with the label match count, and
// quantiles come from their cumulative buckets.
func TestParseHistogramsFiltersAndGroups(t *testing.T) {
	h := parseHistograms(strings.Split(scrapeBefore, "\n"), "controller_runtime_reconcile_time_seconds", `controller="gpupoolprofile"`, "")[""]
	if h == nil || len(h.buckets) != 3 || h.buckets[2].count != 4 {
		t.Fatalf("histogram %+v, want the gpupoolprofile series' three buckets", h)
	}
	if q := h.quantile(0.5); q != 500*time.Millisecond {
		t.Errorf("p50 %s, want 500ms", q)
	}
	if q := h.quantile(0.99); q != time.Second {
		t.Errorf("p99 %s, want 1s", q)
	}
	if q := (&histogram{}).quantile(0.5); q != -1 {
		t.Errorf("empty histogram p50 %s, want -1", q)
	}
	if q := (*histogram)(nil).quantile(0.5); q != -1 {
		t.Errorf("nil histogram p50 %s, want -1", q)
	}
}

func TestLabelValue(t *testing.T) {
	for _, c := range []struct{ labels, key, want string }{
		{`phase="observe",le="0.5"`, "le", "0.5"},
		{`phase="observe",le="0.5"`, "phase", "observe"},
		{`phase="observe"`, "le", ""},
		{``, "le", ""},
		{`a="x,b=y",b="z"`, "b", "z"},
	} {
		if got := labelValue(c.labels, c.key); got != c.want {
			t.Errorf("labelValue(%q, %q) = %q, want %q", c.labels, c.key, got, c.want)
		}
	}
}

// TestFormatPhasesShares: a phase's share is of all the phases' time, a part's share of
// its phase's; the phases come in pass order.
func TestFormatPhasesShares(t *testing.T) {
	r := &BenchResult{Hosts: 4, Phases: map[string]PhaseStat{
		"observe":    {N: 10, P50: time.Millisecond, P99: 2 * time.Millisecond, Total: time.Second},
		"act":        {N: 10, P50: time.Millisecond, P99: -1, Total: 3 * time.Second},
		"act:cordon": {N: 2, P50: time.Millisecond, P99: time.Millisecond, Total: 1500 * time.Millisecond},
	}, StartStages: map[string]PhaseStat{"queue": {N: 7, P50: 4 * time.Millisecond, P99: 8 * time.Millisecond, Total: 40 * time.Millisecond},
		"mark":   {N: 3, P50: 16 * time.Millisecond, P99: 32 * time.Millisecond, Total: 50 * time.Millisecond},
		"drains": {N: 2, P50: 256 * time.Millisecond, P99: 512 * time.Millisecond, Total: 600 * time.Millisecond}}}
	out := FormatPhases([]*BenchResult{r})
	// The starts' stages are listed after the passes' phases, outside their shares, in
	// a start's order.
	if !strings.Contains(out, "start:queue") || strings.Index(out, "start:queue") < strings.Index(out, "act:cordon") || strings.Contains(out, "start:parks") {
		t.Errorf("the starts' stages are not listed after the phases, only those timed:\n%s", out)
	}
	if i, j := strings.Index(out, "start:mark"), strings.Index(out, "start:queue"); i < 0 || i > j {
		t.Errorf("start:mark not listed before start:queue:\n%s", out)
	}
	if i, j := strings.Index(out, "start:drains"), strings.Index(out, "start:mark"); i < 0 || i > j {
		t.Errorf("start:drains not listed before start:mark:\n%s", out)
	}
	for _, want := range []string{"observe", "25.0%", "75.0%", "50.0%", ">65s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if i, j, k := strings.Index(out, "observe"), strings.Index(out, "act "), strings.Index(out, "act:cordon"); i > j || j > k {
		t.Errorf("phases out of pass order:\n%s", out)
	}
}

// TestStartStageStatsDiffScrapes: the starts' stages are read by their stage label from
// their own histogram, apart from the passes' phases.
func TestStartStageStatsDiffScrapes(t *testing.T) {
	after := strings.Split(scrapeAfter+`gpupool_task_start_stage_seconds_bucket{stage="queue",le="0.001"} 1
gpupool_task_start_stage_seconds_bucket{stage="queue",le="0.002"} 4
gpupool_task_start_stage_seconds_bucket{stage="queue",le="+Inf"} 4
gpupool_task_start_stage_seconds_sum{stage="queue"} 0.006
gpupool_task_start_stage_seconds_count{stage="queue"} 4
`, "\n")
	got := startStageStats(strings.Split(scrapeBefore, "\n"), after)
	if q := got["queue"]; len(got) != 1 || q.N != 4 || q.P50 != 2*time.Millisecond || q.Total != 6*time.Millisecond {
		t.Errorf("stages %+v, want queue alone: 4 starts, p50 2ms, 6ms in all", got)
	}
	if _, mixed := phaseStats(strings.Split(scrapeBefore, "\n"), after)["queue"]; mixed {
		t.Error("a start stage was read as a pass phase")
	}
}

func TestCallsByMethodMostFirst(t *testing.T) {
	got := callsByMethod(map[string]int{"PowerOnVM_Task": 80, "WaitForUpdatesEx": 300, "SuspendVM_Task": 80})
	if want := "WaitForUpdatesEx 300, PowerOnVM_Task 80, SuspendVM_Task 80"; got != want {
		t.Errorf("callsByMethod = %q, want %q", got, want)
	}
}
