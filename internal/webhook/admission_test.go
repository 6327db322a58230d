package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/internal/testenv"
	gpwebhook "github.com/gpupool/gpupool/internal/webhook"
)

var k8s client.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, cfg, err := testenv.Start(testenv.Options{Webhook: true})
	if err != nil {
		panic(err)
	}
	defer func() { _ = env.Stop() }()

	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = gpupoolv1.AddToScheme(scheme)
	wh := env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: wh.LocalServingHost, Port: wh.LocalServingPort, CertDir: wh.LocalServingCertDir,
		}),
	})
	if err != nil {
		panic(err)
	}
	policy := secretpolicy.Policy{Namespace: "gpupool-system", Allowed: []string{"default"}}
	if err := (&gpwebhook.Validator{Credentials: policy}).SetupWithManager(mgr); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			panic(err)
		}
	}()
	defer func() { cancel(); <-done }()
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	if err := waitForWebhook(ctx, mgr); err != nil {
		panic(err)
	}
	return m.Run()
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

func TestBadSpecsAreRejected(t *testing.T) {
	ctx := context.Background()
	owner := valid("owner")
	if err := k8s.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), owner) })

	tests := []struct {
		name   string
		mutate func(p *gpupoolv1.GPUPoolProfile)
		want   []string // substrings of the error message, all required
	}{
		{"empty layout list", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts = nil },
			[]string{"spec.layouts", "Required value"}},
		{"duplicate layout names", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[1].Name = "day" },
			[]string{"spec.layouts", "Duplicate value"}},
		{"window names unknown layout", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.Windows[0].Layout = "evening" },
			[]string{"spec.schedule.windows", "must name one of spec.layouts[].name"}},
		{"defaultLayout names unknown layout", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.DefaultLayout = "weekend" },
			[]string{"spec.defaultLayout", "must name one of spec.layouts[].name"}},
		{"override names unknown layout", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Override = &gpupoolv1.Override{Layout: "maintenance"}
		}, []string{"spec.override.layout", "must name one of spec.layouts[].name"}},
		{"cron does not parse", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.Windows[0].Start = "0 25 * * *" },
			[]string{"spec.schedule.windows[0].start", `"0 25 * * *"`, "does not parse", "minute hour day-of-month month day-of-week"}},
		{"cron with six fields", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.Windows[0].Start = "0 0 8 * * 1-5" },
			[]string{"spec.schedule.windows[0].start", "does not parse"}},
		{"cron with a time zone prefix", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.Windows[0].Start = "CRON_TZ=UTC 0 8 * * *" },
			[]string{"spec.schedule.windows[0].start", "set schedule.timeZone instead"}},
		{"unknown time zone", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.TimeZone = "Mars/Olympus_Mons" },
			[]string{"spec.schedule.timeZone", "Mars/Olympus_Mons", "not a known IANA time zone"}},
		{"zero window duration", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.Windows[0].Duration = metav1.Duration{} },
			[]string{"spec.schedule.windows[0].duration", "must be positive"}},
		{"negative window duration", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.Windows[0].Duration = metav1.Duration{Duration: -time.Hour}
		}, []string{"spec.schedule.windows[0].duration", "must be positive"}},
		{"zero drain timeout", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Drain.Timeout = &metav1.Duration{} },
			[]string{"spec.drain.timeout", "must be a positive duration"}},
		{"negative node ready timeout", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.NodeReadyTimeout = &metav1.Duration{Duration: -time.Minute}
		}, []string{"spec.nodeReadyTimeout", "must be a positive duration"}},
		{"negative lead time", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.LeadTime = &metav1.Duration{Duration: -time.Minute}
		}, []string{"spec.schedule.leadTime", "must not be negative"}},
		{"VM listed twice in one layout", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[1].VM = "/DC0/vm/" + p.Spec.Layouts[0].Workers[0].VM
		}, []string{"spec.layouts[0].workers[1].vm", "already listed", "list each VM once per layout"}},
		{"malformed profile name", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[0].Workers[0].Profile = "p100-4q" },
			[]string{"spec.layouts[0].workers[0].profile", "must be an NVIDIA vGPU profile name such as grid_p100-4q"}},
		{"VM claimed by another GPUPoolProfile", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[1].Workers[0].VM = "owner-c"
		}, []string{"spec.layouts[1].workers[0].vm", `claimed by GPUPoolProfile "owner"`}},
		{"bad until timestamp", nil, []string{"spec.override.until", "date-time"}},
		{"parking mode unknown", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Parking = "Hibernate" },
			[]string{"spec.parking", "Unsupported value", `"Suspend"`, `"PowerOff"`}},
		{"drain onTimeout unknown", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Drain.OnTimeout = "Ignore" },
			[]string{"spec.drain.onTimeout", "Unsupported value"}},
		{"maxParallel zero", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.MaxParallel = -1 },
			[]string{"spec.maxParallel", "greater than or equal to 1"}},
		{"no certificate verification configured", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.Insecure = false },
			[]string{"spec.vcenter", "set vcenter.thumbprint or vcenter.caBundle"}},
		{"malformed thumbprint", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.Thumbprint = "not-a-thumbprint" },
			[]string{"spec.vcenter.thumbprint", "must be a SHA-1 or SHA-256 fingerprint"}},
		{"caBundle without a certificate", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.CABundle = []byte("hello") },
			[]string{"spec.vcenter.caBundle", "holds no PEM certificate"}},
		{"layout without workers", func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[1].Workers = nil },
			[]string{"spec.layouts[1].workers", "Required value"}},
		{"layout name not a DNS label", func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[1].Name = "Night Shift"
			p.Spec.DefaultLayout = "Night Shift"
		}, []string{"spec.layouts[1].name", "must be lower-case letters"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.mutate == nil { // a timestamp that the typed client cannot even send
				u := &unstructured.Unstructured{}
				obj, convErr := runtime.DefaultUnstructuredConverter.ToUnstructured(valid("until"))
				if convErr != nil {
					t.Fatal(convErr)
				}
				u.Object = obj
				u.SetGroupVersionKind(gpupoolv1.GroupVersion.WithKind("GPUPoolProfile"))
				_ = unstructured.SetNestedMap(u.Object, map[string]any{"layout": "day", "until": "tomorrow at noon"}, "spec", "override")
				err = k8s.Create(ctx, u)
			} else {
				p := valid("bad")
				tc.mutate(p)
				err = k8s.Create(ctx, p)
				if err == nil {
					_ = k8s.Delete(ctx, p)
				}
			}
			if err == nil {
				t.Fatal("accepted, want rejected")
			}
			t.Log(err)
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) {
				t.Errorf("error is %T %v, want Invalid", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\n does not contain %q", err.Error(), w)
				}
			}
		})
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
