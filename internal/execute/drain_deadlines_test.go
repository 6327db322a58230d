package execute

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestDrainDeadlines: what the Progressing condition says ends a held drain's wait, as
// instants (TestWaitsSayWhenTheyEnd).
func TestDrainDeadlines(t *testing.T) {
	hold := gpupoolv1.DrainSpec{MaxHold: &metav1.Duration{Duration: 5 * time.Minute}}
	cases := []struct {
		name    string
		d       gpupoolv1.DrainSpec
		elapsed time.Duration
		want    string
	}{
		{"no maxHold", gpupoolv1.DrainSpec{}, time.Minute, "timeout at 2031-06-15T10:10:00Z"},
		{"before maxHold", hold, 10 * time.Second, "held pods evicted at drain.maxHold, 2031-06-15T10:05:00Z; timeout at 2031-06-15T10:10:00Z"},
		{"past maxHold (a budget refuses)", hold, 6 * time.Minute, "timeout at 2031-06-15T10:10:00Z"},
	}
	for _, c := range cases {
		// A drain started at 10:00:00.4 in UTC+2: the instants are in UTC, to the second.
		started := time.Date(2031, 6, 15, 12, 0, 0, 4e8, time.FixedZone("CEST", 2*3600))
		if got := drainDeadlines(c.d, started, c.elapsed, drainTimeout(c.d)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestDeadlineOfAStartReadBack: the pass that began a wait (its start to the nanosecond)
// and the passes that read the start back from the status (to the second) name the same
// end, whatever the fraction of the wait's length; in UTC.
func TestDeadlineOfAStartReadBack(t *testing.T) {
	stored := time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC)
	for _, d := range []time.Duration{10 * time.Minute, 90*time.Second + 500*time.Millisecond, 999 * time.Millisecond} {
		want := deadline(stored, d)
		for _, frac := range []time.Duration{1, 300 * time.Millisecond, 999 * time.Millisecond} {
			if got := deadline(stored.Add(frac).In(time.FixedZone("UTC-5", -5*3600)), d); got != want {
				t.Errorf("a wait of %s begun %s past the second: %s, read back %s", d, frac, got, want)
			}
		}
	}
	if got := deadline(stored, 90*time.Second+500*time.Millisecond); got != "2031-06-15T10:01:30Z" {
		t.Errorf("deadline: %s, want 2031-06-15T10:01:30Z", got)
	}
}
