package plan

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func override(layout, until, reason string) func(*gpupoolv1.GPUPoolProfileSpec) {
	return func(s *gpupoolv1.GPUPoolProfileSpec) {
		s.Override = &gpupoolv1.Override{Layout: layout, Reason: reason}
		if until != "" {
			ts, err := time.Parse(time.RFC3339, until)
			if err != nil {
				panic(err)
			}
			s.Override.Until = &metav1.Time{Time: ts}
		}
	}
}

func TestDesired(t *testing.T) {
	const berlin = "Europe/Berlin"
	weekdays := win("day", "0 8 * * 1-5", 12*time.Hour, 0)
	tests := []struct {
		name   string
		spec   *gpupoolv1.GPUPoolProfileSpec
		modify func(*gpupoolv1.GPUPoolProfileSpec)
		now    string

		layout  string
		reason  gpupoolv1.DesiredReason
		window  int
		message string // exact unless it starts with "~", then a substring
		next    string // "layout at", or "" for none
	}{
		// Plain windows.
		{
			name: "in the window", spec: scheduleSpec(berlin, 0, weekdays), now: "2026-11-30T09:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0,
			message: "window 0 (0 8 * * 1-5 for 12h, Europe/Berlin) open since 2026-11-30T08:00:00+01:00",
			next:    "night 2026-11-30T20:00:00+01:00",
		},
		{
			name: "the window opens at its start", spec: scheduleSpec(berlin, 0, weekdays), now: "2026-11-30T08:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-11-30T08:00:00+01:00",
			next: "night 2026-11-30T20:00:00+01:00",
		},
		{
			name: "a second before the start", spec: scheduleSpec(berlin, 0, weekdays), now: "2026-11-30T07:59:59+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1,
			message: "no window open at 2026-11-30T07:59:59+01:00; default layout night",
			next:    "day 2026-11-30T08:00:00+01:00",
		},
		{
			name: "the window is closed at start + duration", spec: scheduleSpec(berlin, 0, weekdays), now: "2026-11-30T20:00:00+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
			next: "day 2026-12-01T08:00:00+01:00",
		},
		{
			name: "friday evening: next is monday", spec: scheduleSpec(berlin, 0, weekdays), now: "2026-11-27T21:00:00+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
			next: "day 2026-11-30T08:00:00+01:00",
		},
		{
			name: "time zone defaults to UTC", spec: scheduleSpec("", 0, weekdays), now: "2026-11-30T08:30:00Z",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0,
			message: "window 0 (0 8 * * 1-5 for 12h, UTC) open since 2026-11-30T08:00:00Z",
			next:    "night 2026-11-30T20:00:00Z",
		},
		{
			name: "no schedule", spec: &gpupoolv1.GPUPoolProfileSpec{DefaultLayout: "night"}, now: "2026-11-30T09:00:00Z",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "no schedule windows; default layout night",
		},

		// Downtime: Desired depends on now only.
		{
			name: "down over the weekend", spec: scheduleSpec(berlin, 0, weekdays), now: "2026-11-30T10:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-11-30T08:00:00+01:00",
			next: "night 2026-11-30T20:00:00+01:00",
		},
		{
			name: "down for ten days, back at night", spec: scheduleSpec(berlin, 0, weekdays), now: "2026-12-10T23:00:00+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
			next: "day 2026-12-11T08:00:00+01:00",
		},

		// Overlaps.
		{
			name: "higher priority wins",
			spec: scheduleSpec(berlin, 0,
				win("day", "0 8 * * *", 12*time.Hour, 0),
				win("batch", "0 12 * * *", 4*time.Hour, 1),
				win("night", "0 10 * * *", 4*time.Hour, 1)),
			now:    "2026-11-30T11:00:00+01:00",
			layout: "night", reason: gpupoolv1.DesiredBySchedule, window: 2, message: "~window 2 (0 10 * * * for 4h, Europe/Berlin)",
			next: "batch 2026-11-30T12:00:00+01:00",
		},
		{
			name: "equal priority: the earlier window wins",
			spec: scheduleSpec(berlin, 0,
				win("day", "0 8 * * *", 12*time.Hour, 0),
				win("batch", "0 12 * * *", 4*time.Hour, 1),
				win("night", "0 10 * * *", 4*time.Hour, 1)),
			now:    "2026-11-30T13:00:00+01:00",
			layout: "batch", reason: gpupoolv1.DesiredBySchedule, window: 1, message: "~window 1",
			next: "day 2026-11-30T16:00:00+01:00",
		},
		{
			name: "a window taking over with the same layout is no boundary",
			spec: scheduleSpec(berlin, 0,
				win("day", "0 8 * * *", 12*time.Hour, 0),
				win("day", "0 18 * * *", 4*time.Hour, 1)),
			now:    "2026-11-30T09:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~window 0",
			next: "night 2026-11-30T22:00:00+01:00",
		},
		{
			name: "a window restarting while open is no boundary",
			spec: scheduleSpec(berlin, 0, win("day", "0 */6 * * *", 8*time.Hour, 0)), now: "2026-11-30T09:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-11-30T06:00:00+01:00",
		},
		{
			name: "contiguous windows of different layouts",
			spec: scheduleSpec(berlin, 0,
				win("day", "0 8 * * *", 12*time.Hour, 0),
				win("batch", "0 20 * * *", 12*time.Hour, 0)),
			now:    "2026-11-30T19:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~window 0",
			next: "batch 2026-11-30T20:00:00+01:00",
		},

		// Overrides.
		{
			name: "override wins over an open window", spec: scheduleSpec(berlin, 0, weekdays),
			modify: override("maint", "2026-11-30T12:00:00+01:00", "firmware update"), now: "2026-11-30T09:00:00+01:00",
			layout: "maint", reason: gpupoolv1.DesiredByOverride, window: -1,
			message: "override to layout maint until 2026-11-30T12:00:00+01:00: firmware update",
			next:    "day 2026-11-30T12:00:00+01:00",
		},
		{
			name: "override without expiry", spec: scheduleSpec(berlin, 0, weekdays),
			modify: override("maint", "", ""), now: "2026-11-30T09:00:00+01:00",
			layout: "maint", reason: gpupoolv1.DesiredByOverride, window: -1,
			message: "override to layout maint without expiry",
		},
		{
			name: "expired override", spec: scheduleSpec(berlin, 0, weekdays),
			modify: override("maint", "2026-11-30T09:00:00+01:00", ""), now: "2026-11-30T09:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0,
			message: "window 0 (0 8 * * 1-5 for 12h, Europe/Berlin) open since 2026-11-30T08:00:00+01:00; override to layout maint expired at 2026-11-30T09:00:00+01:00",
			next:    "night 2026-11-30T20:00:00+01:00",
		},
		{
			name: "override expiring outside every window: next is its expiry", spec: scheduleSpec(berlin, 0, weekdays),
			modify: override("day", "2026-11-30T07:00:00+01:00", ""), now: "2026-11-30T06:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredByOverride, window: -1, message: "~override to layout day until",
			// At 07:00 the default (night) applies.
			next: "night 2026-11-30T07:00:00+01:00",
		},
		{
			name: "override expiring inside a window of its layout", spec: scheduleSpec(berlin, 0, weekdays),
			modify: override("day", "2026-11-30T09:00:00+01:00", ""), now: "2026-11-30T06:00:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredByOverride, window: -1, message: "~override to layout day until",
			next: "night 2026-11-30T20:00:00+01:00",
		},

		// Lead time: the schedule is read leadTime ahead, the override is not.
		{
			name: "lead time: the switch starts early", spec: scheduleSpec(berlin, 30*time.Minute, weekdays), now: "2026-11-30T07:30:00+01:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0,
			message: "window 0 (0 8 * * 1-5 for 12h, Europe/Berlin) open since 2026-11-30T08:00:00+01:00 as of 2026-11-30T08:00:00+01:00 (now + leadTime 30m)",
			next:    "night 2026-11-30T19:30:00+01:00",
		},
		{
			name: "lead time: just before the early switch", spec: scheduleSpec(berlin, 30*time.Minute, weekdays), now: "2026-11-30T07:29:59+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1,
			message: "no window open at 2026-11-30T07:59:59+01:00 (now + leadTime 30m); default layout night",
			next:    "day 2026-11-30T07:30:00+01:00",
		},
		{
			name: "lead time: the end is early too", spec: scheduleSpec(berlin, 30*time.Minute, weekdays), now: "2026-11-30T19:30:00+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
			next: "day 2026-12-01T07:30:00+01:00",
		},
		{
			name: "lead time does not shift an override", spec: scheduleSpec(berlin, 30*time.Minute, weekdays),
			modify: override("maint", "2026-11-30T12:00:00+01:00", ""), now: "2026-11-30T11:59:59+01:00",
			layout: "maint", reason: gpupoolv1.DesiredByOverride, window: -1, message: "~until 2026-11-30T12:00:00+01:00",
			next: "day 2026-11-30T12:00:00+01:00",
		},

		// Sparse crons: bounded search.
		{
			name: "29 February, in the window", spec: scheduleSpec("UTC", 0, win("leap", "0 0 29 2 *", 24*time.Hour, 0)), now: "2028-02-29T12:00:00Z",
			layout: "leap", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2028-02-29T00:00:00Z",
			next: "night 2028-03-01T00:00:00Z",
		},
		{
			name: "29 February, far away", spec: scheduleSpec("UTC", 0, win("leap", "0 0 29 2 *", 24*time.Hour, 0)), now: "2026-03-01T12:00:00Z",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
		},
		{
			name: "30 February never comes", spec: scheduleSpec("UTC", 0, win("never", "0 0 30 2 *", 24*time.Hour, 0)), now: "2026-03-01T12:00:00Z",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
		},

		// DST: starts on the wall clock, durations elapsed.
		{
			name: "spring forward: a start in the skipped hour opens at the jump",
			spec: scheduleSpec(berlin, 0, win("x", "30 2 * * *", time.Hour, 0)), now: "2026-03-29T03:00:00+02:00",
			layout: "x", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-03-29T03:00:00+02:00",
			next: "night 2026-03-29T04:00:00+02:00",
		},
		{
			name: "spring forward: before the jump",
			spec: scheduleSpec(berlin, 0, win("x", "30 2 * * *", time.Hour, 0)), now: "2026-03-29T01:59:59+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
			next: "x 2026-03-29T03:00:00+02:00",
		},
		{
			name: "spring forward: a 12h night lasts 12 real hours",
			spec: scheduleSpec(berlin, 0, win("late", "0 20 * * *", 12*time.Hour, 0)), now: "2026-03-29T08:30:00+02:00",
			layout: "late", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-03-28T20:00:00+01:00",
			next: "night 2026-03-29T09:00:00+02:00",
		},
		{
			name: "fall back: a 12h night lasts 12 real hours",
			spec: scheduleSpec(berlin, 0, win("late", "0 20 * * *", 12*time.Hour, 0)), now: "2026-10-25T06:59:00+01:00",
			layout: "late", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-10-24T20:00:00+02:00",
			next: "night 2026-10-25T07:00:00+01:00",
		},
		{
			name: "fall back: a start in the repeated hour happens once",
			spec: scheduleSpec(berlin, 0, win("x", "30 2 * * *", 30*time.Minute, 0)), now: "2026-10-25T02:45:00+01:00",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
			next: "x 2026-10-26T02:30:00+01:00",
		},
		{
			name: "fall back: the first pass",
			spec: scheduleSpec(berlin, 0, win("x", "30 2 * * *", 30*time.Minute, 0)), now: "2026-10-25T02:45:00+02:00",
			layout: "x", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-10-25T02:30:00+02:00",
			// 30 minutes later the clock shows 02:00 again.
			next: "night 2026-10-25T02:00:00+01:00",
		},
		{
			name: "New York fall back: a 12h night",
			spec: scheduleSpec("America/New_York", 0, win("late", "0 20 * * *", 12*time.Hour, 0)), now: "2026-10-31T21:00:00-04:00",
			layout: "late", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-10-31T20:00:00-04:00",
			next: "night 2026-11-01T07:00:00-05:00",
		},
		{
			name: "Lord Howe spring forward: 08:00 opens (robfig misses it)",
			spec: scheduleSpec("Australia/Lord_Howe", 0, win("day", "0 8 * * *", 10*time.Hour, 0)), now: "2026-10-04T08:30:00+11:00",
			layout: "day", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-10-04T08:00:00+11:00",
			next: "night 2026-10-04T18:00:00+11:00",
		},
		{
			name: "Lord Howe: a night across the 30-minute shift",
			spec: scheduleSpec("Australia/Lord_Howe", 0, win("late", "0 20 * * *", 12*time.Hour, 0)), now: "2026-10-03T21:00:00+10:30",
			layout: "late", reason: gpupoolv1.DesiredBySchedule, window: 0, message: "~open since 2026-10-03T20:00:00+10:30",
			next: "night 2026-10-04T08:30:00+11:00",
		},
		{
			name: "Lord Howe fall back: 01:45 once",
			spec: scheduleSpec("Australia/Lord_Howe", 0, win("x", "45 1 * * *", 10*time.Minute, 0)), now: "2026-04-05T01:50:00+10:30",
			layout: "night", reason: gpupoolv1.DesiredByDefault, window: -1, message: "~no window open",
			next: "x 2026-04-06T01:45:00+10:30",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec.DeepCopy()
			if tc.modify != nil {
				tc.modify(spec)
			}
			got, err := Desired(spec, mustTime(t, tc.now))
			if err != nil {
				t.Fatal(err)
			}
			if got.Layout != tc.layout || got.Reason != tc.reason || got.Window != tc.window {
				t.Errorf("Desired = %s, %s, window %d; want %s, %s, window %d", got.Layout, got.Reason, got.Window, tc.layout, tc.reason, tc.window)
			}
			if sub, ok := strings.CutPrefix(tc.message, "~"); ok {
				if !strings.Contains(got.Message, sub) {
					t.Errorf("message %q does not contain %q", got.Message, sub)
				}
			} else if got.Message != tc.message {
				t.Errorf("message\n got %q\nwant %q", got.Message, tc.message)
			}
			var next string
			if got.Next != nil {
				loc := time.UTC
				if spec.Schedule != nil && spec.Schedule.TimeZone != "" {
					loc = mustLoad(t, spec.Schedule.TimeZone)
				}
				next = got.Next.Layout + " " + got.Next.At.In(loc).Format(time.RFC3339)
			}
			if next != tc.next {
				t.Errorf("next = %q, want %q", next, tc.next)
			}
		})
	}
}

// TestDesiredNextIsConsistent checks the boundary against Desired itself: just before
// Next.At the layout is the current one, at Next.At it is Next.Layout, and a sample of
// instants in between agree with the current one.
func TestDesiredNextIsConsistent(t *testing.T) {
	spec := scheduleSpec("Europe/Berlin", 20*time.Minute,
		win("day", "0 8 * * 1-5", 12*time.Hour, 0),
		win("batch", "30 12 * * 1,3", 2*time.Hour, 2),
		win("day", "0 9 * * 6", 3*time.Hour, 0),
		win("late", "*/45 22-23 * * *", 50*time.Minute, 1),
		win("x", "30 2 * * *", 90*time.Minute, 3))
	now := mustTime(t, "2026-03-20T00:00:00+01:00")
	end := mustTime(t, "2026-04-10T00:00:00+02:00")
	transitions := 0
	for now.Before(end) {
		d, err := Desired(spec, now)
		if err != nil {
			t.Fatal(err)
		}
		if d.Next == nil {
			t.Fatalf("at %s: no next boundary", now)
		}
		if !d.Next.At.After(now) {
			t.Fatalf("at %s: next boundary %s is not in the future", now, d.Next.At)
		}
		for probe := now; probe.Before(d.Next.At); probe = probe.Add(13 * time.Minute) {
			if p, _ := Desired(spec, probe); p.Layout != d.Layout {
				t.Fatalf("at %s: layout %s until %s, but at %s it is %s", now, d.Layout, d.Next.At, probe, p.Layout)
			}
		}
		before, _ := Desired(spec, d.Next.At.Add(-time.Second))
		at, _ := Desired(spec, d.Next.At)
		if before.Layout != d.Layout || at.Layout != d.Next.Layout {
			t.Fatalf("at %s: boundary %s -> %s at %s, but Desired gives %s then %s", now, d.Layout, d.Next.Layout, d.Next.At, before.Layout, at.Layout)
		}
		now = d.Next.At
		transitions++
	}
	if transitions < 40 {
		t.Errorf("only %d transitions in three weeks", transitions)
	}
}

func TestDesiredErrors(t *testing.T) {
	tests := []struct {
		name string
		spec *gpupoolv1.GPUPoolProfileSpec
		want string
	}{
		{"unknown time zone", scheduleSpec("Mars/Olympus_Mons", 0), `schedule.timeZone "Mars/Olympus_Mons" is not a known IANA time zone`},
		{"local time zone", scheduleSpec("Local", 0), `schedule.timeZone "Local" is not allowed`},
		{"bad cron", scheduleSpec("UTC", 0, win("day", "0 8 * *", time.Hour, 0)), `schedule.windows[0].start: cron expression "0 8 * *" does not parse`},
		{"cron with a time zone", scheduleSpec("UTC", 0, win("day", "CRON_TZ=UTC 0 8 * * *", time.Hour, 0)), `schedule.windows[0].start: cron expression "CRON_TZ=UTC 0 8 * * *" must not carry a time zone`},
		{"zero duration", scheduleSpec("UTC", 0, win("day", "0 8 * * *", 0, 0)), `schedule.windows[0].duration 0s must be positive`},
		{"negative lead time", scheduleSpec("UTC", -time.Minute), `schedule.leadTime -1m0s must not be negative`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Desired(tc.spec, mustTime(t, "2026-11-30T09:00:00Z"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
