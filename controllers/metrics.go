package controllers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
		Help:    "Time a reconcile pass spends in each of its phases (desire, paused, observe, tasks, keep-aborted, decide, settled, act), in observe's parts (observe:vcenter, its read of vCenter's inventory; observe:cluster, its read of the nodes and pods; observe:account, its accounting) and in the parts of act (act:cordon, act:evict, act:node-steps, act:park, act:steps, act:start, act:warn, act:states), on the manager's own clock: where a pass's time goes.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms to 65 s
	}, []string{"phase"})
	readySteps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_ready_node_steps_total",
		Help: "Relabels and uncordons made the moment a node became ready for work, between passes (readyFollow), by pool and result: done, failed (the next pass makes it), dropped (the pool changed since the pass that planned it).",
	}, []string{"pool", "result"})
)

func init() {
	metrics.Registry.MustRegister(transitionsTotal, transitionDuration, workersByStep, shortfallRereads, phaseDuration, readySteps)
}

// recordPhaseTime records the time a phase (or a part of act, "act:<part>") took since
// start, on the wall clock: this measures the operator's own time, and a test's fake
// clock does not move within a pass.
func recordPhaseTime(name string, start time.Time) {
	phaseDuration.WithLabelValues(name).Observe(time.Since(start).Seconds())
}

// timed runs f as a part of a phase and records its time (recordPhaseTime).
func timed(name string, f func()) {
	start := time.Now()
	f()
	recordPhaseTime(name, start)
}
