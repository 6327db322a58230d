package testclock

import (
	"testing"
	"time"
)

func TestWeekly(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	def, err := time.Parse(time.RFC3339, Default)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		base string
		wd   time.Weekday
		hh   int
		want string
	}{
		// The default is a Monday, 07:00 in Berlin: itself.
		{Default, time.Monday, 7, "2026-11-30T07:00:00+01:00"},
		{Default, time.Monday, 10, "2026-11-30T10:00:00+01:00"},
		// A minute late: the next Monday.
		{"2026-11-30T07:01:00+01:00", time.Monday, 7, "2026-12-07T07:00:00+01:00"},
		// A Saturday in summer: the Monday after, in CEST.
		{"2031-07-12T12:00:00Z", time.Monday, 7, "2031-07-14T07:00:00+02:00"},
		// The week of the spring change (Sunday 29 March 2026) and the one before it
		// (whose eight days reach that Sunday) are skipped.
		{"2026-03-20T00:00:00Z", time.Monday, 7, "2026-03-30T07:00:00+02:00"},
		// Autumn (25 October 2026): likewise.
		{"2026-10-17T00:00:00Z", time.Monday, 7, "2026-10-26T07:00:00+01:00"},
	}
	for _, c := range cases {
		base, err := time.Parse(time.RFC3339, c.base)
		if err != nil {
			t.Fatal(err)
		}
		got := weekly(base, c.wd, c.hh, 0, berlin)
		if got.Format(time.RFC3339) != c.want {
			t.Errorf("weekly(%s, %s %02d:00) = %s, want %s", c.base, c.wd, c.hh, got.Format(time.RFC3339), c.want)
		}
	}
	// Every answer, for bases over several years, is the weekday and hour asked, not
	// before the base, in a week of one offset, and within 3 weeks of the base.
	for at := def.AddDate(-2, 0, 0); at.Before(def.AddDate(10, 0, 0)); at = at.Add(61 * time.Hour) {
		got := weekly(at, time.Monday, 7, 0, berlin)
		if got.Weekday() != time.Monday || got.Hour() != 7 || got.Before(at) || got.Sub(at) > 21*24*time.Hour ||
			got.Add(12*time.Hour+50*time.Minute).Hour() != 19 || got.Add(24*time.Hour+50*time.Minute).Hour() != 7 {
			t.Fatalf("weekly(%s) = %s", at, got)
		}
	}
}

func TestBaseReadsTheEnvironment(t *testing.T) {
	t.Setenv(Env, "2031-03-15T07:00:00+01:00")
	if got := Base().Format(time.RFC3339); got != "2031-03-15T07:00:00+01:00" {
		t.Errorf("Base() = %s", got)
	}
	t.Setenv(Env, "")
	if got := Base().Format(time.RFC3339); got != Default {
		t.Errorf("Base() without %s = %s, want %s", Env, got, Default)
	}
	t.Setenv(Env, "tomorrow")
	defer func() {
		if recover() == nil {
			t.Error("a bad base did not panic")
		}
	}()
	Base()
}
