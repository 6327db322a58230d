//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
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

var metricName = regexp.MustCompile(`\bgpupool_[a-z0-9_]+`)

// usedMetricNames returns every gpupool metric the alerts and the dashboard query.
func usedMetricNames(t *testing.T, root string) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	var rules struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			for _, n := range metricName.FindAllString(r.Expr, -1) {
				used[n] = append(used[n], "alert "+r.Alert)
			}
		}
	}
	var dash struct {
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err = os.ReadFile(filepath.Join(root, "config", "prometheus", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				used[n] = append(used[n], "panel "+p.Title)
			}
		}
	}
	for _, v := range dash.Templating.List {
		q, _ := json.Marshal(v.Query)
		for _, n := range metricName.FindAllString(string(q), -1) {
			used[n] = append(used[n], "dashboard variable")
		}
	}
	if len(used) == 0 {
		t.Fatal("the alerts and the dashboard use no gpupool metric")
	}
	return used
}

// onlyOnFailure are metrics that only get series when something fails, which the demo
// does not make happen; they are checked to be declared by the manager instead.
var onlyOnFailure = map[string]string{
	"gpupool_vsphere_task_errors_total": "controllers/metrics.go",
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
		if src, ok := onlyOnFailure[n]; ok {
			b, err := os.ReadFile(filepath.Join(root, src))
			if err != nil || !strings.Contains(string(b), `"`+n+`"`) {
				t.Errorf("%s (used by %v) is not declared in %s", n, used[n], src)
			}
			continue
		}
		t.Errorf("%s, used by %v, was never exported by the manager during the demo", n, used[n])
	}
	t.Logf("checked %d metric names used by the alerts and the dashboard against %d scrapes", len(names), scrapes)
}
