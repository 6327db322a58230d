package accounting

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func berlin(t *testing.T) *time.Location {
	t.Helper()
	z, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return z
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// sumDays adds up every day's rows without a tenant, and the tenants' rows apart.
func sumDays(l *Ledger) (total Sums, tenants map[string]float64, hours Sums) {
	tenants = map[string]float64{}
	for _, d := range l.Days {
		t := d.Total()
		total.Offered += t.Offered
		total.Allocated += t.Allocated
		total.Switching += t.Switching
		for k, s := range d.Rows {
			if k.Tenant != "" {
				tenants[k.Tenant] += s.Allocated
			}
		}
		for _, s := range d.Hours {
			hours.Offered += s.Offered
			hours.Allocated += s.Allocated
			hours.Switching += s.Switching
		}
	}
	return total, tenants, hours
}

// TestAdvanceDSTDays: a node offering one GPU from a day before to a day after each of
// Berlin's DST changes is accounted 23 hours on the spring day and 25 on the autumn day,
// every hour at most 3,600 GPU-seconds, each hour in its own day.
func TestAdvanceDSTDays(t *testing.T) {
	z := berlin(t)
	for _, c := range []struct {
		day   string
		hours int
	}{{"2026-03-29", 23}, {"2026-10-25", 25}, {"2026-06-15", 24}} {
		d, _ := time.ParseInLocation(time.DateOnly, c.day, z)
		l := New(z, d.AddDate(0, 0, -1))
		node := Item{Key: "node/a", Kind: Offered, Layout: "day", Profile: "grid_p100-16q", GPUs: 1}
		// Passes every 7 minutes, so that passes straddle hour and day boundaries.
		for now := l.Through.Add(7 * time.Minute); now.Before(d.AddDate(0, 0, 2)); now = now.Add(7 * time.Minute) {
			l.Advance(now, []Item{node})
		}
		day := l.Days[c.day]
		if day == nil {
			t.Fatalf("%s: no day", c.day)
		}
		if got := day.Total().Offered; !near(got, float64(c.hours*3600), 1e-6) {
			t.Errorf("%s: offered %v GPU-seconds, want %d hours", c.day, got, c.hours)
		}
		n := 0
		for k, s := range day.Hours {
			n++
			if s.Offered > 3600+1e-6 {
				t.Errorf("%s: hour %s has %v GPU-seconds", c.day, k.Start.In(z), s.Offered)
			}
			if k.Start.Before(day.Start) || !k.Start.Before(day.End) {
				t.Errorf("%s: hour %s outside the day", c.day, k.Start.In(z))
			}
		}
		if n != c.hours {
			t.Errorf("%s: %d hours, want %d", c.day, n, c.hours)
		}
	}
}

// TestAdvanceIndiaHours: a zone whose offset is not whole hours still has hours that
// start at :00 local time.
func TestAdvanceIndiaHours(t *testing.T) {
	z, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, z)
	l := New(z, start)
	l.Advance(start.Add(3*time.Hour+20*time.Minute), []Item{{Key: "node/a", Kind: Offered, Layout: "x", Profile: "p", GPUs: 0.5}})
	for k := range l.Days["2026-05-01"].Hours {
		if lt := k.Start.In(z); lt.Minute() != 0 || lt.Second() != 0 {
			t.Errorf("hour starts at %s", lt)
		}
	}
	if got := l.Days["2026-05-01"].Total().Offered; !near(got, 0.5*(3*3600+20*60), 1e-6) {
		t.Errorf("offered %v", got)
	}
}

// timeline is a random life of a pool: items that come and go between passes at random
// times. The oracle counts each item from the later of its start and the first pass to
// the first pass that does not see it (or the last pass), independently of the ledger.
type timeline struct {
	passes []time.Time
	seen   [][]Item
}

func randomTimeline(r *rand.Rand, start time.Time, n int) timeline {
	var tl timeline
	live := map[string]Item{}
	now := start
	for i := range n {
		now = now.Add(time.Duration(1+r.IntN(3*3600)) * time.Second)
		for k := range live {
			if r.IntN(5) == 0 {
				delete(live, k)
			}
		}
		for j := range r.IntN(4) {
			kind := Kind(r.IntN(3))
			it := Item{Key: fmt.Sprintf("i%d-%d", i, j), Kind: kind, Layout: []string{"day", "night"}[r.IntN(2)],
				Profile: "grid_p100-4q", Tenant: fmt.Sprintf("t%d", r.IntN(3)), GPUs: float64(1+r.IntN(4)) / 4}
			// Started somewhere since the last pass, or long before; or stamped by a
			// clock ahead of the manager's.
			it.Since = now.Add(-time.Duration(r.IntN(4*3600)) * time.Second)
			switch r.IntN(6) {
			case 0:
				it.Since = now.Add(time.Duration(1+r.IntN(600)) * time.Second)
			case 1:
				it.Since = time.Time{} // not known: a node, a switch
			}
			live[it.Key] = it
		}
		var items []Item
		for _, it := range live {
			items = append(items, it)
		}
		tl.passes = append(tl.passes, now)
		tl.seen = append(tl.seen, items)
	}
	return tl
}

func (tl timeline) oracle() (Sums, map[string]float64) {
	var s Sums
	tenants := map[string]float64{}
	first := tl.passes[0]
	for i, items := range tl.seen {
		for _, it := range items {
			if i > 0 && contains(tl.seen[i-1], it.Key) {
				continue // counted where it first appeared
			}
			end := tl.passes[len(tl.passes)-1]
			for j := i + 1; j < len(tl.passes); j++ {
				if !contains(tl.seen[j], it.Key) {
					end = tl.passes[j]
					break
				}
			}
			// The first pass only starts the ledger; later ones count from the pass
			// before, or from the item's start when it is later.
			from := first
			switch {
			case i == 0:
			case it.Since.IsZero(), it.Since.After(tl.passes[i]):
				from = tl.passes[i] // not known, or in the manager's future: from when it was seen
			default:
				from = laterOf(tl.passes[i-1], it.Since)
			}
			if !end.After(from) {
				continue
			}
			v := end.Sub(from).Seconds() * it.GPUs
			s.add(it.Kind, v)
			if it.Kind == Allocated {
				tenants[it.Tenant] += v
			}
		}
	}
	return s, tenants
}

func contains(items []Item, key string) bool {
	for _, it := range items {
		if it.Key == key {
			return true
		}
	}
	return false
}

// TestAdvanceAgreesWithOracle: over random lives of a pool, the ledger's days, hours
// and tenants add up to what the oracle counts, and a manager restarted at any pass
// from the persisted day (ToUsage, Resume) goes on to the same sums, within the rounding
// to whole seconds of what it persisted.
func TestAdvanceAgreesWithOracle(t *testing.T) {
	z := berlin(t)
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 7))
		tl := randomTimeline(r, time.Date(2026, 10, 23, 22, 0, 0, 0, z), 40)
		want, wantTenants := tl.oracle()

		l := New(z, time.Time{})
		for i, now := range tl.passes {
			l.Advance(now, tl.seen[i])
		}
		got, tenants, hours := sumDays(l)
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"offered", got.Offered, want.Offered}, {"allocated", got.Allocated, want.Allocated},
			{"switching", got.Switching, want.Switching}, {"hours' offered", hours.Offered, want.Offered},
			{"hours' allocated", hours.Allocated, want.Allocated}, {"hours' switching", hours.Switching, want.Switching},
		} {
			if !near(c.got, c.want, 1e-6*max64(1, c.want)) {
				t.Fatalf("seed %d: %s %v, oracle %v", seed, c.what, c.got, c.want)
			}
		}
		for ten, w := range wantTenants {
			if !near(tenants[ten], w, 1e-6*max64(1, w)) {
				t.Fatalf("seed %d: tenant %s %v, oracle %v", seed, ten, tenants[ten], w)
			}
		}

		// A restart at pass k: everything persisted (each day touched), then resumed.
		k := 2 + r.IntN(len(tl.passes)-3)
		l1 := New(z, time.Time{})
		for i := range k {
			l1.Advance(tl.passes[i], tl.seen[i])
		}
		var persisted []gpupoolv1.GPUPoolUsage
		for _, d := range l1.Days {
			persisted = append(persisted, *ToUsage("p", z, d))
		}
		l2, err := Resume(z, persisted)
		if err != nil {
			t.Fatal(err)
		}
		// The items of the pass the restart lost are not known: the resumed ledger sees
		// pass k with nothing before it, as a restarted manager does.
		for i := k; i < len(tl.passes); i++ {
			l2.Advance(tl.passes[i], tl.seen[i])
		}
		merged := map[string]*Day{}
		for n, d := range l1.Days {
			merged[n] = d
		}
		for n, d := range l2.Days {
			merged[n] = d // the resumed ledger carries the latest day on
		}
		var rs Sums
		for _, d := range merged {
			s := d.Total()
			rs.Offered += s.Offered
			rs.Allocated += s.Allocated
			rs.Switching += s.Switching
		}
		// What a restart may lose: an item the lost pass k-1 saw that pass k no longer
		// sees (it ended while the manager was down). The oracle without it is the floor.
		lostMax := 0.0
		for _, it := range tl.seen[k-1] {
			if !contains(tl.seen[k], it.Key) {
				lostMax += tl.passes[k].Sub(tl.passes[k-1]).Seconds() * it.GPUs
			}
		}
		// And an item whose start a clock ahead stamped after the persisted Through: the
		// resumed ledger, which never saw it, counts it from that start.
		for _, it := range tl.seen[k] {
			if contains(tl.seen[k-1], it.Key) && it.Since.After(tl.passes[k-1]) {
				lostMax += (it.Since.Sub(tl.passes[k-1]).Seconds()) * it.GPUs
			}
		}
		// What it may add: an item new at pass k without a known start, which the resumed
		// ledger holds since the persisted Through.
		addMax := 0.0
		for _, it := range tl.seen[k] {
			if !contains(tl.seen[k-1], it.Key) && it.Since.IsZero() {
				addMax += tl.passes[k].Sub(tl.passes[k-1]).Seconds() * it.GPUs
			}
		}
		rounding := float64(4 * len(persisted) * 24) // whole-second rounding of rows and hours
		total := want.Offered + want.Allocated + want.Switching
		if g := rs.Offered + rs.Allocated + rs.Switching; g > total+rounding+addMax || g < total-rounding-lostMax {
			t.Fatalf("seed %d: restarted at pass %d: %v GPU-seconds, oracle %v (may lose %v)", seed, k, g, total, lostMax)
		}
	}
}

func max64(a, b float64) float64 { return math.Max(a, b) }

// TestAdvanceTwiceCountsOnce: the same pass seen twice, a pass in the past, and items
// that started after Through count each second once.
func TestAdvanceTwiceCountsOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	l := New(time.UTC, t0)
	pod := Item{Key: "pod/u", Kind: Allocated, Layout: "day", Profile: "p", Tenant: "a", GPUs: 0.25, Since: t0.Add(30 * time.Minute)}
	l.Advance(t0.Add(time.Hour), []Item{pod})
	l.Advance(t0.Add(time.Hour), []Item{pod})
	l.Advance(t0.Add(50*time.Minute), []Item{pod})
	l.Advance(t0.Add(2*time.Hour), nil)
	if got := l.Days["2026-01-05"].Total().Allocated; !near(got, 0.25*5400, 1e-9) {
		t.Errorf("allocated %v, want %v", got, 0.25*5400)
	}
}

// TestTenantsBounded: past MaxTenants a day's tenants go to Other, and nothing is lost.
func TestTenantsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	l := New(time.UTC, t0)
	var items []Item
	for i := range MaxTenants + 50 {
		items = append(items, Item{Key: fmt.Sprintf("pod/%d", i), Kind: Allocated, Layout: "day", Profile: "p", Tenant: fmt.Sprintf("ns-%03d", i), GPUs: 1})
	}
	l.Advance(t0.Add(time.Minute), items)
	l.Advance(t0.Add(2*time.Minute), items)
	d := l.Days["2026-01-05"]
	tenants := 0
	var sum float64
	for k, s := range d.Rows {
		if k.Tenant != "" {
			tenants++
			sum += s.Allocated
		}
	}
	if tenants != MaxTenants+1 {
		t.Errorf("%d tenant rows, want %d and %s", tenants, MaxTenants, Other)
	}
	if want := float64((MaxTenants + 50) * 120); !near(sum, want, 1e-6) || !near(d.Total().Allocated, want, 1e-6) {
		t.Errorf("tenants sum %v, total %v, want %v", sum, d.Total().Allocated, want)
	}
	u := ToUsage("p", time.UTC, d)
	back, _, err := FromUsage(u)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.tenants) != MaxTenants {
		t.Errorf("a resumed day knows %d tenants, want %d", len(back.tenants), MaxTenants)
	}
}

// TestHoldAccountsRest: Hold goes on with the last pass's items, once per second of
// time, and does nothing before a first pass.
func TestHoldAccountsRest(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 22, 0, 0, 0, time.UTC)
	l := New(time.UTC, time.Time{})
	l.Hold(t0) // nothing seen yet: nothing to hold
	if !l.Through.IsZero() {
		t.Fatalf("Hold before a pass started the ledger at %s", l.Through)
	}
	node := Item{Key: "node/n", Kind: Offered, Layout: "night", Profile: "p", GPUs: 1}
	l.Advance(t0, []Item{node})
	l.Hold(t0.Add(time.Hour))
	l.Hold(t0.Add(time.Hour)) // again at the same time: nothing more
	l.Hold(t0.Add(3 * time.Hour))
	if a, b := l.Days["2026-01-05"].Total().Offered, l.Days["2026-01-06"].Total().Offered; a != 2*3600 || b != 3600 {
		t.Errorf("held %v on the 5th and %v on the 6th, want 7200 and 3600", a, b)
	}
	l.Advance(t0.Add(4*time.Hour), nil) // gone, seen at 02:00
	l.Hold(t0.Add(5 * time.Hour))
	if b := l.Days["2026-01-06"].Total().Offered; b != 2*3600 {
		t.Errorf("after the node went: %v on the 6th, want 7200", b)
	}
}

// TestHoursOneKeyPerHour: the zone loaded again on every pass (another *Location each
// time) and a day read back from the API (local time) keep one entry per hour and
// layout: a day has at most 25 hours per layout.
func TestHoursOneKeyPerHour(t *testing.T) {
	t0 := time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC)
	l := New(berlin(t), t0)
	node := Item{Key: "node/n", Kind: Offered, Layout: "night", Profile: "p", GPUs: 1}
	for now := t0.Add(time.Minute); now.Before(t0.Add(30 * time.Hour)); now = now.Add(7 * time.Minute) {
		l.Zone = berlin(t) // as account sets it from the spec on every pass
		l.Advance(now, []Item{node})
		if now.Minute()%3 == 0 { // now and then the day goes through the API and back
			for name, d := range l.Days {
				u := ToUsage("p", l.Zone, d)
				u.Hours[0].Start.Time = u.Hours[0].Start.Local()
				back, _, err := FromUsage(u)
				if err != nil {
					t.Fatal(err)
				}
				back.Fresh = d.Fresh
				l.Days[name] = back
			}
		}
	}
	for name, d := range l.Days {
		if n := len(d.Hours); n > 25 {
			t.Errorf("day %s has %d hour entries for one layout", name, n)
		}
		seen := map[int64]bool{}
		for k := range d.Hours {
			if seen[k.Start.Unix()] {
				t.Errorf("day %s: hour %s twice", name, k.Start)
			}
			seen[k.Start.Unix()] = true
		}
	}
	if d := l.Days["2026-10-25"]; d == nil || len(d.Hours) != 25 {
		t.Errorf("the DST day: %v", d)
	}
}

// TestMergeKeepsPersisted: a day the ledger made afresh, merged with the persisted day
// of its name, has both sums; Idle clamps per row.
func TestMergeKeepsPersisted(t *testing.T) {
	t0 := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	old := New(time.UTC, t0.Add(-12*time.Hour))
	old.Advance(t0.Add(-12*time.Hour+time.Minute), []Item{{Key: "node/a", Kind: Offered, Layout: "day", Profile: "p", GPUs: 1}})
	old.Advance(t0, nil) // the node was there until noon: 12 h
	persisted := ToUsage("p", time.UTC, old.Days["2026-05-04"])

	l := New(time.UTC, t0) // a restart that could not read the day back
	l.Advance(t0.Add(time.Minute), []Item{{Key: "node/a", Kind: Offered, Layout: "day", Profile: "p", GPUs: 1},
		{Key: "pod/x", Kind: Allocated, Layout: "night", Profile: "q", Tenant: "t", GPUs: 1, Since: t0}})
	l.Advance(t0.Add(time.Hour), nil)
	d := l.Days["2026-05-04"]
	if !d.Fresh {
		t.Fatal("a day the ledger made is not fresh")
	}
	p, _, err := FromUsage(persisted)
	if err != nil {
		t.Fatal(err)
	}
	d.Merge(p)
	if got := d.Total().Offered; !near(got, 12*3600+3600, 1) {
		t.Errorf("merged offered %v, want 13 h", got)
	}
	// day: 13 h offered, nothing allocated: 13 h idle; night: 1 h allocated on no offer:
	// not -1 h.
	if got := d.Idle(); !near(got, 13*3600, 1) {
		t.Errorf("idle %v, want 13 h (night's allocation without an offer does not cancel day's idle)", got)
	}
	if d.Fresh {
		t.Error("a merged day is still fresh")
	}
}

// TestTenantRowsBounded: tenants spread over many layouts and profiles stay within
// MaxTenantRows rows.
func TestTenantRowsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	l := New(time.UTC, t0)
	var items []Item
	for i := range MaxTenants {
		for j := range 12 {
			items = append(items, Item{Key: fmt.Sprintf("pod/%d-%d", i, j), Kind: Allocated, Layout: fmt.Sprintf("l%d", j), Profile: "p",
				Tenant: fmt.Sprintf("ns-%03d", i), GPUs: 1})
		}
	}
	l.Advance(t0.Add(time.Minute), items)
	rows := 0
	for k := range l.Days["2026-01-05"].Rows {
		if k.Tenant != "" {
			rows++
		}
	}
	if rows > MaxTenantRows+12 { // and an (other) row per layout
		t.Errorf("%d tenant rows, want at most %d and the (other) rows", rows, MaxTenantRows)
	}
	if u := ToUsage("p", time.UTC, l.Days["2026-01-05"]); len(u.Rows) > 4096 {
		t.Errorf("%d rows, more than GPUPoolUsage allows", len(u.Rows))
	}
}

// TestNewAfterHold: a pod that starts after a pass and is first seen after the flusher
// carried that pass on counts from its start, not from the carrying; so does one seen by
// a pass that looked before the carrying reached past its look.
func TestNewAfterHold(t *testing.T) {
	t0 := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	node := Item{Key: "node/n", Kind: Offered, Layout: "day", Profile: "p", GPUs: 1}
	pod := func(since time.Time) Item {
		return Item{Key: "pod/x", Kind: Allocated, Layout: "day", Profile: "p", Tenant: "t", GPUs: 1, Since: since}
	}
	allocated := func(l *Ledger) float64 { return l.Days["2026-01-05"].Total().Allocated }

	l := New(time.UTC, t0)
	l.Advance(t0, []Item{node})
	l.Hold(t0.Add(5 * time.Minute))
	l.Advance(t0.Add(6*time.Minute), []Item{node, pod(t0.Add(2 * time.Minute))})
	if got := allocated(l); got != 4*60 {
		t.Errorf("a pod started at 10:02, seen at 10:06 after a carrying at 10:05: %v s, want 240", got)
	}

	l = New(time.UTC, t0)
	l.Advance(t0, []Item{node})
	l.Hold(t0.Add(5 * time.Minute))
	l.Advance(t0.Add(4*time.Minute), []Item{node, pod(t0.Add(3 * time.Minute))}) // looked at 10:04
	l.Advance(t0.Add(10*time.Minute), []Item{node, pod(t0.Add(3 * time.Minute))})
	if got := allocated(l); got != 7*60 {
		t.Errorf("a pod started at 10:03, seen by a pass that looked at 10:04, before a carrying to 10:05: %v s, want 420", got)
	}
	if got := l.Days["2026-01-05"].Total().Offered; got != 10*60 {
		t.Errorf("the node: %v s, want 600", got)
	}
}
