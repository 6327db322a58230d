package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// FlavorQuota is the nominalQuota gpupool sets for a flavor of the pool in the
// ClusterQueues that opt in, as of now, and when that changes next by the clock alone
// (zero: not by the clock). It is the decision syncQuota applies, exported so that
// `kubectl gpupool status` shows the quota from the pool alone, without reading Kueue's
// objects (which a gpupool-viewer may not).
func FlavorQuota(pool *gpupoolv1.GPUPoolProfile, f *gpupoolv1.KueueFlavor, now time.Time) (corev1.ResourceList, time.Time) {
	return flavorQuota(pool, f, now)
}
