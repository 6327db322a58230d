package localenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/internal/webhook"
)

// testVCenter is a vCenter as Up finds vgpusim.
var testVCenter = PoolVCenter{Server: "127.0.0.1:40443", Datacenter: "dc1", SecretName: credentialsSecret, SecretNamespace: credentialsNamespace,
	Thumbprint: "3B:9F:61:2A:5C:D4:7E:08:11:C2:9A:4F:6B:E3:70:15:8D:2C:44:91:AB:06:F7:3E:52:C8:19:DA:60:7B:E4:0F"}

// TestPoolFile: the pool Up writes is samples/daynight.yaml's with the environment's
// vCenter pinned by thumbprint, decodes strictly, and passes the CRD's schema and CEL
// rules and the webhook's checks, so that 'kubectl apply -f' takes it.
func TestPoolFile(t *testing.T) {
	data, err := RenderPool(testVCenter, "/tmp/env/pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("kubectl apply -f /tmp/env/pool.yaml")) {
		t.Errorf("pool.yaml does not say how to apply it:\n%s", data)
	}
	var pool gpupoolv1.GPUPoolProfile
	if err := yaml.UnmarshalStrict(data, &pool); err != nil {
		t.Fatalf("pool.yaml: %v\n%s", err, data)
	}
	want := gpupoolv1.VCenterSpec{Server: testVCenter.Server, Datacenter: testVCenter.Datacenter, Thumbprint: testVCenter.Thumbprint,
		CredentialsSecretRef: gpupoolv1.SecretReference{Name: credentialsSecret, Namespace: credentialsNamespace}}
	if !reflect.DeepEqual(pool.Spec.VCenter, want) || pool.Spec.VCenter.Insecure {
		t.Errorf("vcenter %+v, want %+v (pinned, not insecure)", pool.Spec.VCenter, want)
	}
	sample := samplePool(t)
	sample.Spec.VCenter = pool.Spec.VCenter
	if !reflect.DeepEqual(pool.Spec, sample.Spec) || pool.Name != sample.Name {
		t.Errorf("pool.yaml is not samples/daynight.yaml with this vCenter:\n got %+v\nwant %+v", pool.Spec, sample.Spec)
	}
	if errs := webhook.ValidateSpec(&pool.Spec); len(errs) > 0 {
		t.Errorf("the webhook rejects pool.yaml: %v", errs)
	}
	if errs := validateWithCRD(t, data); len(errs) > 0 {
		t.Errorf("the CRD rejects pool.yaml: %v", errs)
	}
	// The check itself: a thumbprint govc's way but without colons is refused.
	bad := testVCenter
	bad.Thumbprint = strings.ReplaceAll(bad.Thumbprint, ":", "")
	if data, err := RenderPool(bad, "pool.yaml"); err != nil || len(validateWithCRD(t, data)) == 0 {
		t.Errorf("the CRD check let a thumbprint without colons pass: %v", err)
	}
}

// samplePool reads the GPUPoolProfile of samples/daynight.yaml.
func samplePool(t *testing.T) *gpupoolv1.GPUPoolProfile {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.Root(), "samples", "daynight.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			t.Fatal("samples/daynight.yaml has no GPUPoolProfile")
		}
		if err != nil {
			t.Fatal(err)
		}
		var p gpupoolv1.GPUPoolProfile
		if err := yaml.UnmarshalStrict(doc, &p); err == nil && p.Kind == "GPUPoolProfile" {
			return &p
		}
	}
}

// validateWithCRD checks an object against the CRD's OpenAPI schema and CEL rules, as
// the API server does on create.
func validateWithCRD(t *testing.T, data []byte) []error {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "crd", "bases", "gpupool.dev_gpupoolprofiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	var props apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, &props, nil); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	var errs []error
	sv, _, err := validation.NewSchemaValidator(&props)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range validation.ValidateCustomResource(nil, obj, sv) {
		errs = append(errs, e)
	}
	st, err := structuralschema.NewStructural(&props)
	if err != nil {
		t.Fatal(err)
	}
	celErrs, _ := cel.NewValidator(st, true, celconfig.PerCallLimit).Validate(context.Background(), nil, st, obj, nil, celconfig.RuntimeCELCostBudget)
	for _, e := range celErrs {
		errs = append(errs, e)
	}
	return errs
}
