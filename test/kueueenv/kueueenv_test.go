package kueueenv

import (
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// TestReadWebhooks: of Kueue's webhook configurations only the webhooks of Kueue's own
// objects and of Jobs are kept (Kueue serves no other integration here, and with
// failurePolicy Fail the others would refuse every Pod), under Kueue's release names,
// each pointed at the client config made from its Service path.
func TestReadWebhooks(t *testing.T) {
	manifest := `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- {name: mpod.kb.io, admissionReviewVersions: [v1], sideEffects: None,
   clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}},
   rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]}
- {name: mjob.kb.io, admissionReviewVersions: [v1], sideEffects: None,
   clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}},
   rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- {name: vdeployment.kb.io, admissionReviewVersions: [v1], sideEffects: None,
   clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-apps-v1-deployment}},
   rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]}
- {name: vworkload.kb.io, admissionReviewVersions: [v1], sideEffects: None,
   clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-workload}},
   rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE], resources: [workloads]}]}
`
	file := filepath.Join(t.TempDir(), "manifests.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := readWebhooks(file, func(path string) admissionregistrationv1.WebhookClientConfig {
		u := "https://127.0.0.1:1" + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u}
	})
	if err != nil {
		t.Fatal(err)
	}
	m, ok1 := objs[0].(*admissionregistrationv1.MutatingWebhookConfiguration)
	v, ok2 := objs[1].(*admissionregistrationv1.ValidatingWebhookConfiguration)
	if !ok1 || !ok2 {
		t.Fatalf("got %T, %T", objs[0], objs[1])
	}
	if m.Name != "kueue-mutating-webhook-configuration" || v.Name != "kueue-validating-webhook-configuration" {
		t.Errorf("names %q, %q: Kueue's certificate manager injects its CA into the kueue- ones", m.Name, v.Name)
	}
	if len(m.Webhooks) != 1 || m.Webhooks[0].Name != "mjob.kb.io" || *m.Webhooks[0].ClientConfig.URL != "https://127.0.0.1:1/mutate-batch-v1-job" || m.Webhooks[0].ClientConfig.Service != nil {
		t.Errorf("mutating webhooks %+v, want only the Job's, at its URL", m.Webhooks)
	}
	if len(v.Webhooks) != 1 || v.Webhooks[0].Name != "vworkload.kb.io" || *v.Webhooks[0].ClientConfig.URL != "https://127.0.0.1:1/validate-kueue-x-k8s-io-v1beta2-workload" {
		t.Errorf("validating webhooks %+v, want only the Workload's, at its URL", v.Webhooks)
	}

	// A file without both configurations is refused, not half installed.
	if err := os.WriteFile(file, []byte(manifest[:len(manifest)/2]), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readWebhooks(file, func(string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{}
	}); err == nil {
		t.Error("a manifest with one configuration was accepted")
	}
}
