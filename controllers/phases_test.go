package controllers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRunPhases: phases run in order until one stops the pass or fails; the requeues of
// the phases that ran merge to the lowest non-zero one; an error names its phase and
// drops the requeue.
func TestRunPhases(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		phases  []outcome
		failAt  int // index of the phase that fails, -1 for none
		wantRan int
		want    time.Duration
	}{
		{"none asks", []outcome{{}, {}, {}}, -1, 3, 0},
		{"lowest non-zero", []outcome{{after: time.Minute}, {}, {after: 2 * time.Second}, {after: 5 * time.Second}}, -1, 4, 2 * time.Second},
		{"a stop ends the pass", []outcome{{after: time.Minute}, {after: 30 * time.Second, stop: true}, {after: time.Second}}, -1, 2, 30 * time.Second},
		{"a stop with no requeue keeps the earlier ones", []outcome{{after: time.Minute}, {stop: true}, {after: time.Second}}, -1, 2, time.Minute},
		{"the first stops", []outcome{{stop: true}, {after: time.Second}}, -1, 1, 0},
		{"an error ends the pass", []outcome{{after: time.Second}, {}, {after: time.Millisecond}}, 1, 2, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ran []string
			var phases []phase
			for i, o := range c.phases {
				name := "p" + string(rune('0'+i))
				phases = append(phases, phase{name: name, run: func(context.Context, *scope) (outcome, error) {
					ran = append(ran, name)
					if i == c.failAt {
						return outcome{after: time.Nanosecond}, boom
					}
					return o, nil
				}})
			}
			res, err := runPhases(context.Background(), &scope{}, phases)
			if len(ran) != c.wantRan || !slices.IsSorted(ran) {
				t.Errorf("ran %v, want the first %d in order", ran, c.wantRan)
			}
			if c.failAt >= 0 {
				if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), phases[c.failAt].name+": ") {
					t.Errorf("error %v, want boom named after phase %s", err, phases[c.failAt].name)
				}
			} else if err != nil {
				t.Errorf("error %v", err)
			}
			if res.RequeueAfter != c.want {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, c.want)
			}
		})
	}
}

// TestPhasesAreNamedOnce: every phase of the pass has a name of its own, so that an error
// says where the pass failed.
func TestPhasesAreNamedOnce(t *testing.T) {
	seen := map[string]bool{}
	for _, ph := range (&GPUPoolProfileReconciler{}).phases() {
		if ph.name == "" || seen[ph.name] || ph.run == nil {
			t.Errorf("phase %q: empty, repeated or without a function", ph.name)
		}
		seen[ph.name] = true
	}
}
