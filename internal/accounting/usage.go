package accounting

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// UsageName is the name of a pool's GPUPoolUsage for a day: <pool>.<YYYY-MM-DD>. A pool
// name is a DNS subdomain of at most 63 characters, so the name is one too.
func UsageName(pool, day string) string { return pool + "." + day }

// ToUsage writes a day as the pool's GPUPoolUsage (rows and hours in a fixed order, GPU
// seconds rounded to whole seconds). Metadata other than the name and pool label is the
// caller's.
func ToUsage(pool string, zone *time.Location, d *Day) *gpupoolv1.GPUPoolUsage {
	u := &gpupoolv1.GPUPoolUsage{
		ObjectMeta: metav1.ObjectMeta{Name: UsageName(pool, d.Name), Labels: map[string]string{gpupoolv1.LabelPool: pool}},
		Pool:       pool, Day: d.Name, TimeZone: zone.String(), Through: metav1.NewTime(d.Through.UTC().Truncate(time.Second)),
	}
	u.SetGroupVersionKind(gpupoolv1.GroupVersion.WithKind("GPUPoolUsage"))
	for _, k := range slices.SortedFunc(maps.Keys(d.Rows), compareRows) {
		s := d.Rows[k]
		u.Rows = append(u.Rows, gpupoolv1.UsageRow{Layout: k.Layout, Profile: k.Profile, Tenant: k.Tenant,
			OfferedGPUSeconds: secs(s.Offered), AllocatedGPUSeconds: secs(s.Allocated), SwitchingGPUSeconds: secs(s.Switching)})
	}
	for _, k := range slices.SortedFunc(maps.Keys(d.Hours), compareHours) {
		s := d.Hours[k]
		u.Hours = append(u.Hours, gpupoolv1.UsageHour{Start: metav1.NewTime(k.Start.UTC()), Layout: k.Layout,
			OfferedGPUSeconds: secs(s.Offered), AllocatedGPUSeconds: secs(s.Allocated), SwitchingGPUSeconds: secs(s.Switching)})
	}
	t := d.Total()
	u.Totals = gpupoolv1.UsageTotals{OfferedGPUHours: Hours(t.Offered), AllocatedGPUHours: Hours(t.Allocated),
		IdleGPUHours: Hours(d.Idle()), SwitchingGPUHours: Hours(t.Switching)}
	return u
}

// FromUsage reads a persisted day back, to go on from its Through after a restart.
func FromUsage(u *gpupoolv1.GPUPoolUsage) (*Day, *time.Location, error) {
	zone, err := time.LoadLocation(u.TimeZone)
	if err != nil {
		return nil, nil, fmt.Errorf("GPUPoolUsage %s: time zone %q: %w", u.Name, u.TimeZone, err)
	}
	day, err := time.ParseInLocation(time.DateOnly, u.Day, zone)
	if err != nil {
		return nil, nil, fmt.Errorf("GPUPoolUsage %s: day %q is not YYYY-MM-DD", u.Name, u.Day)
	}
	d := &Day{Name: u.Day, Start: day, End: time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, zone),
		Through: u.Through.Time, Rows: map[RowKey]*Sums{}, Hours: map[HourKey]*Sums{}, tenants: map[string]bool{}}
	for _, r := range u.Rows {
		d.Rows[RowKey{r.Layout, r.Profile, r.Tenant}] = &Sums{float64(r.OfferedGPUSeconds), float64(r.AllocatedGPUSeconds), float64(r.SwitchingGPUSeconds)}
		if r.Tenant != "" {
			d.tenantRows++
			if r.Tenant != Other {
				d.tenants[r.Tenant] = true
			}
		}
	}
	for _, h := range u.Hours {
		// In UTC, as the ledger keys hours: the API's decoder gives local time.
		d.Hours[HourKey{h.Start.UTC(), h.Layout}] = &Sums{float64(h.OfferedGPUSeconds), float64(h.AllocatedGPUSeconds), float64(h.SwitchingGPUSeconds)}
	}
	return d, zone, nil
}

// Resume is a ledger that goes on from the latest of a pool's persisted days: through
// its Through, with that day's sums to add to. Without days (a new pool) it starts at
// the first Advance.
func Resume(zone *time.Location, days []gpupoolv1.GPUPoolUsage) (*Ledger, error) {
	if len(days) == 0 {
		return New(zone, time.Time{}), nil
	}
	latest := slices.MaxFunc(days, func(a, b gpupoolv1.GPUPoolUsage) int { return a.Through.Compare(b.Through.Time) })
	d, _, err := FromUsage(&latest)
	if err != nil {
		return nil, err
	}
	// The latest day goes on in its own bounds even when the pool's zone changed since:
	// a new day of the same name would write over its sums.
	l := New(zone, d.Through)
	l.Days[d.Name] = d
	return l, nil
}

func compareRows(a, b RowKey) int {
	return strings.Compare(a.Layout+"\x00"+a.Profile+"\x00"+a.Tenant, b.Layout+"\x00"+b.Profile+"\x00"+b.Tenant)
}

func compareHours(a, b HourKey) int {
	if c := a.Start.Compare(b.Start); c != 0 {
		return c
	}
	return strings.Compare(a.Layout, b.Layout)
}

func secs(v float64) int64 { return int64(math.Round(v)) }

// Hours writes GPU-seconds as GPU-hours with two decimals.
func Hours(gpuSeconds float64) string {
	return strconv.FormatFloat(gpuSeconds/3600, 'f', 2, 64)
}

// Zone loads a zone by name, UTC when it cannot be (a report still prints).
func Zone(name string) *time.Location {
	if z, err := time.LoadLocation(name); err == nil {
		return z
	}
	return time.UTC
}
