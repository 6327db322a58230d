package execute

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// TaskErrors counts the vSphere operations that failed (to start, or as tasks: the
	// controller counts those it finds ended in error).
	TaskErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_vsphere_task_errors_total",
		Help: "vSphere operations that failed, by operation.",
	}, []string{"pool", "operation"})
	// PodEvictions counts the evictions the drains made.
	PodEvictions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_pod_evictions_total",
		Help: "Pods the pool's drains evicted (eviction API calls granted). Divided by the pods the drained nodes ran, it says how often a pod was evicted again from a node drained later.",
	}, []string{"pool"})
	// IntentsResolved counts the intents stored without a task id, by what vCenter showed.
	IntentsResolved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_task_intents_resolved_total",
		Help: "Recorded intents to start a vSphere task whose task id was lost (a crash or a failed status write), by what vCenter showed: adopted (the task had been started) or not-started.",
	}, []string{"pool", "result"})
	// PowerOnsAhead counts the power-ons planned ahead of parks (ahead.go) by what
	// became of them.
	PowerOnsAhead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_power_ons_ahead_total",
		Help: "Power-ons planned ahead of the parks on their host, by result: asked (the parks ended well and vCenter was asked without waiting for a pass; it may still refuse) or not-asked (a park failed or was not asked, the watch of the parks failed, the pool was paused, aborted, edited, switched to another layout or deleted, or the parks did not end within 2 minutes of the pass: the next pass plans again).",
	}, []string{"pool", "result"})
	// SuspendsAfterDrains counts the suspends planned after drains (afterdrains.go) by
	// what became of them.
	SuspendsAfterDrains = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_suspends_after_drains_total",
		Help: "Suspends planned after the drains on their host, by result: asked (the drained nodes' pods were gone and vCenter was asked without waiting for a pass; it may still refuse) or not-asked (the pods were not gone within 2 minutes of the pass, a round found pods blocking the drain, the pods could not be watched, the Machine could not be protected or the node's parked marks written, the VM was held, or the pool was paused, aborted, edited, switched to another layout or deleted: the next pass plans again).",
	}, []string{"pool", "result"})
	// StartStages splits the time of the starts asked past the pass (Starts), so that a
	// benchmark can tell vCenter's answers from the waits gpupool adds. No pool label:
	// the waits are the manager's own, read across pools.
	StartStages = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gpupool_task_start_stage_seconds",
		Help:    "Time the vSphere task starts asked past the pass spent, by stage: parks (a power-on ahead of the parks on its host, from its handout until the parks were seen to end well), drains (a suspend after the drains on its host, from its handout until the drained nodes' pods were gone), mark (a suspend's write of its node's parked marks, unless its cordon carried them, made just before it is asked, and for a suspend after drains the protection of its node's Machine before it), queue (from its handout, its parks' or drains' end or its node's write, until it was asked: the host's earlier power-ons, the pool's start slots, the group's earlier starts) and ask (vCenter's answer to the start).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 17), // 1 ms to 65 s
	}, []string{"stage"})
)

func init() {
	metrics.Registry.MustRegister(TaskErrors, PodEvictions, IntentsResolved, PowerOnsAhead, SuspendsAfterDrains, StartStages)
}
