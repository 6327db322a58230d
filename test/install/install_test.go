// Package install checks what users install: the Helm chart lints and renders, renders
// what dist/install.yaml holds, and the chart and both install manifests are accepted by
// a real API server (server-side apply, dry run).
package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/testenv"
)

const namespace = "gpupool-system"

func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	matches, _ := filepath.Glob(filepath.Join(testenv.Root(), "bin", "helm-*"))
	if len(matches) == 0 {
		t.Skip("no helm: run 'make test', which builds it into bin/")
	}
	return matches[len(matches)-1]
}

func helm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Dir = testenv.Root()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

func decode(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.Root(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var chartModes = map[string][]string{
	"self-managed": nil,
	"cert-manager": {"--set", "webhook.certMode=cert-manager"},
	"monitoring":   {"--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.dashboard.enabled=true"},
}

func renderChart(t *testing.T, extra ...string) []*unstructured.Unstructured {
	return decode(t, helm(t, append([]string{"template", "gpupool", "charts/gpupool", "--namespace", namespace, "--include-crds"}, extra...)...))
}

func TestChartLints(t *testing.T) {
	for mode, args := range chartModes {
		t.Run(mode, func(t *testing.T) {
			helm(t, append([]string{"lint", "--strict", "charts/gpupool"}, args...)...)
		})
	}
}

// TestChartMatchesInstallManifest: with default values the chart installs the objects
// dist/install.yaml installs, with the same specifications (labels aside); in
// cert-manager mode those of dist/install-cert-manager.yaml.
func TestChartMatchesInstallManifest(t *testing.T) {
	for mode, manifest := range map[string]string{"self-managed": "dist/install.yaml", "cert-manager": "dist/install-cert-manager.yaml"} {
		t.Run(mode, func(t *testing.T) {
			chart := index(renderChart(t, chartModes[mode]...))
			install := index(decode(t, readFile(t, manifest)))
			delete(install, "Namespace/"+namespace) // helm installs into an existing namespace
			if got, want := keys(chart), keys(install); !reflect.DeepEqual(got, want) {
				t.Fatalf("the chart renders\n  %v\nbut %s holds\n  %v", got, manifest, want)
			}
			for k, c := range chart {
				if diff := compare(c, install[k]); diff != "" {
					t.Errorf("%s differs between the chart and %s: %s", k, manifest, diff)
				}
			}
		})
	}
}

func index(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		m[o.GetKind()+"/"+o.GetName()] = o
	}
	return m
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// compare reports how two objects differ outside metadata labels.
func compare(a, b *unstructured.Unstructured) string {
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy().Object
		md, _ := c["metadata"].(map[string]any)
		delete(md, "labels")
		return c
	}
	x, y := strip(a), strip(b)
	for _, f := range []string{"metadata", "spec", "rules", "roleRef", "subjects", "webhooks", "type", "data"} {
		if !reflect.DeepEqual(x[f], y[f]) {
			return fmt.Sprintf("%s:\n  chart:    %v\n  manifest: %v", f, x[f], y[f])
		}
	}
	return ""
}

// TestInstallDryRun applies dist/install.yaml, dist/install-cert-manager.yaml and the
// chart in each mode to a real API server with server-side apply in dry-run mode. The
// cert-manager and Prometheus Operator kinds are served by stand-in CRDs that accept any
// content: their schemas are not checked.
func TestInstallDryRun(t *testing.T) {
	env, cfg, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	s := runtime.NewScheme()
	_ = apiextensionsv1.AddToScheme(s)
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range []struct{ group, kind, plural string }{
		{"cert-manager.io", "Issuer", "issuers"}, {"cert-manager.io", "Certificate", "certificates"},
		{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"}, {"monitoring.coreos.com", "PrometheusRule", "prometheusrules"},
	} {
		if err := c.Create(ctx, standInCRD(crd.group, crd.kind, crd.plural)); err != nil {
			t.Fatal(err)
		}
	}
	// Wait (bounded) until the stand-ins are served, then map kinds with a fresh client.
	for _, name := range []string{"issuers.cert-manager.io", "certificates.cert-manager.io", "servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"} {
		established := false
		for deadline := time.Now().Add(30 * time.Second); !established && time.Now().Before(deadline); {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				t.Fatal(err)
			}
			for _, cond := range crd.Status.Conditions {
				established = established || (cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue)
			}
			if !established {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if !established {
			t.Fatalf("CRD %s is not established", name)
		}
	}
	if c, err = client.New(cfg, client.Options{Scheme: s}); err != nil {
		t.Fatal(err)
	}
	// The namespace exists for real: a dry-run cannot create objects in a namespace
	// created by the same dry run.
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(namespace)
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sets := map[string][]*unstructured.Unstructured{
		"dist/install.yaml":              decode(t, readFile(t, "dist/install.yaml")),
		"dist/install-cert-manager.yaml": decode(t, readFile(t, "dist/install-cert-manager.yaml")),
	}
	for mode, args := range chartModes {
		sets["chart/"+mode] = renderChart(t, args...)
	}
	for name, objs := range sets {
		t.Run(strings.ReplaceAll(name, "/", "_"), func(t *testing.T) {
			for _, o := range objs {
				gvk := o.GroupVersionKind()
				mapping, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("%s %s: %v", gvk, o.GetName(), err)
				}
				var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
				if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
					ri = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
				}
				if _, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "gpupool-install-test", Force: true, DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Errorf("%s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
}

func standInCRD(group, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, Plural: plural, ListKind: kind + "List", Singular: strings.ToLower(kind)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTrue(),
				}},
			}},
		},
	}
}

func ptrTrue() *bool { b := true; return &b }
