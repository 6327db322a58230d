package localenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
)

// usageInterval is how often the local environment's manager writes a pool's
// GPUPoolUsage (--accounting-write-interval): its demos last minutes, not days.
const usageInterval = 15 * time.Second

// ReportFile is the demos' picture of the pool's GPU-hours, in the state folder.
const ReportFile = "report.svg"

// reportUsage waits until the manager has accounted the demo pool through 'through'
// (bounded: two write intervals and a pass), then prints `kubectl gpupool report`'s
// tables of the days it covers and draws their timeline into the state folder.
func (e *Env) reportUsage(ctx context.Context, out io.Writer, through time.Time) (*accounting.Report, error) {
	var r accounting.Report
	err := e.pollFor(ctx, time.Second, 2*usageInterval+30*time.Second, "the pool's GPUPoolUsage to be written through the demo's end", func() (bool, error) {
		var list gpupoolv1.GPUPoolUsageList
		if err := e.Client.List(ctx, &list, client.MatchingLabels{gpupoolv1.LabelPool: DemoPool}); err != nil {
			return false, err
		}
		if len(list.Items) == 0 {
			return false, nil
		}
		first, last := list.Items[0].Day, list.Items[0].Day
		latest := list.Items[0].Through.Time
		for _, u := range list.Items {
			first, last = min(first, u.Day), max(last, u.Day)
			if u.Through.After(latest) {
				latest = u.Through.Time
			}
		}
		if latest.Before(through) {
			return false, nil
		}
		r = accounting.Summarize(DemoPool, list.Items, first, last)
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "==> the pool's GPU-hours (kubectl gpupool report %s):\n", DemoPool)
	if err := accounting.WriteTable(out, r); err != nil {
		return nil, err
	}
	path := filepath.Join(e.Dir, ReportFile)
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := accounting.WriteSVG(f, r); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "==> timeline drawn into %s (kubectl gpupool report %s --svg FILE)\n", path, DemoPool)
	return &r, nil
}
