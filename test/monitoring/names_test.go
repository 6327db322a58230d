package monitoring

import (
	"go/build"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/testenv"

	// The rest of the gpupool packages the manager imports (cmd/manager), for the metrics
	// their init functions register: TestImportsWhatTheManagerImports keeps this list whole.
	_ "github.com/gpupool/gpupool/api/v1alpha1"
	_ "github.com/gpupool/gpupool/internal/eventwriter"
	_ "github.com/gpupool/gpupool/internal/execute"
	_ "github.com/gpupool/gpupool/internal/metricsauth"
	_ "github.com/gpupool/gpupool/internal/secretpolicy"
	_ "github.com/gpupool/gpupool/internal/version"
	_ "github.com/gpupool/gpupool/internal/webhook"
	_ "github.com/gpupool/gpupool/vsphere"
)

// managerImports are the gpupool packages imported above.
var managerImports = []string{
	"github.com/gpupool/gpupool/api/v1alpha1",
	"github.com/gpupool/gpupool/controllers",
	"github.com/gpupool/gpupool/internal/eventwriter",
	"github.com/gpupool/gpupool/internal/execute",
	"github.com/gpupool/gpupool/internal/metricsauth",
	"github.com/gpupool/gpupool/internal/secretpolicy",
	"github.com/gpupool/gpupool/internal/version",
	"github.com/gpupool/gpupool/internal/webhook",
	"github.com/gpupool/gpupool/vsphere",
}

// managerRegistry returns controller-runtime's registry, which the manager serves on
// /metrics, holding what the manager registers: the packages' own metrics (imported
// above), controller-runtime's, and the pools' gauges, which the manager registers when
// it starts (registerPoolMetrics in cmd/manager/metrics.go).
func managerRegistry(t *testing.T) prometheus.Registerer {
	t.Helper()
	c := &controllers.PoolCollector{}
	if err := metrics.Registry.Register(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { metrics.Registry.Unregister(c) })
	return metrics.Registry
}

// TestAlertsAndDashboardQueryExportedMetrics fails for every metric name an alert, a
// panel or a variable of the dashboard selects that the manager does not register: a
// renamed metric or a typo in config/prometheus (the chart copies both files, and make
// verify keeps the copies equal).
func TestAlertsAndDashboardQueryExportedMetrics(t *testing.T) {
	root := testenv.Root()
	rules, err := RuleQueries(filepath.Join(root, "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	panels, err := DashboardQueries(filepath.Join(root, "config", "prometheus", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) < 8 || len(panels) < 10 {
		t.Fatalf("read %d alert and %d dashboard queries: the files' layout changed?", len(rules), len(panels))
	}
	reg := managerRegistry(t)
	exported := func(n string) bool { return Registered(reg, n) }
	missing, err := Unexported(append(rules, panels...), exported)
	if err != nil {
		t.Error(err)
	}
	for _, m := range missing {
		t.Errorf("not a metric the manager exports: %s", m)
	}
	// Every query must name some metric: one that names none checks nothing.
	for _, q := range append(rules, panels...) {
		if names, err := MetricNames(q.Expr); err == nil && len(names) == 0 {
			t.Errorf("%s selects no metric: %s", q.Where, q.Expr)
		}
	}
	t.Logf("checked the metric names of %d alert and %d dashboard queries", len(rules), len(panels))
}

// TestUnexportedNamesAMisspelledMetric is the check above on queries with a misspelled
// metric, a histogram's series, and a metric that is not a histogram's series.
func TestUnexportedNamesAMisspelledMetric(t *testing.T) {
	known := map[string]bool{"gpupool_workers": true, "gpupool_transition_duration_seconds": true}
	qs := []Query{
		{Where: "panel A", Expr: `sum by (pool) (gpupool_worker{pool=~"$pool"})`},
		{Where: "panel B", Expr: `histogram_quantile(0.5, sum by (le) (rate(gpupool_transition_duration_seconds_bucket[5m])))`},
		{Where: "panel C", Expr: `gpupool_transition_duration_seconds_sum / gpupool_transition_duration_seconds_count`},
		{Where: "alert X", Expr: `gpupool_worker > 0 or gpupool_workers_bucket > 1`},
	}
	got, err := Unexported(qs, func(n string) bool { return known[n] })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"gpupool_worker (in panel A; alert X)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Unexported = %q, want %q", got, want)
	}
	_, err = Unexported([]Query{{Where: "panel D", Expr: `{__name__=~"gpupool_.+"}`}}, func(string) bool { return true })
	if err == nil || !strings.Contains(err.Error(), "panel D") {
		t.Errorf("a selector with a regular expression on __name__ gave error %v, want one naming panel D", err)
	}
}

// TestRegisteredProbe checks the probe: it finds a registered vector that has no series
// (what gathering cannot show), a plain collector and controller-runtime's own metrics,
// not an unknown name, and leaves no collector behind.
func TestRegisteredProbe(t *testing.T) {
	reg := prometheus.NewRegistry()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "h"}, []string{"pool"})
	// A collector of its own descriptors, like controllers.PoolCollector.
	described := probe{prometheus.NewDesc("c_info", "h", []string{"pool", "active"}, nil)}
	reg.MustRegister(vec, described)
	for name, want := range map[string]bool{"x_total": true, "c_info": true, "x": false, "y_total": false} {
		if got := Registered(reg, name); got != want {
			t.Errorf("Registered(%q) = %v, want %v", name, got, want)
		}
	}
	if Registered(reg, "y_total") {
		t.Error("the probe of y_total stayed registered")
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 { // the vector has no series yet
		t.Errorf("the registry gathers %d families (%v) after the probes, want none", len(mfs), err)
	}
	if !Registered(metrics.Registry, "controller_runtime_reconcile_total") {
		t.Error("controller-runtime's controller_runtime_reconcile_total is not in metrics.Registry")
	}
}

// TestImportsWhatTheManagerImports keeps managerImports equal to the gpupool packages
// cmd/manager imports, so that the registry above holds every metric the manager's does.
func TestImportsWhatTheManagerImports(t *testing.T) {
	pkg, err := build.ImportDir(filepath.Join(testenv.Root(), "cmd", "manager"), 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pkg.Imports {
		if strings.HasPrefix(p, "github.com/gpupool/gpupool/") {
			got = append(got, p)
		}
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, managerImports) {
		t.Errorf("cmd/manager imports %q; test/monitoring imports %q: import the same (names_test.go)", got, managerImports)
	}
}
