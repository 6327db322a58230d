package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/cronspec"
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

// mustTime parses an RFC 3339 time.
func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("time %s: %v", s, err)
	}
	return ts
}

func win(layout, start string, d time.Duration, priority int32) gpupoolv1.Window {
	return gpupoolv1.Window{Layout: layout, Start: start, Duration: metav1.Duration{Duration: d}, Priority: priority}
}

func scheduleSpec(tz string, lead time.Duration, windows ...gpupoolv1.Window) *gpupoolv1.GPUPoolProfileSpec {
	s := &gpupoolv1.GPUPoolProfileSpec{
		DefaultLayout: "night",
		Schedule:      &gpupoolv1.Schedule{TimeZone: tz, Windows: windows},
	}
	if lead != 0 {
		s.Schedule.LeadTime = &metav1.Duration{Duration: lead}
	}
	return s
}

// compileWindow compiles a spec with one window and returns that window.
func compileWindow(t testing.TB, tz, start string, d time.Duration) *window {
	t.Helper()
	s, err := compile(scheduleSpec(tz, 0, win("x", start, d, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return &s.windows[0]
}

// dstCases are cron expressions around daylight-saving transitions, with the starts
// robfig/cron's Next gives in the zone and the starts gpupool uses.
var dstCases = []struct {
	name, tz, start, from string
	robfig, gpupool       []string
}{
	{
		name: "Berlin spring forward: 02:30 does not exist",
		tz:   "Europe/Berlin", start: "30 2 * * *", from: "2026-03-28T12:00:00+01:00",
		robfig:  []string{"2026-03-30T02:30:00+02:00"}, // the 29th is skipped
		gpupool: []string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"},
	},
	{
		name: "Berlin spring forward: several starts in the gap happen once",
		tz:   "Europe/Berlin", start: "*/20 2 * * *", from: "2026-03-28T12:00:00+01:00",
		robfig:  []string{"2026-03-30T02:00:00+02:00"},
		gpupool: []string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"},
	},
	{
		name: "Berlin spring forward: 03:00 is unaffected",
		tz:   "Europe/Berlin", start: "0 3 * * *", from: "2026-03-28T12:00:00+01:00",
		robfig:  []string{"2026-03-29T03:00:00+02:00", "2026-03-30T03:00:00+02:00"},
		gpupool: []string{"2026-03-29T03:00:00+02:00", "2026-03-30T03:00:00+02:00"},
	},
	{
		name: "Berlin fall back: 02:30 happens twice on the clock",
		tz:   "Europe/Berlin", start: "30 2 * * *", from: "2026-10-24T12:00:00+02:00",
		robfig:  []string{"2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"},
		gpupool: []string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"},
	},
	{
		name: "Berlin fall back: a cron every 20 minutes of 02:xx",
		tz:   "Europe/Berlin", start: "*/20 2 * * *", from: "2026-10-25T01:50:00+02:00",
		robfig: []string{
			"2026-10-25T02:00:00+02:00", "2026-10-25T02:20:00+02:00", "2026-10-25T02:40:00+02:00",
			"2026-10-25T02:00:00+01:00", "2026-10-25T02:20:00+01:00", "2026-10-25T02:40:00+01:00",
			"2026-10-26T02:00:00+01:00",
		},
		gpupool: []string{
			"2026-10-25T02:00:00+02:00", "2026-10-25T02:20:00+02:00", "2026-10-25T02:40:00+02:00",
			"2026-10-26T02:00:00+01:00",
		},
	},
	{
		name: "Berlin fall back: from inside the repeated hour",
		tz:   "Europe/Berlin", start: "*/20 2 * * *", from: "2026-10-25T02:10:00+01:00",
		robfig:  []string{"2026-10-25T02:20:00+01:00"},
		gpupool: []string{"2026-10-26T02:00:00+01:00"},
	},
	{
		name: "New York spring forward",
		tz:   "America/New_York", start: "30 2 * * *", from: "2026-03-07T12:00:00-05:00",
		robfig:  []string{"2026-03-09T02:30:00-04:00"},
		gpupool: []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"},
	},
	{
		name: "New York fall back",
		tz:   "America/New_York", start: "30 1 * * *", from: "2026-10-31T12:00:00-04:00",
		robfig:  []string{"2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"},
		gpupool: []string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"},
	},
	{
		name: "Lord Howe spring forward (30 minutes): 02:15 does not exist",
		tz:   "Australia/Lord_Howe", start: "15 2 * * *", from: "2026-10-03T12:00:00+10:30",
		robfig:  []string{"2026-10-05T02:15:00+11:00"},
		gpupool: []string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"},
	},
	{
		name: "Lord Howe spring forward: 02:45 exists",
		tz:   "Australia/Lord_Howe", start: "45 2 * * *", from: "2026-10-03T12:00:00+10:30",
		robfig:  []string{"2026-10-04T02:45:00+11:00"},
		gpupool: []string{"2026-10-04T02:45:00+11:00"},
	},
	{
		name: "Lord Howe spring forward: robfig misses 08:00, which exists",
		tz:   "Australia/Lord_Howe", start: "0 8 * * *", from: "2026-10-03T12:00:00+10:30",
		robfig:  []string{"2026-10-05T08:00:00+11:00"},
		gpupool: []string{"2026-10-04T08:00:00+11:00", "2026-10-05T08:00:00+11:00"},
	},
	{
		name: "Lord Howe fall back: 01:45 happens twice on the clock",
		tz:   "Australia/Lord_Howe", start: "45 1 * * *", from: "2026-04-04T12:00:00+11:00",
		robfig:  []string{"2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30", "2026-04-06T01:45:00+10:30"},
		gpupool: []string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"},
	},
	{
		name: "Lord Howe fall back: robfig misses 02:00, which exists once",
		tz:   "Australia/Lord_Howe", start: "0 2 * * *", from: "2026-04-04T12:00:00+11:00",
		robfig:  []string{"2026-04-06T02:00:00+10:30"},
		gpupool: []string{"2026-04-05T02:00:00+10:30", "2026-04-06T02:00:00+10:30"},
	},
	{
		name: "Lord Howe fall back: robfig misses 08:00",
		tz:   "Australia/Lord_Howe", start: "0 8 * * *", from: "2026-04-04T12:00:00+11:00",
		robfig:  []string{"2026-04-06T08:00:00+10:30"},
		gpupool: []string{"2026-04-05T08:00:00+10:30", "2026-04-06T08:00:00+10:30"},
	},
}

// TestRobfigDST pins down what robfig/cron's Next does around DST transitions, which is
// why gpupool does not use it on zoned times. If robfig changes, this test says so.
func TestRobfigDST(t *testing.T) {
	for _, tc := range dstCases {
		t.Run(tc.name, func(t *testing.T) {
			sched, err := cronspec.Parse(tc.start)
			if err != nil {
				t.Fatal(err)
			}
			at := mustTime(t, tc.from).In(mustLoad(t, tc.tz))
			for i, want := range tc.robfig {
				at = sched.Next(at)
				if got := at.Format(time.RFC3339); got != want {
					t.Fatalf("robfig start %d = %s, want %s", i, got, want)
				}
			}
		})
	}
}

func TestNextDST(t *testing.T) {
	for _, tc := range dstCases {
		t.Run(tc.name, func(t *testing.T) {
			w := compileWindow(t, tc.tz, tc.start, time.Hour)
			at := mustTime(t, tc.from)
			for i, want := range tc.gpupool {
				at = w.next(at)
				if got := at.In(w.loc).Format(time.RFC3339); got != want {
					t.Fatalf("start %d = %s, want %s", i, got, want)
				}
			}
		})
	}
}

func TestFirstInstant(t *testing.T) {
	wall := func(s string) time.Time { return mustTime(t, s+"Z") }
	tests := []struct {
		tz, wall, want string
	}{
		{"Europe/Berlin", "2026-07-01T12:00:00", "2026-07-01T12:00:00+02:00"},
		{"Europe/Berlin", "2026-03-29T01:59:00", "2026-03-29T01:59:00+01:00"},
		{"Europe/Berlin", "2026-03-29T02:00:00", "2026-03-29T03:00:00+02:00"},
		{"Europe/Berlin", "2026-03-29T02:59:00", "2026-03-29T03:00:00+02:00"},
		{"Europe/Berlin", "2026-03-29T03:00:00", "2026-03-29T03:00:00+02:00"},
		{"Europe/Berlin", "2026-10-25T02:00:00", "2026-10-25T02:00:00+02:00"},
		{"Europe/Berlin", "2026-10-25T02:59:00", "2026-10-25T02:59:00+02:00"},
		{"Europe/Berlin", "2026-10-25T03:00:00", "2026-10-25T03:00:00+01:00"},
		{"Australia/Lord_Howe", "2026-10-04T02:10:00", "2026-10-04T02:30:00+11:00"},
		{"Australia/Lord_Howe", "2026-04-05T01:40:00", "2026-04-05T01:40:00+11:00"},
		{"Pacific/Apia", "2011-12-30T12:00:00", "2011-12-31T00:00:00+14:00"}, // Samoa skipped a day
		{"UTC", "2026-03-29T02:30:00", "2026-03-29T02:30:00Z"},
	}
	for _, tc := range tests {
		loc := mustLoad(t, tc.tz)
		if got := firstInstant(wall(tc.wall), loc).In(loc).Format(time.RFC3339); got != tc.want {
			t.Errorf("firstInstant(%s in %s) = %s, want %s", tc.wall, tc.tz, got, tc.want)
		}
	}
}

// TestOpenedAtMatchesWalk compares the bisecting search for the latest start with a
// plain walk over all starts, for dense and sparse crons, across DST transitions.
func TestOpenedAtMatchesWalk(t *testing.T) {
	crons := []string{"*/7 * * * *", "* 8-9 * * 1-5", "0,30 * * * *", "* 0-11 1-15 * *", "0 8 * * 1-5", "*/20 2 * * *", "13 */5 * * *"}
	durations := []time.Duration{time.Minute, 25 * time.Minute, 3 * time.Hour, 26 * time.Hour, 9 * 24 * time.Hour}
	zones := []string{"UTC", "Europe/Berlin", "Australia/Lord_Howe"}
	r := rand.New(rand.NewPCG(1, 2))
	base := mustTime(t, "2026-03-20T00:00:00Z")
	for i := 0; i < 400; i++ {
		expr, d, tz := crons[r.IntN(len(crons))], durations[r.IntN(len(durations))], zones[r.IntN(len(zones))]
		w := compileWindow(t, tz, expr, d)
		at := base.Add(time.Duration(r.Int64N(int64(230 * 24 * time.Hour))))
		var want time.Time
		for s := w.next(at.Add(-d)); !s.IsZero() && !s.After(at); s = w.next(s) {
			want = s
		}
		got, open := w.openedAt(at)
		if open != !want.IsZero() || !got.Equal(want) {
			t.Fatalf("%q for %s in %s at %s: openedAt = %s, %v; walking gives %s", expr, d, tz, at, got, open, want)
		}
	}
}

// countingSchedule counts calls of Next, to show the searches stay bounded.
type countingSchedule struct {
	cron.Schedule
	calls *int
}

func (c countingSchedule) Next(t time.Time) time.Time {
	*c.calls++
	return c.Schedule.Next(t)
}

func TestSearchesAreBounded(t *testing.T) {
	now := mustTime(t, "2026-06-15T12:00:00Z")
	tests := []struct {
		name, start string
		duration    time.Duration
		open        bool
		// maxOpenedAt and maxBoundary bound the Next calls of openedAt and of the
		// boundary search.
		maxOpenedAt, maxBoundary int
		next                     bool
	}{
		{name: "every minute for 30 days", start: "* * * * *", duration: 30 * 24 * time.Hour, open: true, maxOpenedAt: 60, maxBoundary: 200},
		{name: "every minute for 2 minutes, gives up", start: "* * * * *", duration: 2 * time.Minute, open: true, maxOpenedAt: 10, maxBoundary: 6 * maxBoundaryEvents},
		{name: "29 February", start: "0 0 29 2 *", duration: 24 * time.Hour, maxOpenedAt: 2, maxBoundary: 10},
		{name: "30 February never comes", start: "0 0 30 2 *", duration: 24 * time.Hour, maxOpenedAt: 2, maxBoundary: 10},
		{name: "weekdays", start: "0 8 * * 1-5", duration: 12 * time.Hour, open: true, maxOpenedAt: 5, maxBoundary: 20, next: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := compile(scheduleSpec("Europe/Berlin", 0, win("day", tc.start, tc.duration, 0)))
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			s.windows[0].sched = countingSchedule{Schedule: s.windows[0].sched, calls: &calls}

			_, open := s.windows[0].openedAt(now)
			if open != tc.open || calls > tc.maxOpenedAt {
				t.Errorf("openedAt: open = %v after %d Next calls, want %v after at most %d", open, calls, tc.open, tc.maxOpenedAt)
			}
			calls = 0
			layout := "night"
			if tc.open {
				layout = "day"
			}
			b := s.nextBoundary("night", now, layout, false)
			if (b != nil) != tc.next || calls > tc.maxBoundary {
				t.Errorf("nextBoundary = %+v after %d Next calls, want found=%v after at most %d", b, calls, tc.next, tc.maxBoundary)
			}
		})
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		12 * time.Hour:                  "12h",
		30 * time.Minute:                "30m",
		90 * time.Minute:                "1h30m",
		90 * time.Second:                "1m30s",
		2*time.Hour + 30*time.Second:    "2h0m30s",
		720 * time.Hour:                 "720h",
		time.Hour + 10*time.Millisecond: "1h0m0.01s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %s, want %s", d, got, want)
		}
	}
}

func ExampleDesired() {
	spec := &gpupoolv1.GPUPoolProfileSpec{
		DefaultLayout: "night",
		Schedule: &gpupoolv1.Schedule{
			TimeZone: "Europe/Berlin",
			Windows:  []gpupoolv1.Window{{Layout: "day", Start: "0 8 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour}}},
		},
	}
	d, err := Desired(spec, time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	if err != nil {
		panic(err)
	}
	fmt.Println(d.Layout, d.Reason, d.Message)
	fmt.Println("next:", d.Next.Layout, d.Next.At.Format(time.RFC3339))
	// Output:
	// day Schedule window 0 (0 8 * * 1-5 for 12h, Europe/Berlin) open since 2026-11-30T08:00:00+01:00
	// next: night 2026-11-30T19:00:00Z
}
