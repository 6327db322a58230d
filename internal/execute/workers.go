package execute

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Worker returns the status entry of a worker (by spec id), adding it when missing.
// Note: adding may move the list, so a pointer from an earlier call can go stale; a
// run's concurrent parts read the entries they need first.
func Worker(p *gpupoolv1.GPUPoolProfile, vm string) *gpupoolv1.WorkerStatus {
	if ws := FindWorker(p, vm); ws != nil {
		return ws
	}
	p.Status.Workers = append(p.Status.Workers, gpupoolv1.WorkerStatus{VM: vm})
	return &p.Status.Workers[len(p.Status.Workers)-1]
}

// FindWorker returns the status entry of a worker (by spec id), or nil.
func FindWorker(p *gpupoolv1.GPUPoolProfile, vm string) *gpupoolv1.WorkerStatus {
	for i := range p.Status.Workers {
		if p.Status.Workers[i].VM == vm {
			return &p.Status.Workers[i]
		}
	}
	return nil
}

// NodeReadyTimeout is spec.nodeReadyTimeout, 10 minutes when unset.
func NodeReadyTimeout(p *gpupoolv1.GPUPoolProfile) time.Duration {
	if t := p.Spec.NodeReadyTimeout; t != nil {
		return t.Duration
	}
	return 10 * time.Minute
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

// backingOff tells whether a worker's failed step waits for its retry at now.
func backingOff(ws *gpupoolv1.WorkerStatus, now time.Time) bool {
	return ws.NextRetryTime != nil && now.Before(ws.NextRetryTime.Time)
}
