package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/internal/testenv"
)

// promtoolVersion is the promtool the tests run (PROMTOOL_VERSION in the Makefile).
const promtoolVersion = "v3.16.0"

// promtool returns the promtool binary: $PROMTOOL, which make test sets, or the one
// 'make promtool' built into bin/. Only a plain 'go test' without either skips.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p := filepath.Join(testenv.Root(), "bin", "promtool-"+promtoolVersion)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no %s: run 'make promtool' (make test builds it and runs this test)", p)
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestAlertRulesWithPromtool checks config/prometheus/rules.yaml with 'promtool check
// rules' and runs its unit tests (rules_test.yaml) with 'promtool test rules': each alert
// fires on synthetic series at the expected time with the expected labels and
// annotations, and stays quiet otherwise.
func TestAlertRulesWithPromtool(t *testing.T) {
	runPromtool(t, "", "--version")
	dir := t.TempDir()
	groups, err := RuleGroups(filepath.Join(testenv.Root(), "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), groups, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "rules.yaml")
	runPromtool(t, dir, "test", "rules", "rules_test.yaml")
}

// TestEveryAlertIsTested fails for an alert of rules.yaml that rules_test.yaml never
// expects to fire, or never expects to be quiet, and for a test of an alert that
// rules.yaml does not have.
func TestEveryAlertIsTested(t *testing.T) {
	qs, err := RuleQueries(filepath.Join(testenv.Root(), "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("rules_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	missing := untestedAlerts(t, qs, b)
	for _, m := range missing {
		t.Error(m)
	}
}

func untestedAlerts(t *testing.T, rules []Query, testFile []byte) []string {
	t.Helper()
	var file struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(testFile, &file); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var out []string
	alerts := map[string]bool{}
	for _, r := range rules {
		name, ok := strings.CutPrefix(r.Where, "alert ")
		if !ok {
			continue
		}
		alerts[name] = true
		if !fires[name] {
			out = append(out, name+": no case in rules_test.yaml where it fires")
		}
		if !quiet[name] {
			out = append(out, name+": no case in rules_test.yaml where it stays quiet (exp_alerts: [])")
		}
	}
	// A misspelled alertname expecting no alert would pass without testing anything.
	for name := range quiet {
		if !alerts[name] {
			out = append(out, name+": rules_test.yaml tests an alert rules.yaml does not have")
		}
	}
	sort.Strings(out)
	return out
}
