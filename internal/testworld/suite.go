package testworld

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testclock"
	"github.com/gpupool/gpupool/internal/testenv"
)

// Suite is a test binary's control plane, for its setup to add users and processes to.
type Suite struct {
	Env    *envtest.Environment
	Config *rest.Config
	// Code is the tests' exit code, set before the deferred functions run.
	Code     int
	deferred []func()
}

// Defer runs f when the suite ends, before the control plane stops, last deferred first.
func (s *Suite) Defer(f func()) { s.deferred = append(s.deferred, f) }

// Main is the TestMain of a suite on a real kube-apiserver and etcd: it starts them with
// opts, runs setup, runs the tests, runs what setup deferred and stops the control plane,
// and returns the exit code. A setup error is printed and exits 1 without running tests.
func Main(m *testing.M, opts testenv.Options, setup func(*Suite) error) int {
	env, cfg, err := testenv.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s := &Suite{Env: env, Config: cfg, Code: 1}
	defer func() {
		for i := len(s.deferred) - 1; i >= 0; i-- {
			s.deferred[i]()
		}
		_ = env.Stop()
	}()
	if err := setup(s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s.Code = m.Run()
	return s.Code
}

// Scheme is client-go's kinds and gpupool's, with more added (Cluster API's).
func Scheme(more ...func(*runtime.Scheme) error) *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, gpupoolv1.AddToScheme}, more...) {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// Monday is hh:mm on a Monday in Berlin, the first at or after TEST_CLOCK_BASE in a week
// without a daylight-saving change (internal/testclock), where the suites' fake clocks
// start: 07:00 is night by the day/night schedule, 10:00 day.
func Monday(hh, mm int) time.Time {
	return testclock.Weekly(time.Monday, hh, mm, Berlin)
}

// CreatePool creates p and, when the test ends, deletes it with its finalizers removed,
// so that no test leaves a pool behind for another test's reconciler to find.
func CreatePool(t testing.TB, c client.Client, p *gpupoolv1.GPUPoolProfile) {
	t.Helper()
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		var cur gpupoolv1.GPUPoolProfile
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			return
		}
		cur.Finalizers = nil
		_ = c.Update(ctx, &cur)
		_ = c.Delete(ctx, &cur)
	})
}

// GetPool reads the pool of that name, failing the test when it cannot.
func GetPool(t testing.TB, c client.Reader, name string) *gpupoolv1.GPUPoolProfile {
	t.Helper()
	var p gpupoolv1.GPUPoolProfile
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}
