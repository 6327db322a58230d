package main

import (
	"os"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gpupool/gpupool/internal/testenv"
)

// One kube-apiserver and etcd for the package's tests, started by the first test that
// needs them and stopped when the package's tests end: starting envtest is most of what
// each test would cost otherwise.
var shared struct {
	once sync.Once
	env  *envtest.Environment
	cfg  *rest.Config
	err  error
}

func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	shared.once.Do(func() { shared.env, shared.cfg, shared.err = testenv.Start(testenv.Options{}) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.cfg
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		_ = shared.env.Stop()
	}
	os.Exit(code)
}
