package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

var newYork = func() *time.Location {
	l, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	return l
}()

// The zones' abbreviations, as times show them.
var berlinAbbrev, newYorkAbbrev = regexp.MustCompile(`\bCES?T\b`), regexp.MustCompile(`\bE[SD]T\b`)

// squeeze writes every run of spaces as one, so that tests do not depend on the
// tables' column widths.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// TestScreenText: the operator's RFC 3339 timestamps are shown in the screen's zone with
// their distance from now; anything else in the message is left as it is.
func TestScreenText(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 28, 0, 0, time.UTC)
	sc := screen{loc: newYork, source: zoneFromFlag, now: now}
	for _, c := range []struct{ in, want string }{
		{"no time here", "no time here"},
		{"override to layout night until 2026-12-01T22:28:00+01:00: driver update",
			"override to layout night until Tue 2026-12-01 16:28 EST (in 1h): driver update"},
		{"window 0 open since 2026-12-01T08:00:00+01:00 as of 2026-12-01T21:38:00+01:00 (now + leadTime 10m)",
			"window 0 open since Tue 2026-12-01 02:00 EST (13h28m ago) as of Tue 2026-12-01 15:38 EST (in 10m) (now + leadTime 10m)"},
		{"at 2026-12-01T20:28:00Z and 2026-12-02T01:28:00.5-05:00", "at Tue 2026-12-01 15:28 EST (now) and Wed 2026-12-02 01:28 EST (in 10h)"},
		// Not a time: left alone.
		{"id 2026-13-45T99:00:00Z", "id 2026-13-45T99:00:00Z"},
		{"night-20261201-202800", "night-20261201-202800"},
	} {
		if got := sc.text(c.in); got != c.want {
			t.Errorf("text(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
	if got := rfc3339In("until 2026-12-01T22:28:56+01:00.", time.UTC); got != "until 2026-12-01T21:28:56Z." {
		t.Errorf("rfc3339In: %q", got)
	}
}

// TestScreenFor: --tz wins; else the pools' zone when they share one (UTC for a pool
// without a schedule, as the operator reads it); else the local zone.
func TestScreenFor(t *testing.T) {
	spec := func(tz string) *gpupoolv1.GPUPoolProfileSpec {
		return &gpupoolv1.GPUPoolProfileSpec{Schedule: &gpupoolv1.Schedule{TimeZone: tz}}
	}
	for _, c := range []struct {
		name, tz   string
		specs      []*gpupoolv1.GPUPoolProfileSpec
		zone, from string
	}{
		{"flag", "America/New_York", []*gpupoolv1.GPUPoolProfileSpec{spec("Europe/Berlin")}, "America/New_York", zoneFromFlag},
		{"pool", "", []*gpupoolv1.GPUPoolProfileSpec{spec("Europe/Berlin")}, "Europe/Berlin", zoneFromPool},
		{"pools of one zone", "", []*gpupoolv1.GPUPoolProfileSpec{spec("Europe/Berlin"), spec("Europe/Berlin")}, "Europe/Berlin", zoneFromPools},
		{"no schedule", "", []*gpupoolv1.GPUPoolProfileSpec{{}}, "UTC", zoneFromPool},
		{"pools of two zones", "", []*gpupoolv1.GPUPoolProfileSpec{spec("Europe/Berlin"), spec("Asia/Tokyo")}, time.Local.String(), zoneFromLocal},
		{"no pool", "", nil, time.Local.String(), zoneFromLocal},
		{"zone unknown here", "", []*gpupoolv1.GPUPoolProfileSpec{spec("Mars/Olympus_Mons")}, time.Local.String(), zoneFromLocal},
	} {
		a := &app{tz: c.tz, now: func() time.Time { return mondayMorning }}
		sc, err := a.screenFor(c.specs...)
		if err != nil || sc.loc.String() != c.zone || sc.source != c.from || !sc.now.Equal(mondayMorning) {
			t.Errorf("%s: %v %s (%s), want %s (%s)", c.name, err, sc.loc, sc.source, c.zone, c.from)
		}
	}
	if _, err := (&app{tz: "Nowhere/Atlantis", now: time.Now}).screenFor(); err == nil || !strings.Contains(err.Error(), "--tz") {
		t.Errorf("an unknown --tz: %v", err)
	}
}

// TestOneZonePerScreen: with --tz, every time on the status, history, plan and timeline
// screens is in that zone, those of the operator's messages included; without it, the
// pool's schedule.timeZone; the header says which.
func TestOneZonePerScreen(t *testing.T) {
	w := newWorld(t, "tz-")
	w.create(w.pool())
	w.operate("day")
	w.ok("editor", "", []string{"switch", w.name, "night", "--for", "2h", "--reason", "driver update", "--yes", "--in-spec"})
	w.operate("night")

	until := mondayMorning.Add(2 * time.Hour)
	inNY := func(t time.Time) string { return when(t, newYork) + " (" + relative(t, w.clock.Now()) + ")" }
	screens := map[string][]string{
		"status": {"Times in: America/New_York (--tz)", "Wanted: night (override to layout night until " + inNY(until) + ": driver update)",
			"Override: night until " + inNY(until) + ": driver update", "Next: day at " + inNY(until)},
		"history": {"pool tz-lab, newest first, times in America/New_York (--tz):"},
		"plan":    {"next transition to day at " + inNY(until)},
	}
	for verb, wants := range screens {
		out := squeeze(w.ok("viewer", "", []string{verb, w.name, "--tz", "America/New_York", "-o", "wide"}))
		for _, s := range wants {
			if !strings.Contains(out, s) {
				t.Errorf("%s --tz America/New_York lacks %q:\n%s", verb, s, out)
			}
		}
		// The pool's zone (Europe/Berlin) and the operator's RFC 3339 do not appear.
		if berlinAbbrev.MatchString(out) || rfc3339.MatchString(out) {
			t.Errorf("%s --tz America/New_York shows a time in another zone:\n%s", verb, out)
		}
	}
	out := squeeze(w.ok("viewer", "", []string{"status", w.name}))
	for _, s := range []string{"Times in: Europe/Berlin (the pool's schedule.timeZone; --tz to change)", "until " + w.shownAt(until) + ": driver update"} {
		if !strings.Contains(out, s) {
			t.Errorf("status without --tz lacks %q:\n%s", s, out)
		}
	}
	if newYorkAbbrev.MatchString(out) || rfc3339.MatchString(out) {
		t.Errorf("status without --tz shows a time in another zone:\n%s", out)
	}

	// -o json keeps RFC 3339 for tools, in the zone asked for.
	var tl []timelineEntry
	w.must(json.Unmarshal([]byte(w.ok("viewer", "", []string{"timeline", w.name, "--days", "1", "--tz", "UTC", "-o", "json"})), &tl))
	if len(tl) == 0 || tl[0].From.Location().String() != "UTC" || !strings.Contains(tl[0].Why, until.UTC().Format(time.RFC3339)) {
		t.Errorf("timeline -o json in UTC: %+v", tl)
	}
}
