package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

var (
	layoutInfoDesc = prometheus.NewDesc("gpupool_layout_info",
		"Always 1: a pool's active and desired layout (equal when the pool is where it should be).",
		[]string{"pool", "active", "desired"}, nil)
	conditionDesc = prometheus.NewDesc("gpupool_condition",
		"1 for each condition a pool reports, with its status and reason.",
		[]string{"pool", "type", "status", "reason"}, nil)
	nextTransitionDesc = prometheus.NewDesc("gpupool_next_transition_timestamp_seconds",
		"When the pool's next scheduled switch starts (Unix time), and to which layout.",
		[]string{"pool", "layout"}, nil)
	transitionStartDesc = prometheus.NewDesc("gpupool_transition_start_timestamp_seconds",
		"When the transition in progress started (Unix time); absent when none is.",
		[]string{"pool", "from", "to"}, nil)
	nextFeasibleDesc = prometheus.NewDesc("gpupool_next_layout_feasible",
		"1 when the next scheduled switch's layout can be reached from the state observed now, 0 when its plan (status.plan) has problems; absent when no next switch is planned.",
		[]string{"pool", "layout"}, nil)
)

// PoolCollector exports the pools' status as gauges at scrape time, read from the
// manager's cache: the reconciler does not have to keep them current, and a deleted pool
// disappears from the metrics at once.
type PoolCollector struct {
	Reader client.Reader
	// Timeout bounds a scrape's read of the cache.
	Timeout time.Duration
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- layoutInfoDesc
	ch <- conditionDesc
	ch <- nextTransitionDesc
	ch <- transitionStartDesc
	ch <- nextFeasibleDesc
}

// Collect implements prometheus.Collector. Before the cache has started it reports nothing.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var pools gpupoolv1.GPUPoolProfileList
	if err := c.Reader.List(ctx, &pools); err != nil {
		return
	}
	for i := range pools.Items {
		collectPool(ch, &pools.Items[i])
	}
}

func collectPool(ch chan<- prometheus.Metric, p *gpupoolv1.GPUPoolProfile) {
	st := &p.Status
	ch <- prometheus.MustNewConstMetric(layoutInfoDesc, prometheus.GaugeValue, 1, p.Name, st.ActiveLayout, st.DesiredLayout)
	for _, cond := range st.Conditions {
		ch <- prometheus.MustNewConstMetric(conditionDesc, prometheus.GaugeValue, 1, p.Name, cond.Type, string(cond.Status), cond.Reason)
	}
	if n := st.NextTransition; n != nil {
		ch <- prometheus.MustNewConstMetric(nextTransitionDesc, prometheus.GaugeValue, float64(n.At.Unix()), p.Name, n.Layout)
	}
	if t := st.Transition; t != nil && t.AbortedTime == nil {
		ch <- prometheus.MustNewConstMetric(transitionStartDesc, prometheus.GaugeValue, float64(t.StartTime.Unix()), p.Name, t.From, t.To)
	}
	// A next layout that cannot be reached shows nowhere else before its switch starts:
	// the pool is Ready at its current layout until then.
	if pv := st.Plan; pv != nil && pv.For == gpupoolv1.PlanForNext {
		feasible := 1.0
		if len(pv.Problems) > 0 {
			feasible = 0
		}
		ch <- prometheus.MustNewConstMetric(nextFeasibleDesc, prometheus.GaugeValue, feasible, p.Name, pv.Layout)
	}
}
