package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Query is a PromQL expression and where it is written.
type Query struct {
	// Where names the alert, panel or variable, for the messages.
	Where string
	Expr  string
}

// RuleGroups reads a PrometheusRule manifest (config/prometheus/rules.yaml) and returns
// its spec: the rule groups, as Prometheus and promtool read them from a rule file.
func RuleGroups(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		return nil, fmt.Errorf("%s: not a PrometheusRule with rule groups", path)
	}
	return yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
}

// RuleQueries returns the expressions of a PrometheusRule's alerts and recording rules.
func RuleQueries(path string) ([]Query, error) {
	groups, err := RuleGroups(path)
	if err != nil {
		return nil, err
	}
	var file struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(groups, &file); err != nil {
		return nil, err
	}
	var qs []Query
	for _, g := range file.Groups {
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s, rule %d", g.Name, i)
			switch {
			case r.Alert != "":
				where = "alert " + r.Alert
			case r.Record != "":
				where = "recording rule " + r.Record
			}
			qs = append(qs, Query{Where: where, Expr: r.Expr})
		}
	}
	return qs, nil
}

// dashboardPanel is the part of a Grafana panel that holds queries; rows hold panels.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// DashboardQueries returns the PromQL of a Grafana dashboard: its panels' targets (in
// rows too) and its query variables (label_values(selector, label) and
// query_result(expr) give their PromQL; label_values(label) has none).
func DashboardQueries(path string) ([]Query, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var qs []Query
	var walk func(ps []dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) != "" {
					qs = append(qs, Query{Where: fmt.Sprintf("panel %q, query %s", p.Title, t.RefID), Expr: t.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string in old dashboards and {"query": "...", "refId": ...} in
		// newer ones.
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("%s: variable %s: %w", path, v.Name, err)
			}
			q = obj.Query
		}
		expr, err := variablePromQL(q)
		if err != nil {
			return nil, fmt.Errorf("%s: variable %s: %w", path, v.Name, err)
		}
		if expr != "" {
			qs = append(qs, Query{Where: "variable " + v.Name, Expr: expr})
		}
	}
	return qs, nil
}

var (
	labelValuesCall = regexp.MustCompile(`^label_values\((.*)\)$`)
	queryResultCall = regexp.MustCompile(`^query_result\((.*)\)$`)
)

// variablePromQL returns the PromQL in a Grafana Prometheus variable's query.
func variablePromQL(q string) (string, error) {
	q = strings.TrimSpace(q)
	if m := labelValuesCall.FindStringSubmatch(q); m != nil {
		// label_values(selector, label) or label_values(label): the label is last.
		args := m[1]
		i := strings.LastIndexByte(args, ',')
		if i < 0 {
			return "", nil
		}
		return strings.TrimSpace(args[:i]), nil
	}
	if m := queryResultCall.FindStringSubmatch(q); m != nil {
		return m[1], nil
	}
	if strings.HasPrefix(q, "label_names(") || strings.HasPrefix(q, "metrics(") {
		return "", fmt.Errorf("%q lists names the test cannot check: use label_values or query_result", q)
	}
	return q, nil
}
