package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/internal/testclock"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/internal/testworld"
	gpwebhook "github.com/gpupool/gpupool/internal/webhook"
)

var (
	k8s client.Client
	// warned is a client whose admission warnings are recorded.
	warned   client.Client
	warnings = &warningRecorder{}
)

// fixedNow is the webhook's clock: warnings about times already past are deterministic.
// It is a Monday noon UTC at or after TEST_CLOCK_BASE (internal/testclock).
var fixedNow = testclock.Weekly(time.Monday, 12, 0, time.UTC)

// warningRecorder keeps the warnings the API server sends back.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// take returns the warnings since the last take.
func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.msgs
	w.msgs = nil
	return out
}

func TestMain(m *testing.M) {
	os.Exit(testworld.Main(m, testenv.Options{Webhook: true}, serveWebhook))
}

// serveWebhook runs the validating webhook in a manager on the suite's control plane
// and makes the clients the tests use, the second one recording warnings.
func serveWebhook(s *testworld.Suite) error {
	scheme := testworld.Scheme()
	wh := s.Env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(s.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	if err != nil {
		return err
	}
	policy := secretpolicy.Policy{Namespace: "gpupool-system", Allowed: []string{"default"}}
	if err := (&gpwebhook.Validator{Credentials: policy, Now: func() time.Time { return fixedNow }}).SetupWithManager(mgr); err != nil {
		return err
	}
	if err := (&gpwebhook.RequestValidator{Now: func() time.Time { return fixedNow }}).SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			panic(err)
		}
	}()
	s.Defer(func() { cancel(); <-done })
	if k8s, err = client.New(s.Config, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	wcfg := rest.CopyConfig(s.Config)
	wcfg.WarningHandler = warnings
	if warned, err = client.New(wcfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	return waitForWebhook(ctx, mgr)
}

// waitForWebhook waits, bounded, until the webhook server answers its readiness check.
func waitForWebhook(ctx context.Context, mgr ctrl.Manager) error {
	check := mgr.GetWebhookServer().StartedChecker()
	for i := 0; i < 200; i++ {
		if check(nil) == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("webhook server did not start")
}

// valid returns a spec that admission accepts; the table below breaks it one way each.
func valid(name string) *gpupoolv1.GPUPoolProfile {
	return &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gpupoolv1.GPUPoolProfileSpec{
			VCenter: gpupoolv1.VCenterSpec{
				Server: "vcenter.test", Datacenter: "DC0", Insecure: true,
				CredentialsSecretRef: gpupoolv1.SecretReference{Name: "creds", Namespace: "default"},
			},
			Layouts: []gpupoolv1.Layout{
				{Name: "day", Workers: []gpupoolv1.Worker{{VM: name + "-a", Profile: "grid_p100-4q"}, {VM: name + "-b", Profile: "grid_p100-4q"}}},
				{Name: "night", Workers: []gpupoolv1.Worker{{VM: name + "-c", Profile: "grid_p100-16q"}}},
			},
			Schedule: &gpupoolv1.Schedule{
				TimeZone: "Europe/Berlin",
				Windows:  []gpupoolv1.Window{{Layout: "day", Start: "0 8 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour}}},
			},
			DefaultLayout: "night",
		},
	}
}

func TestSamplesAreAccepted(t *testing.T) {
	ctx := context.Background()
	files, err := filepath.Glob(filepath.Join(testenv.Root(), "samples", "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least 2 samples, got %v (%v)", files, err)
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gpupool-system"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	pools := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			// Kueue's objects (samples/kueue.yaml) are applied against Kueue's own
			// controller and webhooks, in controllers' TestKueueSampleIsAccepted.
			if u.GroupVersionKind().Group == "kueue.x-k8s.io" {
				continue
			}
			if err := k8s.Create(ctx, &u); client.IgnoreAlreadyExists(err) != nil {
				t.Errorf("%s: %s %s rejected: %v", filepath.Base(f), u.GetKind(), u.GetName(), err)
			}
			if u.GetKind() == "GPUPoolProfile" {
				pools++
				t.Cleanup(func() { _ = k8s.Delete(context.Background(), &u) })
			}
		}
	}
	if pools < 2 {
		t.Fatalf("applied %d GPUPoolProfiles from samples, want at least 2", pools)
	}
	// Defaults are applied by the API server.
	var got gpupoolv1.GPUPoolProfile
	if err := k8s.Get(ctx, client.ObjectKey{Name: "daynight"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.MaxParallel != 1 || got.Spec.Drain.Timeout == nil || got.Spec.NodeReadyTimeout == nil || got.Spec.Parking != gpupoolv1.ParkingSuspend {
		t.Errorf("defaults not applied: %+v", got.Spec)
	}
}

func TestDefaults(t *testing.T) {
	ctx := context.Background()
	p := valid("defaults")
	p.Spec.Schedule.TimeZone = ""
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	s := p.Spec
	if s.Parking != gpupoolv1.ParkingSuspend || s.MaxParallel != 1 || s.Drain.OnTimeout != gpupoolv1.DrainAbort ||
		s.Drain.Timeout.Duration != 10*time.Minute || s.NodeReadyTimeout.Duration != 10*time.Minute || s.Schedule.TimeZone != "UTC" {
		t.Errorf("unexpected defaults: %+v", s)
	}
}

func TestUpdateIsValidatedToo(t *testing.T) {
	ctx := context.Background()
	p := valid("update")
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), p) })
	p.Spec.Schedule.Windows[0].Start = "every morning"
	err := k8s.Update(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "spec.schedule.windows[0].start") {
		t.Fatalf("update with a bad cron: got %v, want rejection naming the field", err)
	}
}

// TestPauseAndFinalizerRemovalOnTheServer goes through the real API server: pausing, and
// removing the finalizer of a pool being deleted, pass the webhook (the rules behind
// that, including pools in conflict, are in update_test.go).
func TestPauseAndFinalizerRemovalOnTheServer(t *testing.T) {
	ctx := context.Background()
	p := valid("finalized")
	p.Finalizers = []string{gpupoolv1.FinalizerName}
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Spec.Paused = true
	if err := k8s.Update(ctx, p); err != nil {
		t.Fatalf("pausing: %v", err)
	}
	if err := k8s.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("want the pool held by its finalizer: %v", err)
	}
	p.Finalizers = nil
	if err := k8s.Update(ctx, p); err != nil {
		t.Fatalf("removing the finalizer of a pool being deleted: %v", err)
	}
}
