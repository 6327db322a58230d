package main

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gpupool/gpupool/controllers"
)

// registerPoolMetrics exports the pools' layout, conditions and next transition, read
// from the manager's cache at scrape time (every replica reports the same values).
func registerPoolMetrics(mgr ctrl.Manager) error {
	return metrics.Registry.Register(&controllers.PoolCollector{Reader: mgr.GetClient()})
}
