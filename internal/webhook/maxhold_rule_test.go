package webhook

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// TestMaxHoldRule checks the webhook's own maxHold rule (the CRD's CEL rule refuses
// first on a real API server), for clients that reach it with an older CRD.
func TestMaxHoldRule(t *testing.T) {
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	cases := []struct {
		name  string
		drain gpupoolv1.DrainSpec
		fix   string // "" when accepted
	}{
		{"unset", gpupoolv1.DrainSpec{}, ""},
		{"5m under the default 10m", gpupoolv1.DrainSpec{MaxHold: dur(5 * time.Minute)}, ""},
		{"0s", gpupoolv1.DrainSpec{MaxHold: dur(0)}, ""},
		{"equal to the default timeout", gpupoolv1.DrainSpec{MaxHold: dur(10 * time.Minute)},
			"must be shorter than drain.timeout (10m0s), which bounds the whole drain: write a maxHold below 10m0s (such as 5m0s"},
		{"longer than the timeout", gpupoolv1.DrainSpec{MaxHold: dur(time.Hour), Timeout: dur(30 * time.Minute)},
			"or raise drain.timeout above 1h0m0s"},
		{"negative", gpupoolv1.DrainSpec{MaxHold: dur(-time.Second)}, "remove the minus sign"},
	}
	for _, c := range cases {
		errs := validateMaxHold(field.NewPath("spec", "drain"), c.drain)
		if c.fix == "" {
			if len(errs) > 0 {
				t.Errorf("%s: refused: %v", c.name, errs)
			}
			continue
		}
		if len(errs) != 1 || errs[0].Field != "spec.drain.maxHold" || !strings.Contains(errs[0].Error(), c.fix) {
			t.Errorf("%s: errors %v, want spec.drain.maxHold refused with %q", c.name, errs, c.fix)
		}
	}
}

// TestMaxHoldWarning: a maxHold that leaves the evicted pods less than their grace
// period (drain.gracePeriodSeconds) plus a minute before drain.timeout is admitted with
// a warning; one that leaves enough, or no gracePeriodSeconds to reckon with, is not.
func TestMaxHoldWarning(t *testing.T) {
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	secs := func(s int64) *int64 { return &s }
	cases := []struct {
		name  string
		drain gpupoolv1.DrainSpec
		warn  string
	}{
		{"no gracePeriodSeconds", gpupoolv1.DrainSpec{MaxHold: dur(9 * time.Minute)}, ""},
		{"enough left", gpupoolv1.DrainSpec{MaxHold: dur(8*time.Minute + 30*time.Second), GracePeriodSeconds: secs(30)}, ""},
		{"too little left", gpupoolv1.DrainSpec{MaxHold: dur(9 * time.Minute), GracePeriodSeconds: secs(30)},
			"spec.drain.maxHold (9m0s) leaves 1m0s of drain.timeout (10m0s) to the pods it evicts, less than their grace period (drain.gracePeriodSeconds: 30) plus the minute a terminating pod is waited for: a held pod still runs the drain into its timeout; write a maxHold of at most 8m30s"},
		{"not shorter than the timeout: refused, not warned", gpupoolv1.DrainSpec{MaxHold: dur(10 * time.Minute), GracePeriodSeconds: secs(30)}, ""},
	}
	for _, c := range cases {
		got := strings.Join(maxHoldWarnings(c.drain), "\n")
		if got != c.warn {
			t.Errorf("%s: warnings %q, want %q", c.name, got, c.warn)
		}
	}
}
