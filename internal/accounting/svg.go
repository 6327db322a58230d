package accounting

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The picture's geometry, in SVG user units.
const (
	svgWidth    = 1200
	svgLeft     = 140 // room for the lane names and the scale
	svgRight    = 20
	svgTop      = 70
	svgLaneH    = 120
	svgLaneGap  = 40
	svgBottom   = 40
	svgPlotW    = svgWidth - svgLeft - svgRight
	colorUsed   = "#2b8a3e"
	colorIdle   = "#ced4da"
	colorSwitch = "#f08c00"
)

// WriteSVG draws the report's timeline: one lane per layout, one column per hour, each
// column stacked from the bottom with what pods used of the layout (allocated), what it
// offered and nobody used (idle), and the capacity offline while switching to it; local
// midnights are marked with the day. The scale of every lane is the pool's largest hour,
// so lanes compare. Each column carries its figures as a tooltip (title) and as data-*
// attributes, so that the picture can be read back (the tests do).
func WriteSVG(w io.Writer, r Report) error {
	zone := Zone(r.TimeZone)
	var layouts []string
	var first, last time.Time
	peak := 0.0
	for _, h := range r.Hours {
		if !slices.Contains(layouts, h.Layout) {
			layouts = append(layouts, h.Layout)
		}
		if first.IsZero() || h.Start.Before(first) {
			first = h.Start
		}
		if h.Start.After(last) {
			last = h.Start
		}
		peak = math.Max(peak, h.Offered+h.Switching)
	}
	slices.Sort(layouts)
	n := 1
	if !first.IsZero() {
		n = int(last.Sub(first)/time.Hour) + 1
	}
	if peak <= 0 {
		peak = 1
	}
	height := svgTop + len(layouts)*(svgLaneH+svgLaneGap) + svgBottom
	colW := float64(svgPlotW) / float64(n)

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" font-weight="bold">GPU-hours of pool %s, %s to %s (%s)</text>`+"\n",
		svgLeft, esc(r.Pool), esc(r.From), esc(r.To), esc(r.TimeZone))
	t := r.Totals
	p := Precision(t.Offered)
	fmt.Fprintf(&b, `<text x="%d" y="44">offered %.*f, used %.*f (%.0f%%), idle %.*f, switching %.*f GPU-hours</text>`+"\n",
		svgLeft, p, t.Offered, p, t.Allocated, 100*t.Utilization(), p, t.Idle, p, t.Switching)
	legend := []struct{ name, color string }{{"used", colorUsed}, {"idle", colorIdle}, {"switching", colorSwitch}}
	for i, l := range legend {
		x := svgWidth - svgRight - 300 + i*100
		fmt.Fprintf(&b, `<rect x="%d" y="32" width="12" height="12" fill="%s"/><text x="%d" y="43">%s</text>`+"\n", x, l.color, x+16, l.name)
	}
	if len(layouts) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d">no accounting in this period</text>`+"\n", svgLeft, svgTop+20)
	}
	byKey := map[HourKey]Figures{}
	for _, h := range r.Hours {
		byKey[HourKey{h.Start, h.Layout}] = h.Figures
	}
	for li, l := range layouts {
		top := svgTop + li*(svgLaneH+svgLaneGap)
		base := float64(top + svgLaneH)
		fmt.Fprintf(&b, `<g class="lane" data-layout="%s">`+"\n", esc(l))
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", top+svgLaneH/2, esc(l))
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" fill="#666">%.*f GPU</text>`+"\n", svgLeft-6, top+10, Precision(peak), peak)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#888"/>`+"\n", svgLeft, base, svgWidth-svgRight, base)
		for i := range n {
			start := first.Add(time.Duration(i) * time.Hour)
			f, ok := byKey[HourKey{start, l}]
			if !ok {
				continue
			}
			x := float64(svgLeft) + float64(i)*colW
			y := base
			idle := math.Max(f.Offered-f.Allocated, 0)
			fmt.Fprintf(&b, `<g class="hour" data-start="%s" data-offered="%.3f" data-allocated="%.3f" data-switching="%.3f"><title>%s %s: offered %.2f, used %.2f, switching %.2f GPU-hours</title>`,
				start.UTC().Format(time.RFC3339), f.Offered, f.Allocated, f.Switching, esc(l), start.In(zone).Format("Mon 2006-01-02 15:04"), f.Offered, f.Allocated, f.Switching)
			for _, part := range []struct {
				class, color string
				v            float64
			}{{"used", colorUsed, math.Min(f.Allocated, f.Offered)}, {"idle", colorIdle, idle}, {"switching", colorSwitch, f.Switching}} {
				if part.v <= 0 {
					continue
				}
				h := part.v / peak * svgLaneH
				y -= h
				fmt.Fprintf(&b, `<rect class="%s" x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="%s"/>`, part.class, x, y, colW, h, part.color)
			}
			b.WriteString("</g>\n")
		}
		b.WriteString("</g>\n")
	}
	// Local midnights, with the day they begin.
	bottom := svgTop + len(layouts)*(svgLaneH+svgLaneGap) - svgLaneGap
	for i := range n {
		start := first.Add(time.Duration(i) * time.Hour).In(zone)
		if start.Hour() != 0 {
			continue
		}
		x := float64(svgLeft) + float64(i)*colW
		fmt.Fprintf(&b, `<line class="midnight" x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#999" stroke-dasharray="3,3"/>`, x, svgTop-6, x, bottom)
		fmt.Fprintf(&b, `<text class="day" x="%.2f" y="%d">%s</text>`+"\n", x+3, bottom+16, start.Format("Mon 01-02"))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string { return html.EscapeString(s) }
