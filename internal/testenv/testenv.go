// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest)
// from the binaries that `make controlplane` builds into bin/, with gpupool's CRD and
// validating webhook installed, for tests.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Root is the repository root, found from this file's location.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Options say what to install besides gpupool's CRD.
type Options struct {
	// Webhook installs the validating webhook configuration; the test serves it.
	Webhook bool
	// ExtraCRDPaths are more CRD files or folders, such as Cluster API's.
	ExtraCRDPaths []string
}

// Start starts the control plane. The caller must call env.Stop.
func Start(opts Options) (*envtest.Environment, *rest.Config, error) {
	root := Root()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		return nil, nil, fmt.Errorf("no kube-apiserver in %s: run 'make controlplane' (or 'make test', which builds it)", assets)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     append([]string{filepath.Join(root, "config", "crd", "bases")}, opts.ExtraCRDPaths...),
		ErrorIfCRDPathMissing: true,
	}
	if opts.Webhook {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join(root, "config", "webhook", "manifests.yaml")},
		}
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves etcd and kube-apiserver running when a later step fails (a
		// CRD the API server refuses): stop them, or every failed run leaks two
		// processes.
		_ = env.Stop()
		return nil, nil, fmt.Errorf("starting envtest: %w", err)
	}
	return env, cfg, nil
}
