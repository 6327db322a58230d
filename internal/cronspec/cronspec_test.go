package cronspec

import (
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"0 8 * * 1-5", "0 0 29 2 *", "0 8 ? * 1-5", "0 8 * ? *", "*/15 * * * *", "0 0 30 2 1", "30 6 */2 * 1"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for expr, want := range map[string]string{
		"0 0 30 2 *":                   "matches no date",
		"0 0 31 4,6,9,11 *":            "matches no date",
		"? 7 * * 1-5":                  "'?' in the minute field",
		"0 ? * * *":                    "'?' in the hour field",
		"0 0 8 * * 1-5":                "does not parse",
		"TZ=UTC 0 8 * * *":             "time zone",
		"@hourly":                      "descriptor",
		strings.Repeat("1,", 100) + "": "at most 128",
	} {
		err := Check(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check(%q) = %v, want an error about %q", expr, err, want)
		}
		if err != nil && len(expr) > 20 && strings.Contains(err.Error(), expr) {
			t.Errorf("Check(%q) repeats the expression: %v", expr, err)
		}
	}
}

// The day fields, as docs/schedule.md says: robfig/cron counts a day field as restricted
// unless it is exactly * or ?, so */2 in day-of-month is restricted, and with a
// restricted day-of-week a day matching either fires (classic cron would count */2 as
// unrestricted and fire only on the weekday). '?' is * in every field.
func TestDayFieldRules(t *testing.T) {
	from := time.Date(2026, time.June, 1, 0, 0, 0, 0, time.Local) // a Monday; Parse reads in Local
	starts := func(expr string, n int) []string {
		s, err := Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for at := from; len(out) < n; {
			at = s.Next(at)
			out = append(out, at.Format("Mon 02"))
		}
		return out
	}
	// */2 in day-of-month with Monday: odd days OR Mondays.
	got := strings.Join(starts("0 8 */2 * 1", 6), ",")
	if want := "Mon 01,Wed 03,Fri 05,Sun 07,Mon 08,Tue 09"; got != want {
		t.Errorf("0 8 */2 * 1 starts on %s, want %s (robfig counts */2 as restricted)", got, want)
	}
	// * in day-of-month: Mondays only.
	if got, want := strings.Join(starts("0 8 * * 1", 2), ","), "Mon 01,Mon 08"; got != want {
		t.Errorf("0 8 * * 1 starts on %s, want %s", got, want)
	}
	// ? in day-of-month is *: Mondays only.
	if got, want := strings.Join(starts("0 8 ? * 1", 2), ","), "Mon 01,Mon 08"; got != want {
		t.Errorf("0 8 ? * 1 starts on %s, want %s", got, want)
	}
}
