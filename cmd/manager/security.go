package main

import (
	"os"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
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
// it). secure=false serves plain HTTP to anyone, for local runs only.
func metricsOptions(addr string, secure bool, certDir string) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr, SecureServing: secure, CertDir: certDir}
	if secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}
