package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSoftMemoryLimit covers the classes of --memory-limit: a quantity in every suffix
// family and in bytes (90 % of it), GOMEMLIMIT set (left to the runtime), empty (none),
// and values that are no positive size (an error naming the flag and what to write).
func TestSoftMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		limit, gomem string
		want         int64
		set          bool
		err          string
	}{
		{limit: "256Mi", want: 268435456 / 10 * 9, set: true},
		{limit: "1G", want: 900000000, set: true},
		{limit: "268435456", want: 268435456 / 10 * 9, set: true},
		{limit: "1.5Gi", want: 1610612736 / 10 * 9, set: true},
		{limit: "256Mi", gomem: "100MiB"},
		{limit: ""},
		{limit: "lots", err: "--memory-limit \"lots\""},
		{limit: "256MB", err: "write a quantity"},
		{limit: "0", err: "not a positive size"},
		{limit: "-1Gi", err: "not a positive size"},
	} {
		got, set, err := softMemoryLimit(c.limit, c.gomem)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("softMemoryLimit(%q) = %d, %v, %v; want an error with %q", c.limit, got, set, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want || set != c.set {
			t.Errorf("softMemoryLimit(%q, GOMEMLIMIT=%q) = %d, %v, %v; want %d, %v", c.limit, c.gomem, got, set, err, c.want, c.set)
		}
	}
}

// TestStartsLimitError: --max-concurrent-starts takes any count from 1; zero and
// negative counts are refused with the flag, the value and the default.
func TestStartsLimitError(t *testing.T) {
	for _, n := range []int{1, 16, 64} {
		if err := startsLimitError(n); err != nil {
			t.Errorf("%d: %v", n, err)
		}
	}
	for _, n := range []int{0, -1} {
		err := startsLimitError(n)
		if err == nil || !strings.Contains(err.Error(), "--max-concurrent-starts") || !strings.Contains(err.Error(), "default 16") {
			t.Errorf("%d: %v, want an error naming the flag and its default", n, err)
		}
	}
}

// TestStatusIntervalError: --status-write-interval takes 0 (every pass writes) to a
// minute; a negative interval or a longer one is refused with the flag, the value, the
// range and the default.
func TestStatusIntervalError(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 5 * time.Second, time.Minute} {
		if err := statusIntervalError(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, d := range []time.Duration{-time.Nanosecond, -5 * time.Second, time.Minute + time.Nanosecond, time.Hour} {
		err := statusIntervalError(d)
		if err == nil || !strings.Contains(err.Error(), "--status-write-interval "+d.String()) || !strings.Contains(err.Error(), "0 to 1m") || !strings.Contains(err.Error(), "default 5s") {
			t.Errorf("%s: %v, want an error naming the flag, the value, the range and the default", d, err)
		}
	}
}

// TestMinPassIntervalError: --min-pass-interval takes 0 (a pass at each change) to 10s;
// a negative interval or a longer one is refused with the flag, the value, the range and
// the default.
func TestMinPassIntervalError(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, time.Second, 10 * time.Second} {
		if err := minPassIntervalError(d); err != nil {
			t.Errorf("%s: %v", d, err)
		}
	}
	for _, d := range []time.Duration{-time.Nanosecond, -time.Second, 10*time.Second + time.Nanosecond, time.Minute} {
		err := minPassIntervalError(d)
		if err == nil || !strings.Contains(err.Error(), "--min-pass-interval "+d.String()) || !strings.Contains(err.Error(), "0 to 10s") || !strings.Contains(err.Error(), "default 1s") {
			t.Errorf("%s: %v, want an error naming the flag, the value, the range and the default", d, err)
		}
	}
}

// TestGCPercentToSet: --gc-percent in 10-1000 is set unless GOGC is (the runtime applied
// it); values outside are refused with the flag, the value, the range and the default,
// whatever GOGC says.
func TestGCPercentToSet(t *testing.T) {
	for _, c := range []struct {
		percent int
		gogc    string
		want    int
		set     bool
	}{
		{percent: 50, want: 50, set: true},
		{percent: 10, want: 10, set: true},
		{percent: 1000, want: 1000, set: true},
		{percent: 50, gogc: "100"},
		{percent: 50, gogc: "off"},
	} {
		got, set, err := gcPercentToSet(c.percent, c.gogc)
		if err != nil || got != c.want || set != c.set {
			t.Errorf("gcPercentToSet(%d, GOGC=%q) = %d, %v, %v; want %d, %v", c.percent, c.gogc, got, set, err, c.want, c.set)
		}
	}
	for _, p := range []int{9, 0, -1, 1001} {
		for _, gogc := range []string{"", "100"} {
			_, set, err := gcPercentToSet(p, gogc)
			if err == nil || set || !strings.Contains(err.Error(), "--gc-percent") || !strings.Contains(err.Error(), "10 to 1000") || !strings.Contains(err.Error(), fmt.Sprintf("default %d", DefaultGCPercent)) {
				t.Errorf("gcPercentToSet(%d, GOGC=%q): %v, %v; want an error naming the flag, the range and the default", p, gogc, set, err)
			}
		}
	}
}
