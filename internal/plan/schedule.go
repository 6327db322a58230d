package plan

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/cronspec"
)

// maxWallClockSkips bounds the starts next passes over because their wall-clock time
// already happened: that only happens in the hour a clock is set back, which holds at
// most 60 starts of a cron with minute resolution per repeated hour. A day's worth leaves
// room for every zone in the tz database.
const maxWallClockSkips = 24 * 60

// maxStartWalk is how many starts lastStart steps through one by one before it bisects.
// Windows that start once a day or less often never get to bisecting.
const maxStartWalk = 8

// schedule is a spec's windows, compiled for repeated evaluation.
type schedule struct {
	loc     *time.Location
	lead    time.Duration
	windows []window
}

// window is one schedule window with its cron expression parsed.
type window struct {
	index    int
	spec     gpupoolv1.Window
	loc      *time.Location
	duration time.Duration
	// sched is evaluated on wall-clock times, not instants: see next.
	sched cron.Schedule
}

// zones are the time zones loaded so far, by name: loading one reads the zone database
// from disk, which was most of a decision's cost (every pass decides; a replay decides
// 60,480 times a week). Only zones that loaded are kept, so at most the database's.
var zones sync.Map

func loadZone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, loc)
	return loc, nil
}

// compile parses the spec's time zone, cron expressions and durations. Admission rejects
// bad values already; the errors here are for specs that got past it (older CRDs, tests).
func compile(spec *gpupoolv1.GPUPoolProfileSpec) (*schedule, error) {
	s := &schedule{loc: time.UTC}
	if spec.Schedule == nil {
		return s, nil
	}
	tz := spec.Schedule.TimeZone
	switch tz {
	case "", "UTC":
	case "Local":
		// Note: time.LoadLocation("Local") is the operator's own zone, which depends on
		// the image it runs in; a schedule must not.
		return nil, errors.New(`schedule.timeZone "Local" is not allowed: name an IANA time zone such as Europe/Berlin`)
	default:
		loc, err := loadZone(tz)
		if err != nil {
			return nil, fmt.Errorf("schedule.timeZone %q is not a known IANA time zone: %w", tz, err)
		}
		s.loc = loc
	}
	if lt := spec.Schedule.LeadTime; lt != nil {
		if lt.Duration < 0 {
			return nil, fmt.Errorf("schedule.leadTime %s must not be negative", lt.Duration)
		}
		s.lead = lt.Duration
	}
	for i, w := range spec.Schedule.Windows {
		sched, err := cronspec.Parse(w.Start)
		if err != nil {
			return nil, fmt.Errorf("schedule.windows[%d].start: %w", i, err)
		}
		if w.Duration.Duration <= 0 {
			return nil, fmt.Errorf("schedule.windows[%d].duration %s must be positive", i, w.Duration.Duration)
		}
		s.windows = append(s.windows, window{
			index:    i,
			spec:     w,
			loc:      s.loc,
			duration: w.Duration.Duration,
			sched:    onWallClock(sched),
		})
	}
	return s, nil
}

// onWallClock makes a parsed cron schedule compute in UTC. gpupool evaluates cron
// expressions on the wall clock of schedule.timeZone, written as a UTC time, because UTC
// has no daylight-saving transitions: robfig/cron's Next in a zone with transitions skips
// a start that falls into the hour the clock jumps over, fires twice in the hour it is set
// back, and in Australia/Lord_Howe (30-minute shift) misses every start at minutes 0-29
// for the rest of a transition day. next maps the wall-clock times back to instants.
func onWallClock(s cron.Schedule) cron.Schedule {
	if spec, ok := s.(*cron.SpecSchedule); ok {
		utc := *spec
		utc.Location = time.UTC
		return &utc
	}
	return s
}

// wallClock returns what a clock in loc shows at instant t, written as a UTC time.
func wallClock(t time.Time, loc *time.Location) time.Time {
	_, offset := t.In(loc).Zone()
	return t.UTC().Add(time.Duration(offset) * time.Second)
}

// firstInstant returns the first instant at which a clock in loc shows wall (a wall-clock
// time written as UTC). When the clock jumps over wall (spring forward), it returns the
// instant of the jump, the first instant after which wall has passed; when the clock
// shows wall twice (fall back), the first time.
func firstInstant(wall time.Time, loc *time.Location) time.Time {
	// The instants that show wall are wall minus an offset in force around them. Offsets
	// lie within -12h..+14h, so instants a day either side of wall bracket every such
	// instant and see the offsets in force before and after a transition near it.
	var first, latest time.Time
	for _, probe := range [...]time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, offset := wall.Add(probe).In(loc).Zone()
		t := wall.Add(-time.Duration(offset) * time.Second)
		if latest.IsZero() || t.After(latest) {
			latest = t
		}
		if wallClock(t, loc).Equal(wall) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	if !first.IsZero() {
		return first
	}
	// wall lies in a gap. The latest candidate lies just after the jump (by less than the
	// gap), in the zone period the jump starts.
	start, _ := latest.In(loc).ZoneBounds()
	if start.IsZero() {
		return latest
	}
	return start
}

// next returns the first start of w strictly after t, or the zero time when there is none
// within the five years robfig/cron searches.
//
// A start is the first instant at which the clock in schedule.timeZone shows a time that
// matches the cron expression; a matching time the clock skips starts the window at the
// jump. So every matching wall-clock time starts the window exactly once.
func (w *window) next(t time.Time) time.Time {
	wall := wallClock(t, w.loc)
	for range maxWallClockSkips {
		c := w.sched.Next(wall)
		if c.IsZero() {
			return time.Time{}
		}
		if s := firstInstant(c, w.loc); s.After(t) {
			return s
		}
		// Note: t is in the second pass of a repeated hour and c was shown in the first.
		wall = c
	}
	return time.Time{}
}

// lastStart returns the latest start of w in (lo, hi].
//
// robfig/cron only searches forward, so this asks next(lo) and then whether there are
// more starts up to hi: a few are walked, and for a dense cron (every minute for 30 days)
// it bisects on "is there a start in (x, hi]", which costs O(log((hi-lo)/1s)) calls to
// next however many starts the interval holds.
func (w *window) lastStart(lo, hi time.Time) (time.Time, bool) {
	s := w.next(lo)
	if s.IsZero() || s.After(hi) {
		return time.Time{}, false
	}
	for i := 0; ; i++ {
		n := w.next(s)
		if n.IsZero() || n.After(hi) {
			return s, true
		}
		if i == maxStartWalk {
			break
		}
		s = n
	}
	// Invariant: there is a start in (lo, hi], and none in (hi, hi].
	lo = s
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2)
		if n := w.next(mid); !n.IsZero() && !n.After(hi) {
			lo = mid
		} else {
			hi = mid
		}
	}
	// Starts fall on whole minutes or on zone transitions, which are whole seconds, so
	// the one start after lo is the latest.
	return w.next(lo), true
}

// openedAt returns the start that keeps w open at t: the latest start s <= t with
// t < s + duration. ok is false when w is closed at t.
func (w *window) openedAt(t time.Time) (s time.Time, ok bool) {
	return w.lastStart(t.Add(-w.duration), t)
}

// String describes the window for messages, such as
// "window 0 (0 8 * * 1-5 for 12h, Europe/Berlin)".
func (w *window) String() string {
	return fmt.Sprintf("window %d (%s for %s, %s)", w.index, w.spec.Start, shortDuration(w.duration), w.loc)
}

// DefaultWarnAhead is the scheduler warning horizon (TaintDrainingSoon) when neither
// schedule.warnAhead nor a positive schedule.leadTime is set.
const DefaultWarnAhead = 15 * time.Minute

// WarnAhead is how long before a scheduled switch starts its nodes are warned.
func WarnAhead(spec *gpupoolv1.GPUPoolProfileSpec) time.Duration {
	sc := spec.Schedule
	switch {
	case sc != nil && sc.WarnAhead != nil:
		return sc.WarnAhead.Duration
	case sc != nil && sc.LeadTime != nil && sc.LeadTime.Duration > 0:
		return sc.LeadTime.Duration
	}
	return DefaultWarnAhead
}
