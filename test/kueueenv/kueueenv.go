// Package kueueenv runs Kueue's own manager (sigs.k8s.io/kueue, built from source at a
// pinned version by 'make kueue') against a test API server: envtest's in the controller
// tests, the local environment's in 'make up' and the e2e. It installs what Kueue's
// release manifests install that the bridge's tests need: its CRDs, its admission
// webhooks for Kueue's own objects and batch/v1 Jobs (with their conversion webhooks),
// served by Kueue on loopback. The webhook certificate is made here, valid for Kueue's
// Service name and for 127.0.0.1, and put in the Secret where Kueue's certificate manager
// looks for it (which keeps a valid one) and in its certificate folder (where a kubelet
// would mount that Secret): the API server calls the webhooks at 127.0.0.1.
package kueueenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/loopback"
	"github.com/gpupool/gpupool/internal/testcert"
)

// Version is the Kueue release the tests run (KUEUE_VERSION in the Makefile).
const Version = "v0.17.0"

// Namespace is Kueue's namespace, as its release manifests name it.
const Namespace = "kueue-system"

// Paths are where 'make kueue' puts Kueue's manager and its configuration in a bin folder.
type Paths struct {
	// Bin is the manager binary.
	Bin string
	// CRDs is the folder of Kueue's CRDs.
	CRDs string
	// Webhooks is Kueue's webhook configurations (config/components/webhook/manifests.yaml).
	Webhooks string
}

// In returns the paths in binDir, or an error that says how to build them.
func In(binDir string) (Paths, error) {
	cfg := filepath.Join(binDir, "kueue-config-"+Version)
	p := Paths{Bin: filepath.Join(binDir, "kueue-"+Version), CRDs: filepath.Join(cfg, "crd"), Webhooks: filepath.Join(cfg, "webhook", "manifests.yaml")}
	for _, f := range []string{p.Bin, p.CRDs, p.Webhooks} {
		if _, err := os.Stat(f); err != nil {
			return p, fmt.Errorf("no %s: run 'make kueue' (make test and make up build it)", f)
		}
	}
	return p, nil
}

// Served is a Kueue manager to start: its command line and how to reach its webhooks.
type Served struct {
	// Args are the manager's arguments (its configuration file and kubeconfig).
	Args []string
	// Port is the webhook server's port on 127.0.0.1.
	Port int
	// Certs are the webhook server's certificate and its CA.
	Certs *testcert.Issued
}

// The names Kueue's configuration gives its webhook Service and certificate Secret by
// default.
const (
	webhookService = "kueue-webhook-service"
	webhookSecret  = "kueue-webhook-server-cert"
)

// Prepare writes into dir what the manager reads (its configuration, the webhook
// server's certificate) for the cluster of kubeconfig, and returns how to start it.
// Kueue manages Jobs (batch/job) only: the integration the bridge's tests use.
func Prepare(dir, kubeconfig string) (*Served, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "certs")
	// Longer than the 90 days ahead within which Kueue's certificate manager renews.
	certs, err := testcert.Issue("kueue-ca", []string{webhookService + "." + Namespace + ".svc", "localhost"}, 2*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := certs.WriteServing(certDir); err != nil {
		return nil, err
	}
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
clientConnection:
  qps: -1
  burst: 100
integrations:
  frameworks: ["batch/job"]
featureGates:
  VisibilityOnDemand: false
`, Namespace, port, certDir)
	cfgFile := filepath.Join(dir, "kueue-config.yaml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		return nil, err
	}
	return &Served{Port: port, Certs: certs, Args: []string{"--config", cfgFile, "--kubeconfig", kubeconfig, "--zap-log-level", "info"}}, nil
}

// conversionCRDs are the CRDs Kueue's release manifests give a conversion webhook
// (config/components/crd/kustomization.yaml): they serve v1beta1 and v1beta2.
var conversionCRDs = []string{"localqueues.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io",
	"workloads.kueue.x-k8s.io", "cohorts.kueue.x-k8s.io", "multikueueclusters.kueue.x-k8s.io"}

// Install creates (or updates) Kueue's namespace, CRDs and webhook configurations, the
// webhooks pointed at the manager s serves, and waits until the CRDs are established.
// Webhooks of integrations other than Jobs are left out, as Kueue serves none of them:
// with failurePolicy Fail they would refuse every Pod, Deployment and StatefulSet.
func Install(ctx context.Context, cfg *rest.Config, p Paths, s *Served) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return err
	}
	if err := apply(ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	ca := s.Certs.CA
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: webhookSecret, Namespace: Namespace},
		Data: map[string][]byte{"ca.crt": ca, "ca.key": s.Certs.CAKey, "tls.crt": s.Certs.Cert, "tls.key": s.Certs.Key}}
	if err := apply(ctx, c, secret); err != nil {
		return err
	}
	url := func(path string) *string { u := "https://127.0.0.1:" + strconv.Itoa(s.Port) + path; return &u }
	crds, err := readCRDs(p.CRDs)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if slices.Contains(conversionCRDs, crd.Name) {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: url("/convert"), CABundle: ca}}}
		}
		if err := apply(ctx, c, crd); err != nil {
			return err
		}
	}
	hooks, err := readWebhooks(p.Webhooks, func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: url(path), CABundle: ca}
	})
	if err != nil {
		return err
	}
	for _, h := range hooks {
		if err := apply(ctx, c, h); err != nil {
			return err
		}
	}
	return waitEstablished(ctx, c, crds)
}

// Ready waits until Kueue's controllers run: a probe ClusterQueue turns Active. running
// says whether the manager still runs (its log tail explains why not).
func Ready(ctx context.Context, cfg *rest.Config, timeout time.Duration, running func() error) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return err
	}
	probe := Object(`{apiVersion: kueue.x-k8s.io/v1beta2, kind: ClusterQueue, metadata: {name: kueue-probe}, spec: {namespaceSelector: {}}}`)
	created := false
	deadline := time.Now().Add(timeout)
	for {
		// Kueue's webhook answers the create: until it serves, the create fails.
		if !created {
			err := c.Create(ctx, probe)
			created = err == nil || apierrors.IsAlreadyExists(err)
		}
		if created {
			if err := c.Get(ctx, client.ObjectKeyFromObject(probe), probe); err == nil && conditionTrue(probe, "Active") {
				return c.Delete(ctx, probe)
			}
		}
		if err := running(); err != nil {
			return fmt.Errorf("kueue stopped: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kueue was not ready within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Object parses a Kueue object written in YAML.
func Object(y string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := utilyaml.Unmarshal([]byte(y), &u.Object); err != nil {
		panic(err)
	}
	return u
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiextensionsv1.AddToScheme(s)
	return s
}

func readCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no Kueue CRDs in %s: run 'make kueue'", dir)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := utilyaml.Unmarshal(data, crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// readWebhooks reads Kueue's webhook configurations, keeps the webhooks of Kueue's own
// objects and of Jobs, names the configurations as Kueue's release does, and points
// every webhook at clientConfig(path of its Service reference).
func readWebhooks(file string, clientConfig func(path string) admissionregistrationv1.WebhookClientConfig) ([]client.Object, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	served := func(rules []admissionregistrationv1.RuleWithOperations) bool {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				if g == "kueue.x-k8s.io" || g == "batch" {
					return true
				}
			}
		}
		return false
	}
	path := func(cc admissionregistrationv1.WebhookClientConfig) string {
		if cc.Service != nil && cc.Service.Path != nil {
			return *cc.Service.Path
		}
		return "/"
	}
	var out []client.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if u.Object == nil {
			continue
		}
		raw, err := u.MarshalJSON()
		if err != nil {
			return nil, err
		}
		switch u.GetKind() {
		case "MutatingWebhookConfiguration":
			var m admissionregistrationv1.MutatingWebhookConfiguration
			if err := utilyaml.Unmarshal(raw, &m); err != nil {
				return nil, err
			}
			m.Name = "kueue-" + m.Name
			m.Webhooks = slices.DeleteFunc(m.Webhooks, func(w admissionregistrationv1.MutatingWebhook) bool { return !served(w.Rules) })
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig = clientConfig(path(m.Webhooks[i].ClientConfig))
			}
			out = append(out, &m)
		case "ValidatingWebhookConfiguration":
			var v admissionregistrationv1.ValidatingWebhookConfiguration
			if err := utilyaml.Unmarshal(raw, &v); err != nil {
				return nil, err
			}
			v.Name = "kueue-" + v.Name
			v.Webhooks = slices.DeleteFunc(v.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool { return !served(w.Rules) })
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig = clientConfig(path(v.Webhooks[i].ClientConfig))
			}
			out = append(out, &v)
		}
	}
	if len(out) != 2 {
		return nil, fmt.Errorf("%s: want Kueue's mutating and validating webhook configurations, found %d", file, len(out))
	}
	return out, nil
}

// apply creates obj, or replaces it with obj when it exists (a second 'up' on a
// cluster that kept Kueue's objects).
func apply(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return err
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	return c.Update(ctx, obj)
}

func waitEstablished(ctx context.Context, c client.Client, crds []*apiextensionsv1.CustomResourceDefinition) error {
	deadline := time.Now().Add(time.Minute)
	for _, want := range crds {
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, &crd); err == nil && established(&crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established within a minute", want.Name)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
