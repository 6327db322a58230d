// Package testclock is the one knob that moves the test suites' dates.
//
// Every harness that runs the operator on a fake clock (the controllers' suite, the
// kubectl plugin's, the webhook's) takes its base date from Base, so that
//
//	make test TEST_CLOCK_BASE=2031-03-15T07:00:00+01:00
//
// runs the whole suite on another date. The default is a fixed date, so that runs are
// reproducible; nothing in a test may depend on the base lining up with the API
// server's or vgpusim's clock, which keep the real time.
package testclock

import (
	"fmt"
	"os"
	"time"
)

// Env is the environment variable that moves the base date (RFC 3339).
const Env = "TEST_CLOCK_BASE"

// Default is the base date when Env is unset: Monday 30 November 2026, 07:00 in Berlin.
const Default = "2026-11-30T07:00:00+01:00"

// Base is the instant the suites' fake clocks start from: Env, or Default.
func Base() time.Time {
	v := os.Getenv(Env)
	if v == "" {
		v = Default
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v; write an RFC 3339 time such as %s", Env, v, err, Default))
	}
	return t
}

// Weekly is the first hh:mm on weekday wd in loc at or after Base, in a week whose UTC
// offset does not change from that Monday 00:00 to the Monday 00:00 eight days later, so
// that a test that adds hours to it lands on the wall-clock times its schedule expects.
// (A week with a daylight-saving change is skipped; the planner's own tests cover DST.)
func Weekly(wd time.Weekday, hh, mm int, loc *time.Location) time.Time {
	return weekly(Base(), wd, hh, mm, loc)
}

func weekly(base time.Time, wd time.Weekday, hh, mm int, loc *time.Location) time.Time {
	b := base.In(loc)
	day := time.Date(b.Year(), b.Month(), b.Day(), 0, 0, 0, 0, loc)
	for i := 0; i < 400; i++ { // a year has at most two offset changes: bounded
		at := time.Date(day.Year(), day.Month(), day.Day()+i, hh, mm, 0, 0, loc)
		if at.Weekday() != wd || at.Before(base) || !steadyWeek(at, loc) {
			continue
		}
		return at
	}
	panic(fmt.Sprintf("testclock: no steady week after %s in %s", base, loc))
}

// steadyWeek tells whether loc keeps one UTC offset from the Monday 00:00 of t's week
// to the Monday 00:00 eight days after it, checked hour by hour.
func steadyWeek(t time.Time, loc *time.Location) bool {
	back := (int(t.Weekday()) + 6) % 7 // days since Monday
	monday := time.Date(t.Year(), t.Month(), t.Day()-back, 0, 0, 0, 0, loc)
	_, off := monday.Zone()
	for h := 0; h <= 8*24; h++ {
		if _, o := monday.Add(time.Duration(h) * time.Hour).Zone(); o != off {
			return false
		}
	}
	return true
}
