package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

var (
	demandPendingGPUs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpupool_demand_pending_gpus",
		Help: "GPUs requested by unschedulable pods that only the layout's nodes could serve (spec.demand).",
	}, []string{"pool", "layout"})
	demandRunningGPUs = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpupool_demand_running_gpus",
		Help: "GPUs requested by the pods on the layout's nodes, except nodes every other layout keeps as they are (spec.demand).",
	}, []string{"pool", "layout"})
	demandAtRisk = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpupool_demand_at_risk_pods",
		Help: "Pods a switch from the active layout to the layout would disrupt, by kind: evicted (GPU pods evicted), do_not_disrupt, job_near_completion (spec.demand).",
	}, []string{"pool", "layout", "kind"})
	demandRechecks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpupool_demand_rechecks_total",
		Help: "Demand rechecks of the demand watch after pod or pool events, by result: woken (the decision changed, the pool's pass runs), unchanged (no pass, no vCenter call), unobserved (spec.demand).",
	}, []string{"pool", "result"})
)

func init() {
	metrics.Registry.MustRegister(demandPendingGPUs, demandRunningGPUs, demandAtRisk, demandRechecks)
}

// publishDemandMetrics sets the demand gauges of a pool; forgetDemandMetrics drops them.
func publishDemandMetrics(pool string, layouts []gpupoolv1.Layout, obs map[string]plan.LayoutDemand) {
	forgetDemandMetrics(pool)
	for _, ly := range layouts {
		l, o := ly.Name, obs[ly.Name]
		demandPendingGPUs.WithLabelValues(pool, l).Set(float64(o.PendingGPUs))
		demandRunningGPUs.WithLabelValues(pool, l).Set(float64(o.RunningGPUs))
		demandAtRisk.WithLabelValues(pool, l, "evicted").Set(float64(o.Evictions))
		demandAtRisk.WithLabelValues(pool, l, "do_not_disrupt").Set(float64(len(o.DoNotDisrupt)))
		demandAtRisk.WithLabelValues(pool, l, "job_near_completion").Set(float64(len(o.NearCompletion)))
	}
}

func forgetDemandMetrics(pool string) {
	for _, g := range []*prometheus.GaugeVec{demandPendingGPUs, demandRunningGPUs, demandAtRisk} {
		g.DeletePartialMatch(prometheus.Labels{"pool": pool})
	}
}
