// Package cronspec parses the 5-field cron expressions of schedule windows. Admission and
// the planner share it, so whatever admission accepts the planner can evaluate.
package cronspec

import (
	"fmt"
	"strings"

	"github.com/robfig/cron/v3"
)

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// Parse parses a 5-field cron expression (minute hour day-of-month month day-of-week).
// Time zones come from schedule.timeZone, so CRON_TZ= and TZ= prefixes are refused, as
// are descriptors such as @daily.
func Parse(expr string) (cron.Schedule, error) {
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, fmt.Errorf("cron expression %q must not carry a time zone; set schedule.timeZone instead", expr)
	}
	if strings.HasPrefix(e, "@") {
		return nil, fmt.Errorf("cron expression %q: descriptors are not supported; write 5 fields such as \"0 8 * * 1-5\"", expr)
	}
	s, err := parser.Parse(e)
	if err != nil {
		return nil, fmt.Errorf("cron expression %q does not parse (%w); write 5 fields: minute hour day-of-month month day-of-week, such as \"0 8 * * 1-5\"", expr, err)
	}
	return s, nil
}
