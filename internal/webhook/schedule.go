package webhook

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/cronspec"
)

// validateSchedule checks the time zone and every window: a known layout, a start that
// parses and fires, a positive duration.
func validateSchedule(sp *field.Path, s *gpupoolv1.Schedule, known func(*field.Path, string) *field.Error) field.ErrorList {
	var errs field.ErrorList
	if s.TimeZone != "" {
		if _, err := time.LoadLocation(s.TimeZone); err != nil || s.TimeZone == "Local" {
			errs = append(errs, field.Invalid(sp.Child("timeZone"), shown(s.TimeZone),
				"is not a known IANA time zone; use a name such as UTC, Europe/Berlin or America/New_York"))
		}
	}
	if s.LeadTime != nil && s.LeadTime.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("leadTime"), s.LeadTime.Duration.String(), "must not be negative; write 0s or a duration such as 10m"))
	}
	if s.WarnAhead != nil && s.WarnAhead.Duration < 0 {
		errs = append(errs, field.Invalid(sp.Child("warnAhead"), s.WarnAhead.Duration.String(), "must be zero (no warning) or positive; write 0s or a duration such as 15m"))
	}
	for i, w := range s.Windows {
		wp := sp.Child("windows").Index(i)
		if e := known(wp.Child("layout"), w.Layout); e != nil {
			errs = append(errs, e)
		}
		if err := cronspec.Check(w.Start); err != nil {
			errs = append(errs, field.Invalid(wp.Child("start"), shown(w.Start), err.Error()))
		}
		if w.Duration.Duration <= 0 {
			errs = append(errs, field.Invalid(wp.Child("duration"), w.Duration.Duration.String(), "must be positive, such as 12h"))
		}
	}
	return errs
}

// scheduleWarnings are things that are allowed but probably not meant: a lead time that
// moves a window's layout entirely before the window, windows too short for a switch,
// an override that has already expired.
func scheduleWarnings(spec *gpupoolv1.GPUPoolProfileSpec, now time.Time) []string {
	var warns []string
	if s := spec.Schedule; s != nil {
		var lead time.Duration
		if s.LeadTime != nil {
			lead = s.LeadTime.Duration
		}
		for i, w := range s.Windows {
			d := w.Duration.Duration
			if d <= 0 {
				continue
			}
			if lead > d {
				warns = append(warns, fmt.Sprintf("spec.schedule.leadTime (%s) is longer than spec.schedule.windows[%d].duration (%s): layout %q is wanted from %s before each start until %s before it, so it is over before the window opens; shorten leadTime or lengthen the window",
					lead, i, d, w.Layout, lead, lead-d))
			}
			if d < time.Minute {
				warns = append(warns, fmt.Sprintf("spec.schedule.windows[%d].duration (%s) is shorter than a minute: the operator reacts in seconds at best and a switch takes minutes (drain, park, boot), so the window's layout may never run; write a duration of minutes or hours", i, d))
			}
		}
	}
	if o := spec.Override; o != nil && o.Until != nil && !now.Before(o.Until.Time) {
		warns = append(warns, fmt.Sprintf("spec.override.until (%s) is already past: the override has no effect and the schedule applies; remove the override or set until to a future time",
			o.Until.UTC().Format(time.RFC3339)))
	}
	return warns
}
