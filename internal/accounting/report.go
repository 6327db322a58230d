package accounting

import (
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Report is a pool's accounting over a period, from its GPUPoolUsage days: what
// `kubectl gpupool report` prints. GPU figures are GPU-hours.
type Report struct {
	Pool string `json:"pool"`
	// From and To are the first and last day asked for (YYYY-MM-DD); Through is how far
	// the last day was accounted.
	From     string    `json:"from"`
	To       string    `json:"to"`
	Through  time.Time `json:"through"`
	TimeZone string    `json:"timeZone"`
	Totals   Figures   `json:"totals"`
	// Days, Layouts and Tenants are the period by day, by layout and profile, by tenant.
	Days    []DayFigures    `json:"days"`
	Layouts []LayoutFigures `json:"layouts"`
	Tenants []TenantFigures `json:"tenants"`
	// Hours are the hourly figures per layout, oldest first: the timeline.
	Hours []HourFigures `json:"hours"`
	// Recommendations are what the data supports changing, if anything.
	Recommendations []string `json:"recommendations,omitempty"`
}

// Figures are GPU-hours.
type Figures struct {
	Offered   float64 `json:"offeredGPUHours"`
	Allocated float64 `json:"allocatedGPUHours"`
	Idle      float64 `json:"idleGPUHours"`
	Switching float64 `json:"switchingGPUHours"`
}

// add adds one row's (or hour's) GPU-seconds. Idle is each row's offered minus
// allocated, none below 0 (Day.Idle).
func (f *Figures) add(offered, allocated, switching int64) {
	f.Offered += float64(offered) / 3600
	f.Allocated += float64(allocated) / 3600
	f.Switching += float64(switching) / 3600
	f.Idle += math.Max(float64(offered-allocated)/3600, 0)
}

// Utilization is allocated over offered, 0 when nothing was offered.
func (f Figures) Utilization() float64 {
	if f.Offered <= 0 {
		return 0
	}
	return f.Allocated / f.Offered
}

type DayFigures struct {
	Day string `json:"day"`
	Figures
}

type LayoutFigures struct {
	Layout  string `json:"layout"`
	Profile string `json:"profile,omitempty"`
	Figures
}

type TenantFigures struct {
	Tenant string `json:"tenant"`
	// AllocatedGPUHours is the tenant's pods' allocation; Share its part of all.
	Allocated float64 `json:"allocatedGPUHours"`
	Share     float64 `json:"share"`
}

type HourFigures struct {
	Start  time.Time `json:"start"`
	Layout string    `json:"layout"`
	Figures
}

// Summarize reads the pool's days from 'from' to 'to' (YYYY-MM-DD, both included) into a
// report. It is deterministic: the same days give the same report.
func Summarize(pool string, usages []gpupoolv1.GPUPoolUsage, from, to string) Report {
	r := Report{Pool: pool, From: from, To: to}
	layouts := map[RowKey]*Figures{}
	tenants := map[string]float64{}
	hours := map[HourKey]*Figures{}
	for _, u := range periodDays(pool, usages, from, to) {
		r.TimeZone = u.TimeZone
		if u.Through.After(r.Through) {
			r.Through = u.Through.Time
		}
		df := DayFigures{Day: u.Day}
		for _, row := range u.Rows {
			if row.Tenant != "" {
				tenants[row.Tenant] += float64(row.AllocatedGPUSeconds) / 3600
				continue
			}
			df.add(row.OfferedGPUSeconds, row.AllocatedGPUSeconds, row.SwitchingGPUSeconds)
			r.Totals.add(row.OfferedGPUSeconds, row.AllocatedGPUSeconds, row.SwitchingGPUSeconds)
			k := RowKey{Layout: row.Layout, Profile: row.Profile}
			if layouts[k] == nil {
				layouts[k] = &Figures{}
			}
			layouts[k].add(row.OfferedGPUSeconds, row.AllocatedGPUSeconds, row.SwitchingGPUSeconds)
		}
		r.Days = append(r.Days, df)
		for _, h := range u.Hours {
			k := HourKey{h.Start.UTC(), h.Layout}
			if hours[k] == nil {
				hours[k] = &Figures{}
			}
			hours[k].add(h.OfferedGPUSeconds, h.AllocatedGPUSeconds, h.SwitchingGPUSeconds)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(layouts), compareRows) {
		r.Layouts = append(r.Layouts, LayoutFigures{Layout: k.Layout, Profile: k.Profile, Figures: *layouts[k]})
	}
	for _, t := range slices.Sorted(maps.Keys(tenants)) {
		share := 0.0
		if r.Totals.Allocated > 0 {
			share = tenants[t] / r.Totals.Allocated
		}
		r.Tenants = append(r.Tenants, TenantFigures{Tenant: t, Allocated: tenants[t], Share: share})
	}
	// Biggest tenant first, then by name.
	slices.SortStableFunc(r.Tenants, func(a, b TenantFigures) int {
		if a.Allocated != b.Allocated {
			if a.Allocated > b.Allocated {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	for _, k := range slices.SortedFunc(maps.Keys(hours), compareHours) {
		r.Hours = append(r.Hours, HourFigures{Start: k.Start, Layout: k.Layout, Figures: *hours[k]})
	}
	r.Recommendations = Recommend(r)
	return r
}

// WriteCSV writes the usages' rows, one line per day, layout, profile and tenant, in
// GPU-hours: the form a spreadsheet or a FinOps tool joins on.
func WriteCSV(w io.Writer, pool string, usages []gpupoolv1.GPUPoolUsage, from, to string) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"pool", "day", "layout", "profile", "tenant", "offered_gpu_hours", "allocated_gpu_hours", "idle_gpu_hours", "switching_gpu_hours"})
	for _, u := range periodDays(pool, usages, from, to) {
		for _, row := range u.Rows {
			// A tenant's line has its allocation only.
			offered, idle, switching := "", "", ""
			if row.Tenant == "" {
				offered, switching = hours3(row.OfferedGPUSeconds), hours3(row.SwitchingGPUSeconds)
				idle = hours3(max(row.OfferedGPUSeconds-row.AllocatedGPUSeconds, 0))
			}
			_ = cw.Write([]string{pool, u.Day, row.Layout, row.Profile, row.Tenant, offered,
				hours3(row.AllocatedGPUSeconds), idle, switching})
		}
	}
	cw.Flush()
	return cw.Error()
}

// periodDays are the pool's days from 'from' to 'to' (YYYY-MM-DD, both included),
// oldest first.
func periodDays(pool string, usages []gpupoolv1.GPUPoolUsage, from, to string) []gpupoolv1.GPUPoolUsage {
	var out []gpupoolv1.GPUPoolUsage
	for _, u := range usages {
		if u.Pool == pool && u.Day >= from && u.Day <= to {
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b gpupoolv1.GPUPoolUsage) int { return strings.Compare(a.Day, b.Day) })
	return out
}

func hours3(secs int64) string { return strconv.FormatFloat(float64(secs)/3600, 'f', 3, 64) }

// WriteTable writes the report for a person: totals, by day, by layout, by tenant, and
// the recommendations.
func WriteTable(w io.Writer, r Report) error {
	var b strings.Builder
	if len(r.Days) == 0 {
		fmt.Fprintf(&b, "pool %s has no accounting from %s to %s (the manager writes a GPUPoolUsage per day, every --accounting-write-interval)\n",
			r.Pool, r.From, r.To)
		_, err := io.WriteString(w, b.String())
		return err
	}
	zone := Zone(r.TimeZone)
	fmt.Fprintf(&b, "pool %s, %s to %s (%s), accounted through %s; GPU-hours (a vGPU counts its frame buffer over its GPU's)\n\n",
		r.Pool, r.Days[0].Day, r.Days[len(r.Days)-1].Day, r.TimeZone, r.Through.In(zone).Format("Mon 2006-01-02 15:04 MST"))
	prec := Precision(r.Totals.Offered)
	fig := func(f Figures) string {
		return fmt.Sprintf("%10.*f %10.*f %10.*f %6.1f%% %10.*f", prec, f.Offered, prec, f.Allocated, prec, f.Idle, 100*f.Utilization(), prec, f.Switching)
	}
	head := fmt.Sprintf("%10s %10s %10s %7s %10s", "OFFERED", "ALLOCATED", "IDLE", "USED", "SWITCHING")
	fmt.Fprintf(&b, "%-24s %s\n", "DAY", head)
	for _, d := range r.Days {
		fmt.Fprintf(&b, "%-24s %s\n", d.Day, fig(d.Figures))
	}
	fmt.Fprintf(&b, "%-24s %s\n\n", "total", fig(r.Totals))
	fmt.Fprintf(&b, "%-24s %s\n", "LAYOUT/PROFILE", head)
	for _, l := range r.Layouts {
		name := l.Layout + "/" + l.Profile
		if l.Profile == "" {
			name = l.Layout + " (switching to)"
		}
		fmt.Fprintf(&b, "%-24s %s\n", name, fig(l.Figures))
	}
	fmt.Fprintf(&b, "\n%-24s %10s %7s\n", "TENANT", "ALLOCATED", "SHARE")
	if len(r.Tenants) == 0 {
		fmt.Fprintf(&b, "%-24s\n", "(no GPU pods)")
	}
	for _, t := range r.Tenants {
		fmt.Fprintf(&b, "%-24s %10.*f %6.1f%%\n", t.Tenant, prec, t.Allocated, 100*t.Share)
	}
	if len(r.Recommendations) > 0 {
		b.WriteString("\nRECOMMENDATIONS\n")
		for _, s := range r.Recommendations {
			b.WriteString("- " + s + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Precision is how many decimals GPU-hours are shown with: two, and three for a period
// that offered less than one GPU-hour (a demo of minutes), which would show as zeros.
func Precision(total float64) int {
	if total < 1 {
		return 3
	}
	return 2
}
