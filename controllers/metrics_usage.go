package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gpupool/gpupool/internal/accounting"
)

var (
	// Idle is offered minus allocated, in PromQL (docs/accounting.md): a counter of its
	// own would only repeat the two.
	gpuSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_gpu_seconds_total",
		Help: "GPU-equivalent seconds of a pool by layout, vGPU profile and kind: offered (Ready, schedulable nodes of running VMs), allocated (bound GPU pods), switching (the pool's GPUs offline during a transition; profile empty).",
	}, []string{"pool", "layout", "profile", "kind"})
	tenantGPUSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_tenant_gpu_seconds_total",
		Help: "GPU-equivalent seconds allocated to a tenant's pods, by pool, layout and vGPU profile; tenants past the day's first 256 are (other).",
	}, []string{"pool", "layout", "profile", "tenant"})
)

func init() {
	metrics.Registry.MustRegister(gpuSeconds, tenantGPUSeconds)
}

var usageKinds = [...]string{accounting.Offered: "offered", accounting.Allocated: "allocated", accounting.Switching: "switching"}

// countUsage adds a piece the ledger accounted to the counters.
func countUsage(pool string, it accounting.Item, secs float64) {
	gpuSeconds.WithLabelValues(pool, it.Layout, it.Profile, usageKinds[it.Kind]).Add(secs)
	if it.Kind == accounting.Allocated {
		tenantGPUSeconds.WithLabelValues(pool, it.Layout, it.Profile, it.Tenant).Add(secs)
	}
}

// forgetUsageMetrics drops a deleted pool's series.
func forgetUsageMetrics(pool string) {
	gpuSeconds.DeletePartialMatch(prometheus.Labels{"pool": pool})
	tenantGPUSeconds.DeletePartialMatch(prometheus.Labels{"pool": pool})
}
