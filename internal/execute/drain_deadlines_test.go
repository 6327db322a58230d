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
