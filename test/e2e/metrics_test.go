//go:build e2e

package e2e

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpupool/gpupool/test/monitoring"
)

// metricsScraper scrapes the manager's /metrics every half second while the demo runs
// and records every metric family it has seen with at least one series.
type metricsScraper struct {
	mu    sync.Mutex
	seen  map[string]bool
	stop  chan struct{}
	done  chan struct{}
	count int
}

func startMetricsScraper(t *testing.T, dir string) *metricsScraper {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "metrics-url"))
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSpace(string(b))
	s := &metricsScraper{seen: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			s.scrape(url)
			select {
			case <-s.stop:
				s.scrape(url)
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *metricsScraper) scrape(url string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i > 0 {
			name = line[:i]
		}
		s.seen[name] = true
	}
}

// Stop ends the scraping and returns the series names seen (histograms as their
// _bucket, _sum and _count series).
func (s *metricsScraper) Stop() (map[string]bool, int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen, s.count
}

// usedMetricNames returns every gpupool metric the alerts and the dashboard query, read
// as test/monitoring reads them (it checks them against what the manager registers; this
// test, against what it exports).
func usedMetricNames(t *testing.T, root string) map[string][]string {
	t.Helper()
	rules, err := monitoring.RuleQueries(filepath.Join(root, "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	panels, err := monitoring.DashboardQueries(filepath.Join(root, "config", "prometheus", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{}
	for _, q := range append(rules, panels...) {
		names, err := monitoring.MetricNames(q.Expr)
		if err != nil {
			t.Fatalf("%s: %v", q.Where, err)
		}
		for _, n := range names {
			if strings.HasPrefix(n, "gpupool_") {
				used[n] = append(used[n], q.Where)
			}
		}
	}
	if len(used) == 0 {
		t.Fatal("the alerts and the dashboard use no gpupool metric")
	}
	return used
}

// onlyOnFailure are metrics that only get series when something fails, which the demo
// does not make happen. That the manager registers them (as every metric the alerts and
// the dashboard use) is checked by test/monitoring in make test, on the registry itself,
// so a name moving between files does not matter.
var onlyOnFailure = map[string]bool{
	"gpupool_vsphere_task_errors_total": true,
}

// checkMetricNames fails for every metric the alerts or the dashboard use that the
// manager did not export during the demo.
func checkMetricNames(t *testing.T, root string, seen map[string]bool, scrapes int) {
	t.Helper()
	if scrapes < 10 {
		t.Fatalf("only %d scrapes of the manager's metrics succeeded", scrapes)
	}
	used := usedMetricNames(t, root)
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if seen[n] {
			continue
		}
		if onlyOnFailure[n] {
			continue
		}
		t.Errorf("%s, used by %v, was never exported by the manager during the demo", n, used[n])
	}
	t.Logf("checked %d metric names used by the alerts and the dashboard against %d scrapes", len(names), scrapes)
}
