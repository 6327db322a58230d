// Package accounting keeps a pool's GPU-hours: what its nodes offered, what pods were
// allocated of it (per tenant), and what was offline while the pool switched, per day,
// hour, layout and vGPU profile. It decides nothing and reads nothing: the controller
// hands it what one pass saw (Advance), and it turns the pieces into daily GPUPoolUsage
// objects (usage.go) and reports (report.go). docs/accounting.md says what each number
// means.
package accounting

import (
	"maps"
	"slices"
	"time"
)

// Kind is what an Item counts.
type Kind int

const (
	// Offered is capacity on a schedulable, Ready node of a running VM.
	Offered Kind = iota
	// Allocated is what a bound, unfinished pod asked of a node's capacity.
	Allocated
	// Switching is capacity of the pool's GPUs offline during a transition.
	Switching
)

// Other is the tenant that the tenants past MaxTenants of a day are summed as.
const Other = "(other)"

// MaxTenants bounds the tenants of a day, and MaxTenantRows their rows (a tenant has a
// row per layout and profile): a day's object stays small whatever the namespaces'
// labels say (GPUPoolUsage allows 4,096 rows).
const (
	MaxTenants    = 256
	MaxTenantRows = 2048
)

// Item is one thing that counts while a pass sees it: a node's capacity, a pod's
// allocation, the capacity offline during a transition.
type Item struct {
	// Key names the item across passes: "node/<name>", "pod/<uid>", "switch/<id>".
	Key    string
	Kind   Kind
	Layout string
	// Profile is the vGPU profile; empty for Switching.
	Profile string
	// Tenant is whose pod an Allocated item is.
	Tenant string
	// GPUs are GPU-equivalents: a vGPU's frame buffer over its GPU's.
	GPUs float64
	// Since is when the item began (a pod's start, a transition's start); zero when not
	// known. It only counts from the ledger's Through on.
	Since time.Time
}

// Sums are GPU-equivalent seconds.
type Sums struct {
	Offered, Allocated, Switching float64
}

// plus adds o's sums to s.
func (s *Sums) plus(o Sums) {
	s.Offered += o.Offered
	s.Allocated += o.Allocated
	s.Switching += o.Switching
}

func (s *Sums) add(k Kind, v float64) {
	switch k {
	case Offered:
		s.Offered += v
	case Allocated:
		s.Allocated += v
	case Switching:
		s.Switching += v
	}
}

// RowKey is one row of a day: a layout and profile, and a tenant for a tenant's row.
type RowKey struct {
	Layout, Profile, Tenant string
}

// HourKey is one hour of one layout.
type HourKey struct {
	Start  time.Time
	Layout string
}

// Day is one day's sums, in the ledger's zone.
type Day struct {
	// Name is YYYY-MM-DD.
	Name string
	// Start and End bound the day (23 or 25 hours long on a DST change).
	Start, End time.Time
	// Through is how far the day is accounted.
	Through time.Time
	Rows    map[RowKey]*Sums
	Hours   map[HourKey]*Sums
	// Fresh: the ledger made the day, neither read it back (Resume) nor wrote it yet; a
	// persisted day of that name (a restart in another zone, a day read back in error)
	// must be merged into it (Merge), never written over.
	Fresh bool
	// tenants are the tenants with rows of their own, tenantRows how many rows they have.
	tenants    map[string]bool
	tenantRows int
}

// Ledger is one pool's accounting as it goes: the days it changed and the items of the
// last pass.
type Ledger struct {
	// Zone is where days and hours begin.
	Zone *time.Location
	// Through is how far everything is accounted.
	Through time.Time
	// Days are the days accounted since the ledger began or was loaded, by Name.
	Days map[string]*Day
	// OnAdd, when set, is told every piece added (for the metrics).
	OnAdd func(it Item, gpuSeconds float64)

	last  map[string]Item
	dirty map[string]bool
	// seenAt is when a pass last looked (Hold carries that look on without looking).
	seenAt time.Time
}

// New starts a ledger in zone accounted through 'through': nothing before it counts.
// A zero 'through' starts at the first Advance.
func New(zone *time.Location, through time.Time) *Ledger {
	if zone == nil {
		zone = time.UTC
	}
	return &Ledger{Zone: zone, Through: through, seenAt: through, Days: map[string]*Day{}, dirty: map[string]bool{}}
}

// Advance accounts the time from Through to now with what a pass saw at now, holding
// what the last pass saw until now: an item the last pass saw counts from Through (and,
// gone now, until now: the end of a pod or a node wakes a pass); one new since counts
// from its Since, or from now when that is not known. Time the ledger has already
// accounted never counts twice, so a pass repeated, or a manager restarted from a
// persisted Through, adds nothing twice. A now at or before Through only remembers the
// items.
func (l *Ledger) Advance(now time.Time, items []Item) { l.advance(now, items, true) }

// advance is Advance for a pass, and for Hold (pass false), which carries the last
// pass's items on without seeing anything new.
func (l *Ledger) advance(now time.Time, items []Item, pass bool) {
	seen := make(map[string]Item, len(items))
	for _, it := range items {
		seen[it.Key] = it
	}
	if l.Through.IsZero() {
		l.Through, l.seenAt, l.last = now, now, seen
		return
	}
	fresh := l.last == nil
	if !now.After(l.Through) {
		// A pass that looked before the flusher carried the last pass on past its
		// look: what is new counts from its start (or the last look) to Through, which
		// the carrying did not count for it.
		if pass && !fresh {
			for _, k := range slices.Sorted(maps.Keys(seen)) {
				if _, known := l.last[k]; !known && !seen[k].Since.IsZero() {
					l.add(seen[k], laterOf(seen[k].Since, l.seenAt), l.Through)
				}
			}
		}
		if pass {
			l.last, l.seenAt = seen, laterOf(l.seenAt, now)
		}
		return
	}
	// The last pass's items hold until now (they are seen gone now at the earliest); an
	// item new since counts from its start when known, which another machine may have
	// stamped (a kubelet's clock ahead of the manager's): never before the last pass's
	// look (what was carried on since did not include it) nor after now; from now when
	// not known. A ledger that has not seen a pass yet (new or resumed after a restart)
	// takes every item as held since Through or its start.
	// In a fixed order, so that the tenants past MaxTenants are the same on every run.
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		it := seen[k]
		from := l.Through
		_, known := l.last[k]
		switch {
		case known:
		case !fresh && it.Since.IsZero():
			from = now
		case !fresh:
			from = minTime(laterOf(it.Since, l.seenAt), now)
		case it.Since.After(from):
			from = minTime(it.Since, now)
		}
		l.add(it, from, now)
	}
	for _, k := range slices.Sorted(maps.Keys(l.last)) {
		if _, still := seen[k]; !still {
			l.add(l.last[k], l.Through, now)
		}
	}
	// The day now is in exists even when nothing counted, so that a persisted ledger
	// says how far it went (Resume goes on from there).
	l.day(l.hourStart(now))
	for _, d := range l.Days {
		if d.End.After(l.Through) && d.Start.Before(now) {
			d.Through = minTime(now, d.End)
			l.dirty[d.Name] = true
		}
	}
	l.Through, l.last = now, seen
	if pass {
		l.seenAt = now
	}
}

// Hold accounts the time from Through to now with what the last pass saw, as if a pass
// saw it again now: what a pool at rest, which no change wakes, still offers and uses.
func (l *Ledger) Hold(now time.Time) {
	if l.Through.IsZero() || l.last == nil {
		return
	}
	items := make([]Item, 0, len(l.last))
	for _, it := range l.last {
		items = append(items, it)
	}
	l.advance(now, items, false)
}

// add counts the item from 'from' to 'to', hour by hour.
func (l *Ledger) add(it Item, from, to time.Time) {
	if it.GPUs <= 0 {
		return
	}
	for cur := from; cur.Before(to); {
		start := l.hourStart(cur)
		next := minTime(start.Add(time.Hour), to)
		secs := next.Sub(cur).Seconds() * it.GPUs
		d := l.day(start)
		tenant := it.Tenant
		if it.Kind == Allocated {
			tenant = d.tenant(RowKey{it.Layout, it.Profile, tenant})
			d.row(RowKey{it.Layout, it.Profile, tenant}).add(Allocated, secs)
		}
		profile := it.Profile
		if it.Kind == Switching {
			profile = ""
		}
		d.row(RowKey{it.Layout, profile, ""}).add(it.Kind, secs)
		d.hour(HourKey{start.UTC(), it.Layout}).add(it.Kind, secs) // one key whatever *Location the zone is
		l.dirty[d.Name] = true
		if l.OnAdd != nil {
			l.OnAdd(Item{Key: it.Key, Kind: it.Kind, Layout: it.Layout, Profile: profile, Tenant: tenant, GPUs: it.GPUs}, secs)
		}
		cur = next
	}
}

// hourStart is the start of the local hour t is in. Zones whose offset is not whole
// hours (India, +05:30) still have hours that begin at :00 local time.
func (l *Ledger) hourStart(t time.Time) time.Time {
	lt := t.In(l.Zone)
	s := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), 0, 0, 0, l.Zone)
	if s.After(t) {
		// A repeated hour at a DST end: time.Date picked the first of the two.
		s = s.Add(-time.Hour)
	}
	if t.Sub(s) >= time.Hour {
		s = s.Add(time.Hour * (t.Sub(s) / time.Hour))
	}
	return s
}

// day finds or makes the day the hour starting at start is in.
func (l *Ledger) day(start time.Time) *Day {
	lt := start.In(l.Zone)
	name := lt.Format(time.DateOnly)
	if d, ok := l.Days[name]; ok {
		return d
	}
	ds := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, l.Zone)
	d := &Day{Name: name, Start: ds, End: time.Date(lt.Year(), lt.Month(), lt.Day()+1, 0, 0, 0, 0, l.Zone),
		Through: ds, Rows: map[RowKey]*Sums{}, Hours: map[HourKey]*Sums{}, Fresh: true, tenants: map[string]bool{}}
	l.Days[name] = d
	return d
}

func (d *Day) hour(k HourKey) *Sums { return sumsAt(d.Hours, k) }

func (d *Day) row(k RowKey) *Sums { return sumsAt(d.Rows, k) }

// sumsAt is m's sums at k, made when missing.
func sumsAt[K comparable](m map[K]*Sums, k K) *Sums {
	s, ok := m[k]
	if !ok {
		s = &Sums{}
		m[k] = s
	}
	return s
}

// tenant is the tenant a row of a tenant's allocation goes to: its own while the day
// has fewer than MaxTenants tenants and MaxTenantRows of their rows, else Other.
func (d *Day) tenant(k RowKey) string {
	if _, ok := d.Rows[k]; ok {
		return k.Tenant
	}
	if (!d.tenants[k.Tenant] && len(d.tenants) >= MaxTenants) || d.tenantRows >= MaxTenantRows {
		return Other
	}
	d.tenants[k.Tenant] = true
	d.tenantRows++
	return k.Tenant
}

// Dirty returns, oldest first, the days changed since the last call, and forgets them.
func (l *Ledger) Dirty() []*Day {
	var out []*Day
	for _, n := range slices.Sorted(maps.Keys(l.dirty)) {
		if d, ok := l.Days[n]; ok {
			out = append(out, d)
		}
	}
	clear(l.dirty)
	return out
}

// Forget drops the days that ended before t from memory (they are persisted).
func (l *Ledger) Forget(t time.Time) {
	for n, d := range l.Days {
		if !d.End.After(t) && !l.dirty[n] {
			delete(l.Days, n)
		}
	}
}

// Total sums a day's rows without a tenant.
func (d *Day) Total() Sums {
	var t Sums
	for k, s := range d.Rows {
		if k.Tenant == "" {
			t.plus(*s)
		}
	}
	return t
}

// Idle sums each layout's and profile's offered minus allocated, none below 0: pods
// still on a cordoned node are allocated what no node offers, which must not cancel
// another layout's idle capacity.
func (d *Day) Idle() float64 {
	idle := 0.0
	for k, s := range d.Rows {
		if k.Tenant == "" {
			idle += max(s.Offered-s.Allocated, 0)
		}
	}
	return idle
}

// Merge adds a persisted day of the same name into d, which the ledger made afresh:
// the persisted sums are kept, the ledger's added to them.
func (d *Day) Merge(p *Day) {
	for k, s := range p.Rows {
		if _, had := d.Rows[k]; !had && k.Tenant != "" {
			d.tenantRows++
			if k.Tenant != Other {
				d.tenants[k.Tenant] = true
			}
		}
		d.row(k).plus(*s)
	}
	for k, s := range p.Hours {
		d.hour(k).plus(*s)
	}
	if p.Through.After(d.Through) {
		d.Through = p.Through
	}
	d.Fresh = false
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Touch marks a day to be written again (its write failed).
func (l *Ledger) Touch(name string) {
	if _, ok := l.Days[name]; ok {
		l.dirty[name] = true
	}
}

// Expired tells whether a day (YYYY-MM-DD) is more than keep days before today.
func Expired(day, today string, keep int32) bool {
	d, err1 := time.Parse(time.DateOnly, day)
	t, err2 := time.Parse(time.DateOnly, today)
	if err1 != nil || err2 != nil {
		return false
	}
	return t.Sub(d) >= time.Duration(keep)*24*time.Hour
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
