package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func drainHold(maxHold, timeout string) func(map[string]any) {
	return func(u map[string]any) {
		if timeout != "" {
			setField(timeout, "spec", "drain", "timeout")(u)
		}
		setField(maxHold, "spec", "drain", "maxHold")(u)
	}
}

// TestMaxHoldShorterThanTimeout: drain.maxHold must be shorter than drain.timeout (the
// default 10m when unset), which bounds the whole drain. The refusal names the field,
// both values and what to write instead, never the raw CEL; values just below are
// accepted.
func TestMaxHoldShorterThanTimeout(t *testing.T) {
	ctx := context.Background()
	const path = "spec.drain.maxHold: Invalid value"
	bad := []badCase{
		{name: "maxHold equal to the default timeout", raw: drainHold("10m", ""), path: path,
			value: `not "10m" with timeout "10m"`, fix: `write a maxHold below "10m" (such as half of it, leaving the evicted pods their grace period), or raise drain.timeout above "10m"`},
		{name: "maxHold longer than the timeout", raw: drainHold("45m", "30m"), path: path,
			value: `not "45m" with timeout "30m"`, fix: `write a maxHold below "30m"`},
		{name: "maxHold equal to the timeout written otherwise", raw: drainHold("60m", "1h"), path: path,
			value: `not "60m" with timeout "1h"`, fix: `or raise drain.timeout above "60m"`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			err := createBad(ctx, tc)
			if err == nil {
				t.Fatal("accepted, want refused")
			}
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{tc.path, tc.value, tc.fix, "must be shorter than drain.timeout"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message does not contain %q", want)
				}
			}
			for _, raw := range rawCEL {
				if strings.Contains(msg, raw) {
					t.Errorf("message shows the raw CEL (%q)", raw)
				}
			}
		})
	}
	for _, good := range []struct {
		name             string
		maxHold, timeout time.Duration
	}{
		{"maxHold below the default timeout", 5 * time.Minute, 0},
		{"maxHold 0s: holds never honoured", 0, 0},
		{"maxHold a second below the timeout", 29*time.Minute + 59*time.Second, 30 * time.Minute},
	} {
		t.Run(good.name, func(t *testing.T) {
			p := valid("good")
			secure(p)
			p.Spec.Drain.MaxHold = &metav1.Duration{Duration: good.maxHold}
			if good.timeout > 0 {
				p.Spec.Drain.Timeout = &metav1.Duration{Duration: good.timeout}
			}
			if err := warned.Create(ctx, p, client.DryRunAll); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}
