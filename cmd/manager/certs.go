package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Webhook certificate modes.
const (
	// certModeExternal: tls.crt and tls.key are provided in the cert dir by someone else
	// (cert-manager through a Secret volume, or the local environment).
	certModeExternal = "external"
	// certModeSelfManaged: the manager creates and rotates a CA and a serving certificate
	// in a Secret, writes them into the cert dir and injects the CA into the webhook
	// configuration's caBundle (open-policy-agent/cert-controller).
	certModeSelfManaged = "self-managed"
)

// webhookCertOptions configures the webhook's serving certificate.
type webhookCertOptions struct {
	Mode          string
	SecretName    string
	ServiceName   string
	WebhookConfig string
	Namespace     string
	// Rotation timing; zero values take cert-controller's defaults (CA 10 years, serving
	// certificate 1 year, renewed 90 days before expiry, checked every 12 hours).
	CAValidity, CertValidity, Lookahead, CheckEvery time.Duration

	// ready is closed once the certificate is written and injected (self-managed mode).
	ready chan struct{}
}

// wrap returns the webhook server to give the manager: in self-managed mode one that
// starts serving only once the certificate is ready (the server reads the certificate
// when it starts). The webhook is registered before the manager starts, as usual.
func (o *webhookCertOptions) wrap(s webhook.Server) webhook.Server {
	if o.Mode != certModeSelfManaged {
		return s
	}
	if o.ready == nil {
		o.ready = make(chan struct{})
	}
	return &gatedServer{Server: s, ready: o.ready}
}

// gatedServer delays the webhook server's start until ready is closed.
type gatedServer struct {
	webhook.Server
	ready <-chan struct{}
}

func (g *gatedServer) Start(ctx context.Context) error {
	select {
	case <-g.ready:
	case <-ctx.Done():
		return nil
	}
	return g.Server.Start(ctx)
}

func bindWebhookCertFlags(fs *flag.FlagSet) *webhookCertOptions {
	o := &webhookCertOptions{}
	fs.StringVar(&o.Mode, "webhook-cert-mode", certModeExternal, "external: tls.crt/tls.key are mounted into --webhook-cert-dir (cert-manager); self-managed: the manager creates, rotates and injects its own certificate.")
	fs.StringVar(&o.SecretName, "webhook-cert-secret", "gpupool-webhook-server-cert", "self-managed: the Secret (in the manager's namespace) holding the CA and serving certificate.")
	fs.StringVar(&o.ServiceName, "webhook-service-name", "gpupool-webhook-service", "self-managed: the webhook Service; the certificate is issued for <service>.<namespace>.svc.")
	fs.StringVar(&o.WebhookConfig, "webhook-configuration-name", "gpupool-validating-webhook-configuration", "self-managed: the ValidatingWebhookConfiguration whose caBundle is kept current.")
	fs.StringVar(&o.Namespace, "webhook-cert-namespace", "", "self-managed: namespace of the Secret and Service (default: the pod's namespace).")
	return o
}

// podNamespace is the namespace the manager runs in.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// setupWebhookCerts prepares the serving certificate: in self-managed mode it adds the
// rotator, which closes o.ready once the certificate is written and injected.
func setupWebhookCerts(mgr manager.Manager, o *webhookCertOptions, certDir string) error {
	switch o.Mode {
	case certModeExternal:
		return nil
	case certModeSelfManaged:
		if _, gated := mgr.GetWebhookServer().(*gatedServer); !gated || o.ready == nil {
			return errors.New("self-managed webhook certificates need the webhook server from webhookCertOptions.wrap")
		}
	default:
		return fmt.Errorf("--webhook-cert-mode: %q is neither %q nor %q", o.Mode, certModeExternal, certModeSelfManaged)
	}
	ns := o.Namespace
	if ns == "" {
		ns = podNamespace()
	}
	if ns == "" {
		return errors.New("self-managed webhook certificates need the manager's namespace: set POD_NAMESPACE or --webhook-cert-namespace")
	}
	if certDir == "" {
		return errors.New("self-managed webhook certificates need --webhook-cert-dir (a writable folder, an emptyDir)")
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	dns := fmt.Sprintf("%s.%s.svc", o.ServiceName, ns)
	if err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: ns, Name: o.SecretName},
		CertDir:        certDir,
		CAName:         "gpupool-webhook-ca",
		CAOrganization: "gpupool",
		DNSName:        dns,
		ExtraDNSNames:  []string{dns + ".cluster.local"},
		IsReady:        o.ready,
		Webhooks:       []rotator.WebhookInfo{{Name: o.WebhookConfig, Type: rotator.Validating}},
		FieldOwner:     "gpupool-manager",
		// Every replica serves the webhook, so every replica keeps the certificate: the
		// Secret's resourceVersion serialises concurrent rotations.
		RequireLeaderElection:  false,
		EnableReadinessCheck:   true,
		CaCertDuration:         o.CAValidity,
		ServerCertDuration:     o.CertValidity,
		LookaheadInterval:      o.Lookahead,
		RotationCheckFrequency: o.CheckEvery,
	}); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	return mgr.Add(&certFileSync{client: cs, namespace: ns, name: o.SecretName, dir: certDir})
}

// certFileSync writes the Secret's tls.crt and tls.key into the cert dir whenever the
// Secret changes. The webhook server's certificate watcher reloads them: a rotation takes
// effect at once, without waiting for the kubelet to refresh a Secret volume (which it
// never does for subPath mounts, and which is absent outside a cluster).
type certFileSync struct {
	client          kubernetes.Interface
	namespace, name string
	dir             string
}

// NeedLeaderElection: every replica serves the webhook.
func (s *certFileSync) NeedLeaderElection() bool { return false }

func (s *certFileSync) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("webhook-certs")
	f := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithNamespace(s.namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.name).String()
		}))
	inf := f.Core().V1().Secrets().Informer()
	write := func(obj any) {
		sec, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		if err := writeCertFiles(s.dir, sec); err != nil {
			log.Error(err, "Unable to write the webhook certificate", "dir", s.dir)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// writeCertFiles writes tls.key then tls.crt (each atomically, by rename) when they
// differ from the files present. An incomplete Secret is left alone.
func writeCertFiles(dir string, sec *corev1.Secret) error {
	crt, key := sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return nil
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{corev1.TLSPrivateKeyKey, key}, {corev1.TLSCertKey, crt}} {
		p := filepath.Join(dir, f.name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		tmp, err := os.CreateTemp(dir, "."+f.name+"-")
		if err != nil {
			return err
		}
		_, err = tmp.Write(f.data)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), p)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}

// setupWebhook prepares the certificate and registers the validating webhook. With
// self-managed certificates the manager reports ready only once the webhook serves.
func setupWebhook(mgr manager.Manager, o *webhookCertOptions, certDir string, register func() error) error {
	if err := setupWebhookCerts(mgr, o, certDir); err != nil {
		return err
	}
	if err := register(); err != nil {
		return err
	}
	if o.Mode != certModeSelfManaged {
		return nil
	}
	return mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker())
}
