package eventwriter

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Why an event was not written.
const (
	causeQueueFull   = "queue-full"  // its worker's share of the queue was full when it was recorded
	causeRejected    = "rejected"    // the API server refused it (or its series' count)
	causeUnreachable = "unreachable" // the API server could not be reached, MaxTries times
)

var dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "gpupool_events_dropped_total",
	Help: "Events (or counts of their series) not written, by cause: queue-full, rejected, unreachable.",
}, []string{"cause"})

func init() {
	metrics.Registry.MustRegister(dropped)
}
