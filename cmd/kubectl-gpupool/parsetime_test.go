package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseTime: the forms every time flag takes, read in the screen's zone.
func TestParseTime(t *testing.T) {
	want := time.Date(2026, 12, 1, 18, 0, 0, 0, berlin)
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"2026-12-01T18:00:00+01:00", true},
		{"2026-12-01T17:00:00Z", true},
		{"2026-12-01 18:00", true},
		{"2026-12-01T18:00", true},
		{"18:00", false},
		{"2026-12-01", false},
		{"tomorrow", false},
	} {
		got, err := parseTime("--at", tc.in, berlin)
		switch {
		case tc.ok && (err != nil || !got.Equal(want)):
			t.Errorf("%q: %v %v, want %v", tc.in, got, err, want)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), `--at "`+tc.in+`"`) || !strings.Contains(err.Error(), "in Europe/Berlin")):
			t.Errorf("%q: %v, want an error naming --at, the value and the zone", tc.in, err)
		}
	}
}

// TestTimeFlagsTakeTheSameForms: switch --until, plan --at and timeline --from take the
// same forms (RFC 3339, or a wall-clock time in the zone shown) and mean the same instant.
func TestTimeFlagsTakeTheSameForms(t *testing.T) {
	w := newWorld(t, "tf-")
	w.create(w.pool())
	w.operate("day")
	at := mondayMorning.Add(11 * time.Hour) // 21:00 in Berlin: night is wanted
	local := at.In(berlin)
	for _, in := range []string{local.Format(time.RFC3339), at.UTC().Format(time.RFC3339), local.Format("2006-01-02 15:04"), local.Format("2006-01-02T15:04")} {
		// Answered no: nothing changes, and the override shown ends at that instant.
		out, err := w.run("editor", "n\n", "switch", w.name, "night", "--until", in)
		if exitCode(err) != exitDeclined || !strings.Contains(out, "until "+w.shownAt(at)) {
			t.Errorf("switch --until %q: %v, want the override until %s:\n%s", in, err, w.shownAt(at), out)
		}
		w.ok("admin", "", []string{"plan", w.name, "--live", "--at", in}, "pool "+w.name+" at "+w.shownAt(at), "wants night")
		w.ok("viewer", "", []string{"timeline", w.name, "--from", in, "--days", "1"}, "1 day from "+w.shownAt(at))
	}
	for _, flag := range [][]string{{"switch", w.name, "night", "--until"}, {"plan", w.name, "--live", "--at"}, {"timeline", w.name, "--from"}} {
		name := flag[len(flag)-1]
		if out, err := w.run("admin", "", append(flag, "21:00")...); err == nil || !strings.Contains(err.Error(), name+` "21:00": want RFC 3339`) {
			t.Errorf("%v 21:00: %v, want the forms %s takes\n%s", flag, err, name, out)
		}
	}
	if w.get().Spec.Override != nil {
		t.Error("an override was set")
	}
}
