package v1alpha1_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// celRule is one x-kubernetes-validations entry of a generated CRD, with where it is.
type celRule struct {
	path              string
	rule              string
	message           string
	messageExpression string
}

// TestEveryCELRuleSaysWhatToWrite walks every x-kubernetes-validations rule of the
// generated CRDs. A rule without a message is refused with its raw CEL ("failed rule:
// self.matches('^(grid|nvidia)_…')"), and so is a rule whose messageExpression fails at
// run time (for instance because its result holds a line break, as a value pasted with a
// trailing newline does) unless it has a message to fall back to. So every rule has a
// message, and a messageExpression quotes the values it shows with strings.quote, which
// escapes a newline, instead of pasting them between hand-written quotes.
func TestEveryCELRuleSaysWhatToWrite(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	total := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd map[string]any
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		versions, _ := nested(crd, "spec", "versions").([]any)
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			var rules []celRule
			walkSchema(nested(vm, "schema", "openAPIV3Schema"), "", &rules)
			for _, r := range rules {
				where := filepath.Base(f) + " " + vm["name"].(string) + " " + r.path + ": rule " + r.rule
				if strings.TrimSpace(r.message) == "" && strings.TrimSpace(r.messageExpression) == "" {
					t.Errorf("%s has neither message nor messageExpression: the API server would answer with the raw rule", where)
					continue
				}
				if strings.TrimSpace(r.message) == "" {
					t.Errorf("%s has a messageExpression but no message to fall back to when the expression fails", where)
				}
				if strings.Contains(r.messageExpression, `"' +`) || strings.Contains(r.messageExpression, `+ '"`) {
					t.Errorf("%s quotes a value by hand in its messageExpression; use strings.quote(...) so that a newline in the value does not make the expression fail", where)
				}
			}
			total += len(rules)
		}
	}
	// The walk must have found the rules, or the test proves nothing.
	if total < 20 {
		t.Fatalf("found %d CEL rules, want at least 20: does the walk still reach them?", total)
	}
}

// walkSchema collects the x-kubernetes-validations of an OpenAPI v3 schema and of every
// schema below it, naming each by its path (spec.layouts[].workers[].profile).
func walkSchema(node any, path string, out *[]celRule) {
	s, ok := node.(map[string]any)
	if !ok {
		return
	}
	if vs, ok := s["x-kubernetes-validations"].([]any); ok {
		for _, v := range vs {
			m, _ := v.(map[string]any)
			r := celRule{path: path}
			r.rule, _ = m["rule"].(string)
			r.message, _ = m["message"].(string)
			r.messageExpression, _ = m["messageExpression"].(string)
			if r.path == "" {
				r.path = "<root>"
			}
			*out = append(*out, r)
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			walkSchema(props[k], p, out)
		}
	}
	walkSchema(s["items"], path+"[]", out)
	walkSchema(s["additionalProperties"], path+"[*]", out)
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if subs, ok := s[k].([]any); ok {
			for _, sub := range subs {
				walkSchema(sub, path, out)
			}
		}
	}
	walkSchema(s["not"], path, out)
}

func nested(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		cm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = cm[k]
	}
	return cur
}

// The walk reaches rules under properties, items and additionalProperties, and a rule
// without any message is reported.
func TestWalkSchemaFindsNestedRules(t *testing.T) {
	schema := map[string]any{
		"x-kubernetes-validations": []any{map[string]any{"rule": "true", "message": "root"}},
		"properties": map[string]any{
			"spec": map[string]any{"properties": map[string]any{
				"list": map[string]any{"items": map[string]any{
					"x-kubernetes-validations": []any{map[string]any{"rule": "self.size() > 0"}},
				}},
				"labels": map[string]any{"additionalProperties": map[string]any{
					"x-kubernetes-validations": []any{map[string]any{"rule": "self != ''", "messageExpression": "'x'"}},
				}},
			}},
		},
	}
	var rules []celRule
	walkSchema(schema, "", &rules)
	var got []string
	for _, r := range rules {
		got = append(got, r.path+"="+r.message+r.messageExpression)
	}
	want := "<root>=root spec.labels[*]='x' spec.list[]="
	if strings.Join(got, " ") != want {
		t.Errorf("walk found %q, want %q", strings.Join(got, " "), want)
	}
}
