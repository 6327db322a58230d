package accounting

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// minIdleRun is the shortest run of unused hours worth a recommendation: shorter gaps
// between jobs are what a shared pool is for.
const minIdleRun = 6

// maxRecommendations bounds what a report recommends.
const maxRecommendations = 3

// idleRun is a layout's run of consecutive hours offered and not used.
type idleRun struct {
	layout     string
	start      time.Time
	hours      int
	gpuHours   float64
	recurrence int
}

// Recommend says what the report's data supports changing: the longest runs of hours in
// which a layout was offered and no pod used it (grouped when they recur on the same
// weekday and hour: "every Saturday 00:00 for 24h"), and switching that took a large
// share of the capacity offline. It says nothing when the data shows nothing.
func Recommend(r Report) []string {
	zone := Zone(r.TimeZone)
	var out []string
	runs := idleRuns(r.Hours)
	// Runs that start on the same weekday and hour and last as long are one habit.
	type habit struct {
		layout string
		day    time.Weekday
		hour   int
		hours  int
	}
	byHabit := map[habit]*idleRun{}
	var order []habit
	for _, run := range runs {
		lt := run.start.In(zone)
		h := habit{run.layout, lt.Weekday(), lt.Hour(), run.hours}
		if byHabit[h] == nil {
			c := run
			byHabit[h] = &c
			order = append(order, h)
			continue
		}
		byHabit[h].recurrence++
		byHabit[h].gpuHours += run.gpuHours
	}
	slices.SortStableFunc(order, func(a, b habit) int { return cmp.Compare(byHabit[b].gpuHours, byHabit[a].gpuHours) })
	for _, h := range order[:min(len(order), maxRecommendations)] {
		run := byHabit[h]
		lt := run.start.In(zone)
		end := run.start.Add(time.Duration(run.hours) * time.Hour).In(zone)
		var when string
		if run.recurrence > 1 {
			when = fmt.Sprintf("every %s from %s for %dh (%d times)", lt.Weekday(), lt.Format("15:04"), run.hours, run.recurrence)
		} else {
			when = fmt.Sprintf("%s to %s (%s)", lt.Format("Mon 2006-01-02 15:04"), end.Format("Mon 2006-01-02 15:04"), zone)
		}
		out = append(out, fmt.Sprintf("layout %s offered %.1f GPU-hours that no pod used, %s: a window or a demand rule (spec.demand, action Skip) there would free those GPUs or let another layout serve",
			run.layout, run.gpuHours, when))
	}
	if t := r.Totals; t.Offered > 0 && t.Switching > 0.1*t.Offered {
		out = append(out, fmt.Sprintf("switching took %.1f GPU-hours offline, %.0f%% of what was offered: fewer switches (demand.cooldown, fewer windows) or a faster switch (parking: Suspend, maxParallel) would return them",
			t.Switching, 100*t.Switching/t.Offered))
	}
	return out
}

// idleRuns finds, per layout, the runs of at least minIdleRun consecutive hours in which
// it was offered and nothing of it allocated.
func idleRuns(hours []HourFigures) []idleRun {
	byLayout := map[string][]HourFigures{}
	var layouts []string
	for _, h := range hours {
		if _, ok := byLayout[h.Layout]; !ok {
			layouts = append(layouts, h.Layout)
		}
		byLayout[h.Layout] = append(byLayout[h.Layout], h)
	}
	slices.Sort(layouts)
	var out []idleRun
	for _, l := range layouts {
		hs := byLayout[l]
		slices.SortFunc(hs, func(a, b HourFigures) int { return a.Start.Compare(b.Start) })
		var cur *idleRun
		flush := func() {
			if cur != nil && cur.hours >= minIdleRun {
				out = append(out, *cur)
			}
			cur = nil
		}
		for _, h := range hs {
			unused := h.Offered > 0.5 && h.Allocated < 0.01*h.Offered // at least half a GPU for most of the hour
			switch {
			case !unused:
				flush()
			case cur != nil && h.Start.Equal(cur.start.Add(time.Duration(cur.hours)*time.Hour)):
				cur.hours++
				cur.gpuHours += h.Offered
			default:
				flush()
				cur = &idleRun{layout: l, start: h.Start, hours: 1, gpuHours: h.Offered, recurrence: 1}
			}
		}
		flush()
	}
	return out
}
