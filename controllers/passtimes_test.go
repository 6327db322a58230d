package controllers

import (
	"testing"
	"time"
)

// TestPassTimesString: the pass's log line lists its parts in the order they ran,
// rounded to the millisecond, and leaves out those under a millisecond; a preview's
// scope has none.
func TestPassTimesString(t *testing.T) {
	for _, c := range []struct {
		name  string
		parts []passPart
		want  string
	}{
		{"none", nil, ""},
		{"in order", []passPart{{"observe", 2100 * time.Millisecond}, {"observe:vcenter", 2 * time.Second}, {"act", 512 * time.Millisecond}},
			"observe=2.1s observe:vcenter=2s act=512ms"},
		{"under a millisecond left out", []passPart{{"desire", 900 * time.Microsecond}, {"decide", 31600 * time.Microsecond}, {"paused", 0}},
			"decide=32ms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := (&passTimes{parts: c.parts}).String(); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	var none *passTimes
	none.record("observe", time.Now()) // a preview's scope: the metric only
	if got := none.String(); got != "" {
		t.Errorf("nil: got %q", got)
	}
	pt := &passTimes{}
	pt.timed("act:states", func() {})
	if len(pt.parts) != 1 || pt.parts[0].name != "act:states" {
		t.Errorf("timed recorded %+v, want one part act:states", pt.parts)
	}
}
