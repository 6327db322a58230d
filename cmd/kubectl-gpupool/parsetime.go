package main

import (
	"fmt"
	"time"
)

// timeFormats says, in a flag's help, what parseTime accepts.
const timeFormats = "RFC 3339 (2026-12-01T18:00:00+01:00), or 'YYYY-MM-DD HH:MM' in the zone shown (--tz; default: the pool's schedule.timeZone)"

// wallClockLayouts are the wall-clock forms parseTime reads in the screen's zone.
var wallClockLayouts = []string{"2006-01-02 15:04", "2006-01-02T15:04"}

// parseTime reads the value of a time flag (switch --until, plan --at, timeline --from),
// so that all of them take the same forms: RFC 3339, or a wall-clock time in loc, the
// zone the screen shows times in, so that a time copied from the screen means that time.
func parseTime(flag, s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range wallClockLayouts {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q: want RFC 3339 (2026-12-01T18:00:00+01:00) or 'YYYY-MM-DD HH:MM' in %s", flag, s, loc)
}
