package drain

import (
	"testing"
	"time"
)

// TestTerminatingClock: the wait is measured from when the clock first saw the pod, on
// its own time; a clock stepped back starts it again; grace periods are capped.
func TestTerminatingClock(t *testing.T) {
	var c TerminatingClock
	p := pod("web", "ReplicaSet", terminating(10))
	end := 10*time.Second + TerminatingMargin
	if !c.Holds(&p, true, t0) || !c.Holds(&p, true, t0.Add(end-time.Second)) || c.Holds(&p, true, t0.Add(end)) {
		t.Error("a pod holds for its grace period plus TerminatingMargin from when it was first seen")
	}
	if c.Holds(&p, false, t0) {
		t.Error("a pod on a node that is not Ready holds")
	}
	back := t0.Add(-time.Hour)
	if !c.Holds(&p, true, back) || !c.Holds(&p, true, back.Add(end-time.Second)) {
		t.Error("after the clock stepped back, the wait starts again")
	}
	huge := int64(1) << 62
	for _, c := range []struct {
		s    *int64
		want time.Duration
	}{{nil, 0}, {ptr(-1), 0}, {ptr(30), 30 * time.Second}, {&huge, maxGracePeriod}} {
		q := p.DeepCopy()
		q.DeletionGracePeriodSeconds = c.s
		if got := gracePeriod(q); got != c.want {
			t.Errorf("gracePeriod(%v) = %s, want %s", c.s, got, c.want)
		}
	}
}

// TestTerminatingClockForgets: pods first seen longer ago than any wait are forgotten
// on the next sweep, so that the clock does not grow with every pod ever drained.
func TestTerminatingClockForgets(t *testing.T) {
	var c TerminatingClock
	p := pod("web", "ReplicaSet", terminating(10))
	c.Holds(&p, true, t0)
	later := t0.Add(maxGracePeriod + TerminatingMargin + 2*forgetAfter)
	q := pod("other", "ReplicaSet", terminating(10))
	c.Holds(&q, true, later)
	if _, ok := c.first[p.UID]; ok || len(c.first) != 1 {
		t.Errorf("after a sweep the clock remembers %v, want only the pod seen since", c.first)
	}
}

func ptr(v int64) *int64 { return &v }

// TestTerminatingClockIgnoresTheAPIServersClock: the API server stamps a pod's
// deletionTimestamp on its own clock; with gpupool's clock an hour ahead of it or behind
// it, a terminating pod still holds for exactly its grace period plus TerminatingMargin
// from when gpupool first saw it, never a moment less or more.
func TestTerminatingClockIgnoresTheAPIServersClock(t *testing.T) {
	end := 10*time.Second + TerminatingMargin
	for _, offset := range []time.Duration{-time.Hour, -time.Second, 0, time.Second, time.Hour} {
		var c TerminatingClock
		p := pod("web", "ReplicaSet", terminating(10))
		p.DeletionTimestamp.Time = t0.Add(offset) // stamped by a clock offset from ours
		if !c.Holds(&p, true, t0) || !c.Holds(&p, true, t0.Add(end-time.Second)) {
			t.Errorf("API server clock %s from ours: the pod stopped holding before its grace period and margin", offset)
		}
		if c.Holds(&p, true, t0.Add(end)) {
			t.Errorf("API server clock %s from ours: the pod still holds after its grace period and margin", offset)
		}
	}
}
