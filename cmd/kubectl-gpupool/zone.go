package main

import (
	"fmt"
	"regexp"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// screen is the one zone a screen shows every time in, and the moment it is drawn: the
// plugin's own times and those inside the operator's messages alike, so that the same
// instant never appears in two zones on one screen.
type screen struct {
	loc *time.Location
	// source says where the zone comes from, for the header.
	source string
	now    time.Time
}

// Sources of the zone, as the header names them.
const (
	zoneFromFlag  = "--tz"
	zoneFromPool  = "the pool's schedule.timeZone; --tz to change"
	zoneFromPools = "the pools' schedule.timeZone; --tz to change"
	zoneFromLocal = "the local zone; --tz to change"
)

// screenFor picks the zone: --tz when given; else the zone the pools' schedules are
// written in, which is also the zone the operator writes its messages in, when they share
// one; else the local zone.
func (a *app) screenFor(specs ...*gpupoolv1.GPUPoolProfileSpec) (screen, error) {
	s := screen{now: a.now(), loc: time.Local, source: zoneFromLocal}
	if a.tz != "" {
		loc, err := time.LoadLocation(a.tz)
		if err != nil {
			return s, fmt.Errorf("--tz: %w", err)
		}
		s.loc, s.source = loc, zoneFromFlag
		return s, nil
	}
	zones := map[string]bool{}
	for _, spec := range specs {
		zones[poolZone(spec)] = true
	}
	if len(zones) != 1 {
		return s, nil
	}
	for z := range zones {
		// Note: a zone the plugin's time-zone database lacks (an old one, with the
		// operator's newer) falls back to the local zone rather than failing the verb.
		if loc, err := time.LoadLocation(z); err == nil {
			s.loc, s.source = loc, zoneFromPool
			if len(specs) > 1 {
				s.source = zoneFromPools
			}
		}
	}
	return s, nil
}

// poolZone is the zone the operator reads a pool's schedule in and writes its times in:
// UTC without one (the CRD's default, and plan.Desired's).
func poolZone(spec *gpupoolv1.GPUPoolProfileSpec) string {
	if spec == nil || spec.Schedule == nil || spec.Schedule.TimeZone == "" {
		return "UTC"
	}
	return spec.Schedule.TimeZone
}

// zone names the zone shown and why, for a header: "Europe/Berlin (--tz)".
func (s screen) zone() string {
	return fmt.Sprintf("%s (%s)", s.loc, s.source)
}

// when is t in the screen's zone, absolute only.
func (s screen) when(t time.Time) string { return when(t, s.loc) }

// at is t in the screen's zone with how far it is from now: "Mon 2026-12-01 21:28 CET
// (in 1h)".
func (s screen) at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return when(t, s.loc) + " (" + relative(t, s.now) + ")"
}

// rfc3339 matches the timestamps the operator writes into messages (plan.Desired's
// format: RFC 3339 in the pool's zone).
var rfc3339 = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})`)

// text re-renders the RFC 3339 timestamps in a message from status or the operator as
// the screen shows times, relative time included.
func (s screen) text(msg string) string {
	return rewriteTimes(msg, s.at)
}

// rfc3339In keeps a message's timestamps machine-readable (RFC 3339) but in loc, for
// -o json and yaml, whose times are in loc too.
func rfc3339In(msg string, loc *time.Location) string {
	return rewriteTimes(msg, func(t time.Time) string { return t.In(loc).Format(time.RFC3339) })
}

func rewriteTimes(msg string, render func(time.Time) string) string {
	return rfc3339.ReplaceAllStringFunc(msg, func(m string) string {
		t, err := time.Parse(time.RFC3339Nano, m)
		if err != nil {
			return m
		}
		return render(t)
	})
}
