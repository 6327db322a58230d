package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpwebhook "github.com/gpupool/gpupool/internal/webhook"
)

const (
	testNS      = "gpupool-system"
	testSecret  = "gpupool-webhook-server-cert"
	testService = "gpupool-webhook-service"
	testVWC     = "gpupool-validating-webhook-configuration"
)

// TestSelfManagedWebhookCertificates runs the self-managed mode on a real API server:
// the manager fills the empty Secret, writes the serving certificate into its cert dir,
// injects the CA into the webhook configuration and serves the webhook with it. Then a
// serving certificate close to expiry is renewed (same CA), and a lost CA is replaced
// and re-injected; after each, a client trusting only the webhook configuration's
// caBundle completes a TLS handshake for the Service's DNS name, as the API server does.
func TestSelfManagedWebhookCertificates(t *testing.T) {
	logs.start(t)
	cfg := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: testNS}},
		&admissionv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testVWC},
			Webhooks: []admissionv1.ValidatingWebhook{{
				Name:                    "vgpupoolprofile.gpupool.dev",
				ClientConfig:            admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: testNS, Name: testService, Path: ptr.To("/validate-gpupool-dev-v1alpha1-gpupoolprofile")}},
				AdmissionReviewVersions: []string{"v1"},
				SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
				// Nothing matches: the API server must not call a webhook it cannot reach.
				Rules: []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Create}, Rule: admissionv1.Rule{APIGroups: []string{"example.invalid"}, APIVersions: []string{"v1"}, Resources: []string{"nothing"}}}},
			}},
		},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	port := freeTestPort(t)
	certDir := filepath.Join(t.TempDir(), "serving-certs")
	opts := &webhookCertOptions{Mode: certModeSelfManaged, Namespace: testNS, SecretName: testSecret, ServiceName: testService, WebhookConfig: testVWC}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "127.0.0.1:0",
		WebhookServer:          opts.wrap(webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := setupWebhook(mgr, opts, certDir, func() error { return (&gpwebhook.Validator{}).SetupWithManager(mgr) }); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	dns := testService + "." + testNS + ".svc"
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// served waits until the webhook serves a certificate that the webhook configuration's
	// caBundle verifies for the Service's name and that accept accepts.
	served := func(accept func(leaf *x509.Certificate, ca []byte) error) (*x509.Certificate, []byte) {
		t.Helper()
		var last error
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			vwc := &admissionv1.ValidatingWebhookConfiguration{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: testVWC}, vwc); err != nil {
				t.Fatal(err)
			}
			ca := vwc.Webhooks[0].ClientConfig.CABundle
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				last = fmt.Errorf("no caBundle injected yet")
				continue
			}
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: dns, MinVersion: tls.VersionTLS12})
			if err != nil {
				last = err
				continue
			}
			leaf := conn.ConnectionState().PeerCertificates[0]
			_ = conn.Close()
			if err := accept(leaf, ca); err != nil {
				last = err
				continue
			}
			return leaf, ca
		}
		t.Fatalf("the webhook does not serve a certificate verified by the injected caBundle: %v", last)
		return nil, nil
	}

	longLived := func(leaf *x509.Certificate) error {
		if time.Until(leaf.NotAfter) < 300*24*time.Hour {
			return fmt.Errorf("serving a certificate that expires %s", leaf.NotAfter)
		}
		return nil
	}
	first, firstCA := served(func(leaf *x509.Certificate, _ []byte) error { return longLived(leaf) })
	sec := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: testNS, Name: testSecret}, sec); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if len(sec.Data[k]) == 0 {
			t.Fatalf("the Secret lacks %s", k)
		}
	}
	if !bytes.Equal(sec.Data["ca.crt"], firstCA) {
		t.Fatal("the injected caBundle is not the Secret's CA")
	}
	onDisk, err := os.ReadFile(filepath.Join(certDir, "tls.crt"))
	if err != nil || !bytes.Equal(onDisk, sec.Data["tls.crt"]) {
		t.Fatalf("the cert dir does not hold the Secret's certificate: %v", err)
	}

	// Renewal: the serving certificate is a day from expiry (inside the 90-day lookahead).
	ca := caArtifacts(t, sec)
	short := &rotator.CertRotator{DNSName: dns, ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	crt, key, err := short.CreateCertPEM(ca, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	sec.Data["tls.crt"], sec.Data["tls.key"] = crt, key
	if err := k8s.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	renewed, renewedCA := served(func(leaf *x509.Certificate, _ []byte) error {
		if leaf.Equal(first) {
			return fmt.Errorf("still serving the first certificate")
		}
		return longLived(leaf)
	})
	if !bytes.Equal(renewedCA, firstCA) {
		t.Error("renewing the serving certificate replaced the CA")
	}

	// CA rotation: the CA is gone from the Secret; a new one is made and injected.
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: testNS, Name: testSecret}, sec); err != nil {
		t.Fatal(err)
	}
	delete(sec.Data, "ca.crt")
	delete(sec.Data, "ca.key")
	if err := k8s.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	served(func(leaf *x509.Certificate, ca []byte) error {
		if bytes.Equal(ca, firstCA) || leaf.Equal(renewed) {
			return fmt.Errorf("the CA is not replaced yet")
		}
		return longLived(leaf)
	})
}

func caArtifacts(t *testing.T, sec *corev1.Secret) *rotator.KeyPairArtifacts {
	t.Helper()
	cb, _ := pem.Decode(sec.Data["ca.crt"])
	kb, _ := pem.Decode(sec.Data["ca.key"])
	if cb == nil || kb == nil {
		t.Fatal("the Secret's CA is not PEM")
	}
	c, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.ParsePKCS1PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return &rotator.KeyPairArtifacts{Cert: c, Key: k, CertPEM: sec.Data["ca.crt"], KeyPEM: sec.Data["ca.key"]}
}

func freeTestPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// logs collects the manager's log (the logger is global) and prints it when a test fails.
var logs = &testLogs{}

type testLogs struct {
	once sync.Once
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (l *testLogs) start(t *testing.T) {
	l.once.Do(func() { ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(l))) })
	l.mu.Lock()
	l.buf.Reset()
	l.mu.Unlock()
	t.Cleanup(func() {
		if t.Failed() {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Log("manager log:\n" + l.buf.String())
		}
	})
}

func (l *testLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}
