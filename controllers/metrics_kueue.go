package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	kueueFlavorQuota = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpupool_kueue_flavor_quota",
		Help: "The nominalQuota gpupool sets for the flavor's resource in the ClusterQueues that opted in to the pool: quota while its layout is ready for work, else waitingQuota (spec.kueue).",
	}, []string{"pool", "flavor", "resource"})
	kueueHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpupool_kueue_held_workloads",
		Help: "Workloads that reserved quota on the pool's flavors and that gpupool's admission check holds (Pending) until their layout is ready for work (spec.kueue).",
	}, []string{"pool"})
	kueueSyncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_kueue_sync_errors_total",
		Help: "Passes that could not read or write Kueue's objects for the pool (the KueueSyncFailed event says why).",
	}, []string{"pool"})
)

func init() {
	metrics.Registry.MustRegister(kueueFlavorQuota, kueueHeld, kueueSyncErrors)
}

// publishKueueQuota sets the quota gauges of the pool to what it wants now.
func publishKueueQuota(pool string, want map[string]corev1.ResourceList) {
	kueueFlavorQuota.DeletePartialMatch(prometheus.Labels{"pool": pool})
	for flavor, rl := range want {
		for res, q := range rl {
			kueueFlavorQuota.WithLabelValues(pool, flavor, string(res)).Set(q.AsApproximateFloat64())
		}
	}
}

// publishKueueHeld sets how many Workloads gpupool's check holds for the pool.
func publishKueueHeld(pool string, held int) {
	kueueHeld.WithLabelValues(pool).Set(float64(held))
}

// forgetKueueMetrics drops the pool's Kueue series: spec.kueue removed, or the pool gone.
func forgetKueueMetrics(pool string) {
	kueueFlavorQuota.DeletePartialMatch(prometheus.Labels{"pool": pool})
	kueueHeld.DeletePartialMatch(prometheus.Labels{"pool": pool})
	kueueSyncErrors.DeletePartialMatch(prometheus.Labels{"pool": pool})
}
