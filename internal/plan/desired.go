package plan

import (
	"errors"
	"fmt"
	"strings"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// The search for the next boundary looks this far ahead and handles at most this many
// window openings and closings (restarts of an open window included). 35 days covers
// weekly and monthly schedules; the event budget only runs out for windows that restart
// every few minutes. When the search gives up, Decision.Next is nil and the controller
// falls back to its periodic resync.
const (
	boundaryHorizon   = 35 * 24 * time.Hour
	maxBoundaryEvents = 4096
)

// Decision is the layout the pool should have at an instant, and why.
type Decision struct {
	// Layout is the wanted layout.
	Layout string
	// Reason is Override, Schedule or Default.
	Reason gpupoolv1.DesiredReason
	// Message says the same in words, for status and events.
	Message string
	// Window is the index of the schedule window that decided, -1 if none did.
	Window int
	// Next is the next time the wanted layout changes, nil if it does not change within
	// the search horizon (35 days) or ever.
	Next *Boundary
	// Count is, when Layout is a layout by count, how many GPUs it converts (its
	// convert.count, or the count demand sized it to: DecideCount); 0 otherwise. The
	// controller sets it once the world is observed.
	Count int
}

// Boundary is a future change of the wanted layout.
type Boundary struct {
	// Layout is the layout wanted from At on.
	Layout string
	// At is when Desired starts returning Layout: the window boundary minus
	// schedule.leadTime, or the override's expiry.
	At time.Time
}

// Desired returns the layout the pool should have at now.
//
// It is level-triggered: the answer depends only on the spec and now, never on what was
// decided before, so an operator that was down across one or many window boundaries
// converges on the right layout when it comes back; nothing is "missed".
//
//   - An override that has not expired (no until, or now < until) wins.
//   - Otherwise the schedule is read at now + schedule.leadTime, so that a switch starts
//     leadTime before its boundary. Window i is open at t when its most recent start
//     s <= t satisfies t < s + duration. Of the open windows the highest priority wins,
//     then the earliest in the list.
//   - Otherwise defaultLayout.
//
// Starts are wall-clock times in schedule.timeZone; durations are elapsed time. A start
// the clock skips (spring forward) happens at the jump; a start the clock shows twice
// (fall back) happens the first time. See docs/schedule.md.
//
// It returns an error only for a spec admission would reject: an unknown time zone, a
// cron expression that does not parse, a duration that is not positive.
func Desired(spec *gpupoolv1.GPUPoolProfileSpec, now time.Time) (Decision, error) {
	if spec == nil {
		return Decision{}, errors.New("plan: no spec")
	}
	s, err := compile(spec)
	if err != nil {
		return Decision{}, err
	}
	if o := spec.Override; o != nil && (o.Until == nil || now.Before(o.Until.Time)) {
		d := Decision{Layout: o.Layout, Reason: gpupoolv1.DesiredByOverride, Window: -1, Message: s.overrideMessage(o)}
		if o.Until != nil {
			// Note: the override is not shifted by leadTime; it ends at until exactly.
			d.Next = s.nextBoundary(spec.DefaultLayout, o.Until.Time, o.Layout, true)
		}
		return d, nil
	}

	at := now.Add(s.lead)
	d := Decision{Layout: spec.DefaultLayout, Reason: gpupoolv1.DesiredByDefault, Window: -1}
	open := make([]bool, len(s.windows))
	since := make([]time.Time, len(s.windows))
	for i := range s.windows {
		since[i], open[i] = s.windows[i].openedAt(at)
	}
	var winner *window
	if i := s.winner(open); i >= 0 {
		winner = &s.windows[i]
	}
	ahead := ""
	if s.lead > 0 {
		ahead = fmt.Sprintf(" (now + leadTime %s)", shortDuration(s.lead))
	}
	switch {
	case winner != nil:
		d.Layout, d.Reason, d.Window = winner.spec.Layout, gpupoolv1.DesiredBySchedule, winner.index
		d.Message = fmt.Sprintf("%s open since %s", winner, s.format(since[winner.index]))
		if s.lead > 0 {
			d.Message += fmt.Sprintf(" as of %s%s", s.format(at), ahead)
		}
	case len(s.windows) == 0:
		d.Message = fmt.Sprintf("no schedule windows; default layout %s", d.Layout)
	default:
		d.Message = fmt.Sprintf("no window open at %s%s; default layout %s", s.format(at), ahead, d.Layout)
	}
	if o := spec.Override; o != nil {
		d.Message += fmt.Sprintf("; override to layout %s expired at %s", o.Layout, s.format(o.Until.Time))
	}
	d.Next = s.nextBoundary(spec.DefaultLayout, now, d.Layout, false)
	return d, nil
}

// windowState is what the boundary search knows about a window: whether it is open, and
// when that must be looked at again (the end of the current start's interval if open,
// the next start if closed; zero for never).
type windowState struct {
	open  bool
	until time.Time
}

// stateAt returns w's state at t.
func (w *window) stateAt(t time.Time) windowState {
	if s, open := w.openedAt(t); open {
		return windowState{open: true, until: s.Add(w.duration)}
	}
	return windowState{until: w.next(t)}
}

// nextBoundary returns the first instant after from (at from too, if inclusive) at which
// the wanted layout, read off the schedule, is no longer current. from is real time; the
// schedule is read leadTime ahead of it.
//
// It sweeps through the windows' openings and closings in order, and reports only those
// that change the winning layout: a window taking over from another with the same layout,
// or a window restarting while it is open, is no boundary.
func (s *schedule) nextBoundary(defaultLayout string, from time.Time, current string, inclusive bool) *Boundary {
	x := from.Add(s.lead)
	states := make([]windowState, len(s.windows))
	for i := range s.windows {
		states[i] = s.windows[i].stateAt(x)
	}
	if l := s.winnerLayout(defaultLayout, states); inclusive && l != current {
		return &Boundary{Layout: l, At: from}
	}
	limit := x.Add(boundaryHorizon)
	for range maxBoundaryEvents {
		var t time.Time
		for _, st := range states {
			if !st.until.IsZero() && (t.IsZero() || st.until.Before(t)) {
				t = st.until
			}
		}
		if t.IsZero() || t.After(limit) {
			return nil
		}
		// Note: all windows that change at t change before the winner is looked at, so
		// one window closing as another with the same layout opens is no boundary.
		for i := range states {
			if states[i].until.Equal(t) {
				states[i] = s.windows[i].stateAt(t)
			}
		}
		if l := s.winnerLayout(defaultLayout, states); l != current {
			return &Boundary{Layout: l, At: t.Add(-s.lead)}
		}
	}
	return nil
}

// winnerLayout returns the layout of the winning open window, or the default layout.
func (s *schedule) winnerLayout(defaultLayout string, states []windowState) string {
	open := make([]bool, len(states))
	for i, st := range states {
		open[i] = st.open
	}
	if i := s.winner(open); i >= 0 {
		return s.windows[i].spec.Layout
	}
	return defaultLayout
}

// winner returns the index of the open window with the highest priority, the earliest
// of equals, or -1 when none is open.
func (s *schedule) winner(open []bool) int {
	best := -1
	for i, o := range open {
		if o && (best < 0 || s.windows[i].spec.Priority > s.windows[best].spec.Priority) {
			best = i
		}
	}
	return best
}

func (s *schedule) overrideMessage(o *gpupoolv1.Override) string {
	msg := fmt.Sprintf("override to layout %s without expiry", o.Layout)
	if o.Until != nil {
		msg = fmt.Sprintf("override to layout %s until %s", o.Layout, s.format(o.Until.Time))
	}
	if o.Reason != "" {
		msg += ": " + o.Reason
	}
	return msg
}

// format writes t in the schedule's time zone, which is how users wrote the windows.
func (s *schedule) format(t time.Time) string {
	return t.In(s.loc).Format(time.RFC3339)
}

// shortDuration writes d as users write it in specs: 12h rather than 12h0m0s.
func shortDuration(d time.Duration) string {
	str := d.String()
	if strings.HasSuffix(str, "m0s") {
		str = str[:len(str)-2]
	}
	if strings.HasSuffix(str, "h0m") {
		str = str[:len(str)-2]
	}
	return str
}
