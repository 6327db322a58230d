package monitoring

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Registered reports whether a collector registered in reg describes a metric of this
// name. A registry cannot list its collectors, and gathering shows a vector only once it
// has a series, so it asks the registry itself: registering a probe of that name fails
// when the name is taken (the same name with other labels or help, or the same
// descriptor). A probe that registers is unregistered at once, but the registry keeps the
// probe's labels and help for that name for its lifetime (client_golang keeps a name's
// dimensions consistent): probe only when nothing registers that name afterwards, as in
// a test that registers everything first.
func Registered(reg prometheus.Registerer, name string) bool {
	p := probe{prometheus.NewDesc(name, "gpupool test probe: is this name registered?", nil, nil)}
	if err := reg.Register(p); err != nil {
		return true
	}
	reg.Unregister(p)
	return false
}

type probe struct{ desc *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }
func (p probe) Collect(chan<- prometheus.Metric)    {}

// seriesSuffixes are the series a histogram (and a summary's _sum and _count) exports
// under its own name.
var seriesSuffixes = []string{"_bucket", "_sum", "_count"}

// Unexported returns, sorted, a line for each metric name the queries select that
// exported does not know, with the queries that select it. A histogram's _bucket, _sum
// and _count series count as its name.
func Unexported(qs []Query, exported func(name string) bool) ([]string, error) {
	users := map[string][]string{}
	var errs []error
	for _, q := range qs {
		names, err := MetricNames(q.Expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Where, err))
			continue
		}
		for _, n := range names {
			if !seriesOf(n, exported) {
				users[n] = append(users[n], q.Where)
			}
		}
	}
	var out []string
	for n, ws := range users {
		out = append(out, fmt.Sprintf("%s (in %s)", n, strings.Join(ws, "; ")))
	}
	sort.Strings(out)
	return out, errors.Join(errs...)
}

func seriesOf(name string, exported func(string) bool) bool {
	if exported(name) {
		return true
	}
	for _, s := range seriesSuffixes {
		if base, ok := strings.CutSuffix(name, s); ok && exported(base) {
			return true
		}
	}
	return false
}
