package install

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/internal/testenv"
)

// schemaOnly are the keys values.schema.json allows that values.yaml does not set: Helm's
// own global values, which a parent chart passes to its subcharts.
var schemaOnly = []string{"global"}

// jsonSchema is the part of a JSON schema the key check reads.
type jsonSchema struct {
	Type                 any                    `json:"type"`
	Properties           map[string]*jsonSchema `json:"properties"`
	AdditionalProperties any                    `json:"additionalProperties"`
}

// TestValuesSchemaMatchesValues: every key of values.yaml is in values.schema.json and
// every key the schema names is in values.yaml (but in objects values.yaml leaves empty),
// down to the objects whose keys are the user's (nodeSelector, labels, affinity's
// terms), and every object the schema names
// keys of refuses others, so that a misspelled key fails the install. 'make verify' runs
// it.
func TestValuesSchemaMatchesValues(t *testing.T) {
	var values map[string]any
	if err := yaml.UnmarshalStrict(readFile(t, "charts/gpupool/values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	var schema jsonSchema
	dec := json.NewDecoder(bytes.NewReader(readFile(t, "charts/gpupool/values.schema.json")))
	if err := dec.Decode(&schema); err != nil {
		t.Fatal(err)
	}
	for _, problem := range compareKeys("", values, &schema) {
		t.Error(problem)
	}
}

// compareKeys compares the keys of a values object with the properties of its schema.
func compareKeys(path string, values map[string]any, s *jsonSchema) []string {
	if s.Properties == nil {
		return nil // the user's keys: nothing to compare
	}
	var problems []string
	if s.AdditionalProperties != false {
		problems = append(problems, "values.schema.json: "+or(path, "the top level")+" allows unknown keys: set additionalProperties: false")
	}
	for _, k := range sortedKeys(values) {
		p := join(path, k)
		sub, ok := s.Properties[k]
		if !ok {
			problems = append(problems, "values.yaml sets "+p+", which values.schema.json lacks")
			continue
		}
		if m, ok := values[k].(map[string]any); ok {
			problems = append(problems, compareKeys(p, m, sub)...)
		}
	}
	// Note: an object values.yaml leaves empty ({}, such as affinity) is the user's to
	// fill with the keys the schema names.
	for _, k := range sortedKeys(s.Properties) {
		if _, ok := values[k]; !ok && len(values) > 0 && (path != "" || !slices.Contains(schemaOnly, k)) {
			problems = append(problems, "values.schema.json names "+join(path, k)+", which values.yaml lacks")
		}
	}
	return problems
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// TestChartRejectsBadValues: helm lint and helm template refuse values of the wrong type
// or out of range and misspelled keys, at the top level and nested, naming the key.
func TestChartRejectsBadValues(t *testing.T) {
	for _, c := range []struct {
		set, want string
	}{
		{"replicas=two", "at '/replicas': got string, want integer"},
		{"replicas=-1", "at '/replicas'"},
		{"replicass=3", "additional properties 'replicass' not allowed"},
		{"webhook.certMode=certmanager", "at '/webhook/certMode': value must be one of 'self-managed', 'cert-manager'"},
		{"webhook.failurePolicy=fail", "at '/webhook/failurePolicy'"},
		{"webhook.port=70000", "at '/webhook/port'"},
		{"metrics.serviceMonitor.enabeld=true", "at '/metrics/serviceMonitor': additional properties 'enabeld' not allowed"},
		{"resources.request.cpu=1", "at '/resources': additional properties 'request' not allowed"},
		{"image.pullPolicy=Sometimes", "at '/image/pullPolicy'"},
		{"credentialsNamespace=Bad_NS", "at '/credentialsNamespace'"},
		{"extraArgs=--zap-log-level=debug", "at '/extraArgs': got string, want array"},
	} {
		for _, verb := range [][]string{{"lint", "--strict"}, {"template", "gpupool"}} {
			args := append(slices.Clone(verb), "charts/gpupool", "--set", c.set)
			cmd := exec.Command(helmBinary(t), args...)
			cmd.Dir = testenv.Root()
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Errorf("helm %s: %v, want a failure naming %q:\n%s", strings.Join(args, " "), err, c.want, out)
			}
		}
	}
	// Good values of every kind pass.
	helm(t, "lint", "--strict", "charts/gpupool", "--set", "replicas=3", "--set", "global.imageRegistry=r.example",
		"--set", "allowedCredentialsNamespaces={team-a,team-b}", "--set", "nodeSelector.kubernetes\\.io/os=linux",
		"--set", "resources.limits.cpu=1", "--set-string", "image.tag=20260101", "--set", "fullnameOverride=gp")
}
