package execute

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestDrainDeadlines: what the Progressing condition says ends a held drain's wait.
func TestDrainDeadlines(t *testing.T) {
	hold := gpupoolv1.DrainSpec{MaxHold: &metav1.Duration{Duration: 5 * time.Minute}}
	cases := []struct {
		name    string
		d       gpupoolv1.DrainSpec
		elapsed time.Duration
		want    string
	}{
		{"no maxHold", gpupoolv1.DrainSpec{}, time.Minute, "timeout in 9m0s"},
		{"before maxHold", hold, 10 * time.Second, "held pods evicted at drain.maxHold in 4m50s, timeout in 9m50s"},
		{"past maxHold (a budget refuses)", hold, 6 * time.Minute, "timeout in 4m0s"},
	}
	for _, c := range cases {
		if got := drainDeadlines(c.d, c.elapsed, drainTimeout(c.d)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
