package accounting

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// week is a synthetic week of a day/night pool in Berlin: by day (08:00-20:00, Monday to
// Friday) four grid_p100-4q nodes offer 0.25 each, red and blue use one each from 09:00
// to 17:00; by night one grid_p100-16q node offers 1.0 and train uses it 21:00-05:00
// from Monday to Thursday night, never at the weekend. Each switch takes ten minutes,
// with the whole GPU offline. Passes every ten minutes, at the changes (as the events
// that make them wake passes), each item with its start.
func week(t *testing.T) (*Ledger, []gpupoolv1.GPUPoolUsage) {
	t.Helper()
	z := berlin(t)
	start := time.Date(2026, 3, 23, 0, 0, 0, 0, z) // a Monday; the week ends on the DST change
	l := New(z, start)
	for now := start.Add(10 * time.Minute); !now.After(start.AddDate(0, 0, 7)); now = now.Add(10 * time.Minute) {
		l.Advance(now, weekItems(now))
	}
	var us []gpupoolv1.GPUPoolUsage
	for _, d := range l.Days {
		us = append(us, *ToUsage("lab", z, d))
	}
	return l, us
}

// weekItems is what a pass at 'at' sees, each item with its start.
func weekItems(at time.Time) []Item {
	lt := at.In(at.Location())
	wd, h, m := lt.Weekday(), lt.Hour(), lt.Minute()
	weekday := wd >= time.Monday && wd <= time.Friday
	byDay := weekday && h >= 8 && h < 20
	switching := weekday && (h == 8 || h == 20) && m < 10
	today := func(hh, mm int) time.Time {
		return time.Date(lt.Year(), lt.Month(), lt.Day(), hh, mm, 0, 0, lt.Location())
	}
	yesterday := func(hh, mm int) time.Time { return today(hh, mm).AddDate(0, 0, -1) }
	var items []Item
	switch {
	case switching:
		to := "day"
		if h == 20 {
			to = "night"
		}
		items = append(items, Item{Key: fmt.Sprintf("switch/%s-%d", lt.Format("0102"), h), Kind: Switching, Layout: to, GPUs: 1, Since: today(h, 0)})
	case byDay:
		for i := range 4 {
			items = append(items, Item{Key: fmt.Sprintf("node/day-%d", i), Kind: Offered, Layout: "day", Profile: "grid_p100-4q", GPUs: 0.25, Since: today(8, 10)})
		}
		if h >= 9 && h < 17 {
			items = append(items,
				Item{Key: "pod/red-" + lt.Format("0102"), Kind: Allocated, Layout: "day", Profile: "grid_p100-4q", Tenant: "red", GPUs: 0.25, Since: today(9, 0)},
				Item{Key: "pod/blue-" + lt.Format("0102"), Kind: Allocated, Layout: "day", Profile: "grid_p100-4q", Tenant: "blue", GPUs: 0.25, Since: today(9, 0)})
		}
	default:
		since := today(20, 10)
		if h < 20 {
			since = yesterday(20, 10)
		}
		items = append(items, Item{Key: "node/night", Kind: Offered, Layout: "night", Profile: "grid_p100-16q", GPUs: 1, Since: since})
		// Monday to Thursday nights: 21:00 to 05:00 the next morning.
		evening := wd >= time.Monday && wd <= time.Thursday && h >= 21
		morning := wd >= time.Tuesday && wd <= time.Friday && h < 5
		since = today(21, 0)
		if morning {
			since = yesterday(21, 0)
		}
		if evening || morning {
			items = append(items, Item{Key: "pod/train", Kind: Allocated, Layout: "night", Profile: "grid_p100-16q", Tenant: "train", GPUs: 1, Since: since})
		}
	}
	return items
}

// TestReportOfAWeek: the report of a week adds up to what the ledger accounted and to
// the hand count of the week; tenants add up to allocated; the CSV adds up to the same;
// the weekend nights nobody used are recommended; the same days give byte-identical
// outputs.
func TestReportOfAWeek(t *testing.T) {
	l, us := week(t)
	r := Summarize("lab", us, "2026-03-23", "2026-03-29")
	// By hand: five days of 12 h of day layout, minus the 10-minute switch in, at 1.0 GPU:
	// 5 x (11h50m) = 59.17 GPU-h; red and blue 5 x 8 h x 0.25 = 10 each; night: the week's
	// 167 h (DST) minus 5 x 12 h of day = 107 h, minus the 10-minute switch at 20:00 on 5
	// days = 106.17 GPU-h; train 4 x 8 h = 32; switching 10 x 10 min = 1.67.
	want := Figures{Offered: 59 + 10.0/60 + 106 + 10.0/60, Allocated: 10 + 10 + 32, Switching: 100.0 / 60}
	if !near(r.Totals.Offered, want.Offered, 0.01) || !near(r.Totals.Allocated, want.Allocated, 0.01) || !near(r.Totals.Switching, want.Switching, 0.01) {
		t.Errorf("totals %+v, want %+v", r.Totals, want)
	}
	var ledgerTotal Sums
	for _, d := range l.Days {
		s := d.Total()
		ledgerTotal.Offered += s.Offered
		ledgerTotal.Allocated += s.Allocated
	}
	if !near(r.Totals.Offered*3600, ledgerTotal.Offered, float64(len(us)*48)) || !near(r.Totals.Allocated*3600, ledgerTotal.Allocated, float64(len(us)*48)) {
		t.Errorf("report %+v, ledger %+v GPU-seconds", r.Totals, ledgerTotal)
	}
	if len(r.Days) != 7 {
		t.Errorf("%d days, want 7", len(r.Days))
	}
	tenants := map[string]float64{}
	sum := 0.0
	for _, tf := range r.Tenants {
		tenants[tf.Tenant] = tf.Allocated
		sum += tf.Allocated
	}
	if !near(tenants["red"], 10, 0.01) || !near(tenants["blue"], 10, 0.01) || !near(tenants["train"], 32, 0.01) || !near(sum, r.Totals.Allocated, 0.01) {
		t.Errorf("tenants %v, want red 10, blue 10, train 32, adding up to %v", tenants, r.Totals.Allocated)
	}
	if r.Tenants[0].Tenant != "train" {
		t.Errorf("the biggest tenant comes first: %+v", r.Tenants)
	}

	// The weekend: night offered from Friday 20:10 to Monday 00:00 (the week's end),
	// nobody on it.
	rec := strings.Join(r.Recommendations, "\n")
	if !strings.Contains(rec, "layout night") || !strings.Contains(rec, "Fri 2026-03-27 20:") {
		t.Errorf("recommendations %q, want the unused weekend night (from Friday evening)", r.Recommendations)
	}
	if strings.Contains(rec, "layout day") {
		t.Errorf("recommendations %q name the day layout, which was used every weekday", r.Recommendations)
	}

	// CSV: the rows add up to the totals.
	var buf bytes.Buffer
	if err := WriteCSV(&buf, "lab", us, "2026-03-23", "2026-03-29"); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(buf.Bytes())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var offered, allocated, byTenant float64
	for _, rec := range recs[1:] {
		o, _ := strconv.ParseFloat(rec[5], 64)
		a, _ := strconv.ParseFloat(rec[6], 64)
		if rec[4] == "" {
			offered += o
			allocated += a
		} else {
			byTenant += a
		}
	}
	if !near(offered, r.Totals.Offered, 0.01) || !near(allocated, r.Totals.Allocated, 0.01) || !near(byTenant, allocated, 0.01) {
		t.Errorf("CSV offered %v allocated %v by tenant %v, report %+v", offered, allocated, byTenant, r.Totals)
	}

	// Determinism: the days in another order give the same bytes.
	outputs := func(us []gpupoolv1.GPUPoolUsage) []byte {
		var b bytes.Buffer
		r := Summarize("lab", us, "2026-03-23", "2026-03-29")
		if err := WriteTable(&b, r); err != nil {
			t.Fatal(err)
		}
		if err := WriteCSV(&b, "lab", us, "2026-03-23", "2026-03-29"); err != nil {
			t.Fatal(err)
		}
		if err := WriteSVG(&b, r); err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(r)
		b.Write(j)
		return b.Bytes()
	}
	reversed := make([]gpupoolv1.GPUPoolUsage, len(us))
	for i := range us {
		reversed[len(us)-1-i] = us[i]
	}
	if a, b := outputs(us), outputs(reversed); !bytes.Equal(a, b) {
		t.Error("the same days in another order give different outputs")
	}
}

var update = flag.Bool("update", false, "write the week's picture and report into docs/ (docs/img/report-week.svg, docs/img/report-week.txt)")

// TestDocsShowTheWeek: docs/accounting.md shows the synthetic week's picture and tables;
// they are what the code draws and prints now (go test ./internal/accounting -run
// TestDocsShowTheWeek -update rewrites them).
func TestDocsShowTheWeek(t *testing.T) {
	_, us := week(t)
	r := Summarize("lab", us, "2026-03-23", "2026-03-29")
	var svg, table bytes.Buffer
	if err := WriteSVG(&svg, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&table, r); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "docs", "img")
	for name, data := range map[string][]byte{"report-week.svg": svg.Bytes(), "report-week.txt": table.Bytes()} {
		path := filepath.Join(dir, name)
		if *update {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s is not what the code makes now (%v): go test ./internal/accounting -run TestDocsShowTheWeek -update", path, err)
		}
	}
}

// svgHour is a column of the picture as read back.
type svgHour struct {
	Start     string  `xml:"data-start,attr"`
	Offered   float64 `xml:"data-offered,attr"`
	Allocated float64 `xml:"data-allocated,attr"`
	Switching float64 `xml:"data-switching,attr"`
	Rects     []struct {
		Class  string  `xml:"class,attr"`
		Height float64 `xml:"height,attr"`
		Fill   string  `xml:"fill,attr"`
	} `xml:"rect"`
}

type svgLane struct {
	Layout string    `xml:"data-layout,attr"`
	Hours  []svgHour `xml:"g"`
}

type svgDoc struct {
	XMLName xml.Name  `xml:"svg"`
	Lanes   []svgLane `xml:"g"`
	Texts   []string  `xml:"text"`
}

// TestSVGOfAWeek renders the week and reads the picture back: it is well-formed SVG,
// has a lane per layout, a column per hour whose figures are the report's hours, bars
// whose heights are in proportion to them (used + idle = offered), the seven days
// marked at midnight, and the totals in its heading.
func TestSVGOfAWeek(t *testing.T) {
	_, us := week(t)
	r := Summarize("lab", us, "2026-03-23", "2026-03-29")
	var buf bytes.Buffer
	if err := WriteSVG(&buf, r); err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("not well-formed SVG: %v", err)
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if cd, ok := tok.(xml.CharData); !ok || strings.TrimSpace(string(cd)) != "" || err != nil {
			t.Fatalf("content after the svg element: %v %v", tok, err)
		}
	}
	if len(doc.Lanes) != 2 || doc.Lanes[0].Layout != "day" || doc.Lanes[1].Layout != "night" {
		t.Fatalf("lanes %+v, want day and night", len(doc.Lanes))
	}
	want := map[string]HourFigures{}
	for _, h := range r.Hours {
		want[h.Layout+" "+h.Start.UTC().Format(time.RFC3339)] = h
	}
	peak := 0.0
	for _, h := range r.Hours {
		peak = math.Max(peak, h.Offered+h.Switching)
	}
	columns := 0
	for _, lane := range doc.Lanes {
		for _, col := range lane.Hours {
			columns++
			h, ok := want[lane.Layout+" "+col.Start]
			if !ok {
				t.Fatalf("lane %s has a column at %s the report has not", lane.Layout, col.Start)
			}
			if !near(col.Offered, h.Offered, 0.001) || !near(col.Allocated, h.Allocated, 0.001) || !near(col.Switching, h.Switching, 0.001) {
				t.Errorf("%s %s: column %+v, report %+v", lane.Layout, col.Start, col, h.Figures)
			}
			heights := map[string]float64{}
			for _, rc := range col.Rects {
				heights[rc.Class] += rc.Height
			}
			if got, w := heights["used"]+heights["idle"], h.Offered/peak*svgLaneH; !near(got, w, 0.05) {
				t.Errorf("%s %s: used + idle bars %.2f high, want %.2f (offered %.3f of peak %.3f)", lane.Layout, col.Start, got, w, h.Offered, peak)
			}
			if got, w := heights["used"], math.Min(h.Allocated, h.Offered)/peak*svgLaneH; !near(got, w, 0.05) {
				t.Errorf("%s %s: used bar %.2f high, want %.2f", lane.Layout, col.Start, got, w)
			}
			if got, w := heights["switching"], h.Switching/peak*svgLaneH; !near(got, w, 0.05) {
				t.Errorf("%s %s: switching bar %.2f high, want %.2f", lane.Layout, col.Start, got, w)
			}
		}
	}
	if columns != len(r.Hours) {
		t.Errorf("%d columns, report has %d hours", columns, len(r.Hours))
	}
	text := buf.String()
	for _, d := range []string{"Mon 03-23", "Tue 03-24", "Wed 03-25", "Thu 03-26", "Fri 03-27", "Sat 03-28", "Sun 03-29"} {
		if !strings.Contains(text, ">"+d+"<") {
			t.Errorf("the picture does not mark %s", d)
		}
	}
	if !strings.Contains(text, fmt.Sprintf("offered %.2f, used %.2f", r.Totals.Offered, r.Totals.Allocated)) {
		t.Error("the heading does not give the totals")
	}
}

// TestSVGEscapes: names come from the cluster; they are written as text, never markup.
func TestSVGEscapes(t *testing.T) {
	r := Report{Pool: `a<b>&"c"`, TimeZone: "UTC", From: "2026-01-01", To: "2026-01-01",
		Hours: []HourFigures{{Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Layout: `<script>`, Figures: Figures{Offered: 1}}}}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "<script>") || strings.Contains(buf.String(), "a<b>") {
		t.Error("a name went into the picture as markup")
	}
	var doc svgDoc
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not well-formed: %v", err)
	}
}

// TestReportEmpty: a period without days says so, and draws an empty picture.
func TestReportEmpty(t *testing.T) {
	r := Summarize("lab", nil, "2026-01-01", "2026-01-07")
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil || !strings.Contains(buf.String(), "no accounting from 2026-01-01 to 2026-01-07") {
		t.Errorf("%v %q", err, buf.String())
	}
	buf.Reset()
	if err := WriteSVG(&buf, r); err != nil || !strings.Contains(buf.String(), "no accounting in this period") {
		t.Errorf("%v %q", err, buf.String())
	}
	if len(r.Recommendations) != 0 {
		t.Errorf("recommendations without data: %q", r.Recommendations)
	}
}
