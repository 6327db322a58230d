// Package cronspec parses the 5-field cron expressions of schedule windows. Admission and
// the planner share it, so whatever admission accepts the planner can evaluate.
package cronspec

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// MaxLength is the longest expression admission accepts. Five fields with lists and
// ranges fit easily; anything longer is a mistake, and quoting it back would make a
// message of kilobytes.
const MaxLength = 128

// Parse parses a 5-field cron expression (minute hour day-of-month month day-of-week).
// Time zones come from schedule.timeZone, so CRON_TZ= and TZ= prefixes are refused, as
// are descriptors such as @daily.
func Parse(expr string) (cron.Schedule, error) {
	s, err := parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron expression %q %w", expr, err)
	}
	return s, nil
}

// parse is Parse with errors that do not repeat the expression, for callers that quote
// it themselves.
func parse(expr string) (cron.Schedule, error) {
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, errors.New("must not carry a time zone; set schedule.timeZone instead")
	}
	if strings.HasPrefix(e, "@") {
		return nil, errors.New("is a descriptor, which is not supported; write 5 fields such as \"0 8 * * 1-5\"")
	}
	s, err := parser.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("does not parse (%w); write 5 fields: minute hour day-of-month month day-of-week, such as \"0 8 * * 1-5\"", err)
	}
	return s, nil
}

// neverBefore is where the search for a first start begins. robfig/cron looks five years
// ahead, which always holds a 29 February; a fixed instant keeps admission deterministic.
var neverBefore = time.Date(2001, time.January, 1, 0, 0, 0, 0, time.UTC)

// Check is what admission demands of a window's start beyond Parse. Its errors do not
// repeat the expression (the caller quotes it, cut): an expression longer than
// MaxLength; '?' in the minute or hour field, which robfig/cron reads as "every"
// ("? 7 * * 1-5" would open the window every minute from 07:00 to 07:59); and an
// expression that matches no date at all (30 February, 31 April), whose window would
// never open.
func Check(expr string) error {
	if len(expr) > MaxLength {
		return fmt.Errorf("is %d characters long; a 5-field cron expression is at most %d, such as \"0 8 * * 1-5\"", len(expr), MaxLength)
	}
	if f := strings.Fields(expr); len(f) == 5 {
		if strings.Contains(f[0], "?") {
			return errors.New("has '?' in the minute field, which robfig/cron reads as every minute (\"? 7 * * 1-5\" starts the window every minute from 07:00 to 07:59); write a number such as 0, or * if you mean every minute")
		}
		if strings.Contains(f[1], "?") {
			return errors.New("has '?' in the hour field, which robfig/cron reads as every hour (\"0 ? * * *\" starts the window at minute 0 of every hour); write a number such as 8, or * if you mean every hour")
		}
	}
	s, err := parse(expr)
	if err != nil {
		return err
	}
	if s.Next(neverBefore).IsZero() {
		return errors.New("matches no date (such as 30 February or 31 April), so the window would never open; fix the day-of-month or the month")
	}
	return nil
}
