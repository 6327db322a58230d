package main

import (
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/accounting"
)

// usageDays writes two days of the pool's accounting as the manager would: Monday, the
// day layout 08:00-20:00 (1.0 GPU) with team-a using 0.25 from 09:00 to 17:00, and the
// night layout otherwise (1.0 GPU), train using it 21:00-05:00; Tuesday the same.
func (w *world) usageDays(start time.Time) {
	w.t.Helper()
	l := accounting.New(berlin, start)
	for now := start.Add(15 * time.Minute); !now.After(start.AddDate(0, 0, 2)); now = now.Add(15 * time.Minute) {
		h := now.In(berlin).Hour()
		var items []accounting.Item
		if h >= 8 && h < 20 {
			items = append(items, accounting.Item{Key: "node/day", Kind: accounting.Offered, Layout: "day", Profile: "grid_p100-4q", GPUs: 1})
			if h >= 9 && h < 17 {
				items = append(items, accounting.Item{Key: "pod/a", Kind: accounting.Allocated, Layout: "day", Profile: "grid_p100-4q", Tenant: "team-a", GPUs: 0.25})
			}
		} else {
			items = append(items, accounting.Item{Key: "node/night", Kind: accounting.Offered, Layout: "night", Profile: "grid_p100-16q", GPUs: 1})
			if h >= 21 || h < 5 {
				items = append(items, accounting.Item{Key: "pod/train", Kind: accounting.Allocated, Layout: "night", Profile: "grid_p100-16q", Tenant: "train", GPUs: 1})
			}
		}
		l.Advance(now, items)
	}
	for _, d := range l.Dirty() {
		u := accounting.ToUsage(w.name, berlin, d)
		w.must(admin.Create(w.ctx, u))
		t := w.t
		t.Cleanup(func() { _ = admin.Delete(w.ctx, u) })
	}
}

// TestReportAsViewer (issue 39, report): a viewer reads the pool's GPU-hours as tables,
// CSV, JSON and an SVG timeline; the figures are the two days written, by hand: each day
// offers 24 GPU-hours, team-a is allocated 2 (8 hours of a quarter GPU) and train 8
// (00:00-05:00 and 21:00-24:00).
func TestReportAsViewer(t *testing.T) {
	w := newWorld(t, "rep-")
	w.create(w.pool())
	monday := time.Date(mondayMorning.Year(), mondayMorning.Month(), mondayMorning.Day(), 0, 0, 0, 0, berlin)
	w.usageDays(monday)
	mon, tue := monday.Format(time.DateOnly), monday.AddDate(0, 0, 1).Format(time.DateOnly)
	w.clock.SetTime(monday.AddDate(0, 0, 1).Add(23 * time.Hour))

	out := w.ok("viewer", "", []string{"report", w.name, "--days", "2"},
		"pool "+w.name+", "+mon+" to "+tue+" (Europe/Berlin)", "TENANT", "train", "team-a", "day/grid_p100-4q", "night/grid_p100-16q")
	if !strings.Contains(out, "total                         48.00") {
		t.Errorf("the total offered is not 48 GPU-hours:\n%s", out)
	}

	// CSV: per day, layout, profile and tenant; the tenants' rows add up by hand.
	out = w.ok("viewer", "", []string{"report", w.name, "--from", mon, "--to", tue, "-o", "csv"})
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	byTenantDay := map[string]string{}
	for _, r := range recs[1:] {
		if r[4] != "" {
			byTenantDay[r[4]+" "+r[1]] = r[6]
		}
	}
	for k, want := range map[string]string{"team-a " + mon: "2.000", "team-a " + tue: "2.000", "train " + mon: "8.000", "train " + tue: "8.000"} {
		if byTenantDay[k] != want {
			t.Errorf("CSV: %s allocated %q GPU-hours, want %s (rows %v)", k, byTenantDay[k], want, byTenantDay)
		}
	}

	// JSON: the report as data.
	out = w.ok("viewer", "", []string{"report", w.name, "--days", "2", "-o", "json"})
	var r accounting.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Pool != w.name || len(r.Days) != 2 || r.Totals.Offered != 48 {
		t.Errorf("-o json: %v %+v", err, r.Totals)
	}

	// The picture, written whole into a file.
	svg := filepath.Join(t.TempDir(), "week.svg")
	w.ok("viewer", "", []string{"report", w.name, "--days", "2", "--svg", svg}, "timeline written to "+svg)
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Lanes []struct {
			Layout string `xml:"data-layout,attr"`
			Hours  []struct {
				Start string `xml:"data-start,attr"`
			} `xml:"g"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil || len(doc.Lanes) != 2 || len(doc.Lanes[0].Hours)+len(doc.Lanes[1].Hours) != 48 {
		t.Errorf("the SVG: %v, %d lanes, want day and night with 48 hours between them", err, len(doc.Lanes))
	}

	// Bad periods are refused with what to write.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "monday"}, `--from "monday" is not a day such as`},
		{[]string{"--from", tue, "--to", mon}, "is after --to"},
		{[]string{"--days", "0"}, "--days must be at least 1"},
		{[]string{"-o", "wide"}, `output format "wide" is not supported by report`},
	} {
		out, err := w.run("viewer", "", append([]string{"report", w.name}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("report %v: %v %s, want an error with %q", c.args, err, out, c.want)
		}
	}
	// A period without accounting says so.
	w.ok("viewer", "", []string{"report", w.name, "--from", "2020-01-01", "--to", "2020-01-07"}, "has no accounting from 2020-01-01 to 2020-01-07")
	// Without access to GPUPoolUsage the error says so.
	if out, err := w.run("nobody", "", "report", w.name); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("report as nobody: %v %s", err, out)
	}
	_ = gpupoolv1.LabelPool
}
