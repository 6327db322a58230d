package main

import (
	"os"
	"strings"

	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpupool/gpupool/internal/metricsauth"
)

// serviceAccountNamespace is where a pod's own namespace is mounted.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ownNamespace is the namespace the operator runs in: POD_NAMESPACE (set by the
// Deployment from the downward API), else the service account's mounted namespace.
// Outside a cluster it is empty and --credentials-namespace must be given.
func ownNamespace() string {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// metricsOptions serves the metrics endpoint like kubebuilder's scaffold: over HTTPS, and
// only to callers whose token the API server accepts (TokenReview) and who may get the
// /metrics non-resource URL (SubjectAccessReview; the metrics-reader ClusterRole grants
// it), checked by internal/metricsauth rather than controller-runtime's filter, which
// links k8s.io/apiserver (why: that package's doc). secure=false serves plain HTTP to
// anyone, for local runs only.
func metricsOptions(addr string, secure bool, certDir string) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr, SecureServing: secure, CertDir: certDir}
	if secure {
		o.FilterProvider = metricsauth.Provider
	}
	return o
}
