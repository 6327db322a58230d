package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	transitionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_transitions_total",
		Help: "Layout transitions by pool and result (completed, aborted, superseded).",
	}, []string{"pool", "result"})
	transitionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpupool_transition_duration_seconds",
		Help:    "Time from the start of a layout transition to its completion.",
		Buckets: []float64{15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
	}, []string{"pool"})
	workersByStep = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpupool_workers",
		Help: "Workers (VMs) of a pool by the step they are at; step is empty when nothing is due.",
	}, []string{"pool", "step"})
	shortfallRereads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_shortfall_rereads_total",
		Help: "Passes that saw the wanted layout short on a quiet read (no task of the pool in flight or ending) and read the world a second time before believing it.",
	}, []string{"pool"})
	// No pool label: the phases' cost is the operator's own, and a label per pool would
	// multiply the series by the pools for a figure read across them.
	phaseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpupool_pass_phase_duration_seconds",
		Help:    "Time a reconcile pass spends in each of its phases (desire, paused, observe, tasks, keep-aborted, decide, settled, act), in observe's parts (observe:vcenter, its read of vCenter's inventory; observe:cluster, its read of the nodes and pods; observe:account, its accounting) in the parts of act (act:cordon, act:evict, act:node-steps, act:park, act:steps, act:start, act:states: the node state labels and warnings, handed to a batch past the pass) and in the pass's status write (status), on the manager's own clock: where a pass's time goes.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms to 65 s
	}, []string{"phase"})
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_status_writes_total",
		Help: "Passes that wrote the pool's status (written) and that left changes that can be observed again unwritten for the next pass (deferred, --status-write-interval), by pool.",
	}, []string{"pool", "result"})
	readySteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_ready_node_steps_total",
		Help: "Relabels and uncordons made the moment a node became ready for work, between passes (readyFollow), by pool and result: done, failed (the next pass makes it), dropped (the pool changed since the pass that planned it).",
	}, []string{"pool", "result"})
)

func init() {
	metrics.Registry.MustRegister(transitionsTotal, transitionDuration, workersByStep, shortfallRereads, phaseDuration, readySteps, statusWrites)
}

// passTimes are the times a pass's phases and their parts took, in order, for the
// pass's log line at V(1) (logPass): the metric tells where passes spend their time,
// the line tells where one did, next to the other lines of the same moment.
type passTimes struct {
	begun time.Time
	parts []passPart
}

type passPart struct {
	name string
	took time.Duration
}

// record records the time a phase (or a part of one: "observe:vcenter", "act:cordon")
// took since start, on the wall clock, in the metric and in the pass's own list: this
// measures the operator's own time, and a test's fake clock does not move within a
// pass. A nil passTimes (a scope a preview made)
// records the metric only.
func (t *passTimes) record(name string, start time.Time) {
	took := time.Since(start)
	phaseDuration.WithLabelValues(name).Observe(took.Seconds())
	if t != nil {
		t.parts = append(t.parts, passPart{name: name, took: took})
	}
}

// timed runs f as a part of a phase and records its time.
func (t *passTimes) timed(name string, f func()) {
	start := time.Now()
	f()
	t.record(name, start)
}

// String lists the parts that took 1 ms or more, rounded to the millisecond:
// "observe=2.1s observe:vcenter=2s act=512ms ...".
func (t *passTimes) String() string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.took < time.Millisecond {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", p.name, p.took.Round(time.Millisecond))
	}
	return b.String()
}

// logPass logs, at V(1), what one pass took and where: its phases and their parts in
// order (passTimes), the task starts it handed out, when it comes back. One line per
// pass, so that a benchmark's kept manager log tells which pass held a reaction.
func logPass(ctx context.Context, s *scope, res ctrl.Result, err error) {
	l := log.FromContext(ctx).V(1)
	if !l.Enabled() {
		return
	}
	l.Info("Pass", "took", time.Since(s.times.begun).Round(time.Millisecond).String(), "parts", s.times.String(),
		"starts", s.starts.Len(), "requeueAfter", res.RequeueAfter.String(), "failed", err != nil)
}
