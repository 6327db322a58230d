package monitoring

import (
	"reflect"
	"strings"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`gpupool_workers{pool="a", step!=""}`, []string{"gpupool_workers"}},
		{`gpupool_workers {pool="a"}`, []string{"gpupool_workers"}},
		{`sum by (pool, step) (gpupool_workers{pool=~"$pool"})`, []string{"gpupool_workers"}},
		{`sum(gpupool_workers) without (step)`, []string{"gpupool_workers"}},
		{`max by(pool,layout)(a) * on(pool) group_left(layout, other) b`, []string{"a", "b"}},
		{`a / ignoring (step) group_right b`, []string{"a", "b"}},
		{`time() - max by (pool, from, to) (gpupool_transition_start_timestamp_seconds) > 3600`,
			[]string{"gpupool_transition_start_timestamp_seconds"}},
		{`increase(x_total{result="aborted"}[15m]) > 0 or max by (pool) (c{reason="DrainAborted", status="True"}) == 1`,
			[]string{"x_total", "c"}},
		{`histogram_quantile(0.95, sum by (pool, le) (rate(h_bucket{pool=~"$pool"}[$__rate_interval])))`, []string{"h_bucket"}},
		{`rate(a[5m:1m] offset 1h) > bool 1e-3 and b @ start() unless c @ 1609746000`, []string{"a", "b", "c"}},
		{`a atan2 b + 0x1F - Inf + NaN - 1.5e+3`, []string{"a", "b"}},
		{`rate(a[5m] anchored) + rate(b[5m] smoothed)`, []string{"a", "b"}},
		{`label_replace(a, "dst", "$1", "src", "(.*)") + count_values("value", b)`, []string{"a", "b"}},
		{`topk(3, a) or quantile(0.9, b) or absent(c{x="}"})`, []string{"a", "b", "c"}},
		{`sum(a) by (x) / sum(a) by (x)`, []string{"a"}},
		{`a{pool="${pool}"} * [[scale]] + ${offset}`, []string{"a"}},
		{"a # a comment naming b\n+ c", []string{"a", "c"}},
		{`{"my.metric", pool="a"} + {__name__="b"} + {job="x"}`, []string{"my.metric", "b"}},
		{`recorded:rule:rate5m`, []string{"recorded:rule:rate5m"}},
		{`vector(1) + scalar(time())`, nil},
		{`a{l='it\'s', m="x\"}"}`, []string{"a"}},
	} {
		got, err := MetricNames(tc.expr)
		if err != nil {
			t.Errorf("MetricNames(%q): %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("MetricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestMetricNamesErrors(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`{__name__=~"gpupool_.*"}`, "leaves the metric names open"},
		{`{__name__!="a"}`, "leaves the metric names open"},
		{`sum(a`, "unbalanced parentheses"},
		{`sum(a))`, "closes nothing"},
		{`a{pool="x"`, "is not closed"},
		{`a{pool="x}`, "is not closed"},
		{`rate(a[5m)`, "is not closed"},
		{`a}`, "closes nothing"},
		{`sum by (pool sum(a)`, "in the label list"},
		{`sum by (pool`, "label list at 7 is not closed"},
		{`a{b{c}}`, "inside a selector"},
	} {
		_, err := MetricNames(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("MetricNames(%q) = error %v, want one saying %q", tc.expr, err, tc.want)
		}
	}
}

func TestVariablePromQL(t *testing.T) {
	for _, tc := range []struct{ query, want string }{
		{`label_values(gpupool_layout_info, pool)`, "gpupool_layout_info"},
		{`label_values(gpupool_condition{type="Ready", pool=~"a|b"}, reason)`, `gpupool_condition{type="Ready", pool=~"a|b"}`},
		{`label_values(pool)`, ""},
		{`query_result(topk(5, gpupool_workers))`, "topk(5, gpupool_workers)"},
		{`gpupool_workers`, "gpupool_workers"},
	} {
		got, err := variablePromQL(tc.query)
		if err != nil || got != tc.want {
			t.Errorf("variablePromQL(%q) = %q, %v, want %q", tc.query, got, err, tc.want)
		}
	}
	if _, err := variablePromQL(`metrics(gpupool_.*)`); err == nil {
		t.Error("metrics(...) was accepted: its names cannot be checked")
	}
}
