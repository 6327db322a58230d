package plan

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testclock"
)

// sizedSpec is demandSpec with night a layout by count of day (spec count 4, eight
// candidates) that a BringIn rule sizes between lo and hi.
func sizedSpec(lo, hi int32, mutate ...func(*gpupoolv1.DemandRule)) *gpupoolv1.GPUPoolProfileSpec {
	ru := bringNight
	ru.MinGPUs = ptr.To(int32(1))
	ru.CountFromDemand = &gpupoolv1.CountFromDemand{Min: lo, Max: hi}
	for _, m := range mutate {
		m(&ru)
	}
	spec := demandSpec(ru)
	var cands []gpupoolv1.Candidate
	for i := range 8 {
		cands = append(cands, gpupoolv1.Candidate{VM: fmt.Sprintf("big-%d", i)})
	}
	spec.Layouts[1].Convert = &gpupoolv1.Conversion{Base: "day", Count: 4, Profile: "grid_p100-16q", Candidates: cands}
	spec.Demand.MaxEvictions = ptr.To(int32(2))
	return spec
}

// evicting is a Disruption where a step to n GPUs evicts perGPU pods for each GPU
// converted past have (none for a step down), and the counts in refuse cannot be made.
func evicting(have, perGPU int, refuse ...int) func(int) (StepCost, error) {
	return func(n int) (StepCost, error) {
		for _, r := range refuse {
			if n == r {
				return StepCost{}, errors.New("no choice of that many GPUs")
			}
		}
		return StepCost{Evictions: max(n-have, 0) * perGPU}, nil
	}
}

func TestDecideCount(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	mon := testclock.Weekly(time.Monday, 0, 0, berlin)
	at := func(h, m int) time.Time { return mon.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	// Night (by demand) is active since 14:00 with 2 GPUs converted.
	arrived := []PastSwitch{{ID: "n", To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(13, 50), End: at(14, 0)}}
	active := func(pending, running int64, since time.Time) *DemandInput {
		in := &DemandInput{Active: "night", Switches: arrived,
			Observed: map[string]LayoutDemand{"night": {PendingGPUs: pending, RunningGPUs: running}}}
		if pending > 0 {
			in.Timers.PendingSince = map[string]time.Time{"night": since}
		}
		return in
	}
	free := func(int) (StepCost, error) { return StepCost{}, nil }
	tests := []struct {
		name    string
		spec    *gpupoolv1.GPUPoolProfileSpec
		now     time.Time
		in      CountInput
		count   int
		step    bool   // a step is announced
		message string // in the decision's message
	}{{
		name: "brought in with the count its demand needs", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 3}}}, Layout: "night", Reason: gpupoolv1.DesiredByDemand, PerGPU: 1, Disruption: free},
		count: 3, message: "made with 3 GPUs converted",
	}, {
		name: "brought in with the largest count the disruption limits allow", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 4}}}, Layout: "night", Reason: gpupoolv1.DesiredByDemand, PerGPU: 1, Disruption: evicting(1, 1)},
		count: 3, message: "not to 4: it would evict 3 GPU pods (maxEvictions 2)",
	}, {
		name: "an estimate for a layout not made is its bring-in count", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(5, 0, at(14, 0)), Layout: "night", Active: 2, Estimate: true, PerGPU: 1, Disruption: free},
		count: 5,
	}, {
		name: "brought in with nothing pending gets min", spec: sizedSpec(2, 6), now: at(20, 0),
		in:    CountInput{Demand: &DemandInput{Active: "day"}, Layout: "night", Reason: gpupoolv1.DesiredBySchedule, PerGPU: 1, Disruption: free},
		count: 2,
	}, {
		name: "pending beyond max is capped", spec: sizedSpec(1, 5), now: at(15, 0),
		in:    CountInput{Demand: &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 40}}}, Layout: "night", Reason: gpupoolv1.DesiredByDemand, PerGPU: 2, Disruption: free},
		count: 5,
	}, {
		name: "pod GPUs per converted GPU round up", spec: sizedSpec(1, 8), now: at(15, 0),
		in:    CountInput{Demand: &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 5}}}, Layout: "night", Reason: gpupoolv1.DesiredByDemand, PerGPU: 2, Disruption: free},
		count: 3,
	}, {
		name: "an override makes convert.count", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 1}}}, Layout: "night", Reason: gpupoolv1.DesiredByOverride, PerGPU: 1, Disruption: free},
		count: 4,
	}, {
		name: "a layout with workers has no count", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(0, 0, time.Time{}), Layout: "day", PerGPU: 1, Disruption: free},
		count: 0,
	}, {
		name: "outside the rule's windows a layout brought in gets convert.count",
		spec: sizedSpec(1, 6, func(r *gpupoolv1.DemandRule) {
			r.Windows = []gpupoolv1.DemandWindow{{Start: "0 12 * * 1-5", Duration: metav1.Duration{Duration: time.Hour}}}
		}), now: at(20, 0),
		in:    CountInput{Demand: &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 1}}}, Layout: "night", Reason: gpupoolv1.DesiredBySchedule, PerGPU: 1, Disruption: free},
		count: 4,
	}, {
		name: "outside the rule's windows an active layout keeps its count",
		spec: sizedSpec(1, 6, func(r *gpupoolv1.DemandRule) {
			r.Windows = []gpupoolv1.DemandWindow{{Start: "0 12 * * 1-5", Duration: metav1.Duration{Duration: time.Hour}}}
		}), now: at(15, 0),
		in:    CountInput{Demand: active(5, 2, at(14, 0)), Layout: "night", Active: 2, PerGPU: 1, Disruption: free},
		count: 2, message: "outside the windows",
	}, {
		name: "a step in flight keeps its count", spec: sizedSpec(1, 6), now: at(15, 0),
		in: CountInput{Demand: &DemandInput{Active: "night", InFlight: "night", Switches: append(arrived, PastSwitch{ID: "s", To: "night", Start: at(14, 50)}),
			Observed: map[string]LayoutDemand{"night": {PendingGPUs: 9}}}, Layout: "night", Active: 2, InFlight: 3, PerGPU: 1, Disruption: free},
		count: 3, message: "in progress",
	}, {
		name: "the count serves the demand", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(0, 2, time.Time{}), Layout: "night", Active: 2, PerGPU: 1, Disruption: free},
		count: 2, message: "serve its demand",
	}, {
		name: "a step up waits for `for`", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(2, 2, at(14, 58)), Layout: "night", Active: 2, PerGPU: 1, Disruption: free},
		count: 2, message: "once that holds for 5m",
	}, {
		name: "a step up that evicts nothing starts at once", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(2, 2, at(14, 50)), Layout: "night", Active: 2, PerGPU: 1, Disruption: free},
		count: 4, message: "from 2 to 4 GPUs converted",
	}, {
		name: "a step down needs no `for`", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(0, 1, time.Time{}), Layout: "night", Active: 4, PerGPU: 1, Disruption: free},
		count: 1, message: "from 4 to 1",
	}, {
		name: "no step down below min", spec: sizedSpec(3, 6), now: at(15, 0),
		in:    CountInput{Demand: active(0, 0, time.Time{}), Layout: "night", Active: 4, PerGPU: 1, Disruption: free},
		count: 3,
	}, {
		name: "dwell holds a step back", spec: sizedSpec(1, 6), now: at(14, 20),
		in:    CountInput{Demand: active(3, 2, at(14, 5)), Layout: "night", Active: 2, PerGPU: 1, Disruption: free},
		count: 2, message: "minDwell 30m",
	}, {
		name: "cooldown holds a step back", spec: sizedSpec(1, 6), now: at(15, 0),
		in: CountInput{Demand: &DemandInput{Active: "night", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 3}},
			Timers:   DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{{ID: "n", To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(13, 0), End: at(14, 0)}, {ID: "x", To: "day", Reason: gpupoolv1.DesiredByOverride, Start: at(14, 50), Aborted: true}}},
			Layout: "night", Active: 2, PerGPU: 1, Disruption: free},
		count: 2, message: "cooldown until",
	}, {
		name: "the switch budget holds a step back", spec: sizedSpec(1, 6), now: at(15, 0),
		in: CountInput{Demand: &DemandInput{Active: "night", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 3}},
			Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{{ID: "1", To: "night", Start: at(9, 0), End: at(9, 5)}, {ID: "2", To: "day", Start: at(10, 0), End: at(10, 5)},
				{ID: "3", To: "night", Start: at(11, 0), End: at(11, 5)}, {ID: "4", To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(12, 0), End: at(12, 5)}}},
			Layout: "night", Active: 2, PerGPU: 1, Disruption: free},
		count: 2, message: "switch budget spent",
	}, {
		name: "a step past maxEvictions takes the part that is allowed", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(4, 2, at(14, 0)), Layout: "night", Active: 2, PerGPU: 1, Disruption: evicting(2, 1)},
		count: 4, step: false, message: "not to 6: it would evict 4 GPU pods (maxEvictions 2)",
	}, {
		name: "a count that cannot be resolved is passed over", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(4, 2, at(14, 0)), Layout: "night", Active: 2, PerGPU: 1, Disruption: evicting(2, 0, 6, 5)},
		count: 4, message: "no choice of that many GPUs",
	}, {
		name: "no step when every part evicts too much", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: active(4, 2, at(14, 0)), Layout: "night", Active: 2, PerGPU: 1, Disruption: evicting(2, 3)},
		count: 2, message: "does not step from 2 to 6",
	}, {
		name: "do-not-disrupt pods hold a step back", spec: sizedSpec(1, 6), now: at(15, 0),
		in: CountInput{Demand: active(1, 2, at(14, 0)), Layout: "night", Active: 2, PerGPU: 1,
			Disruption: func(int) (StepCost, error) { return StepCost{Evictions: 1, DoNotDisrupt: 1}, nil }},
		count: 2, message: "do-not-disrupt",
	}, {
		name: "a step that evicts is announced", spec: sizedSpec(1, 6), now: at(15, 0),
		in:    CountInput{Demand: withWarn(active(1, 2, at(14, 0)), 10*time.Minute), Layout: "night", Active: 2, PerGPU: 1, Disruption: evicting(2, 1)},
		count: 2, step: true, message: "starts at",
	}, {
		name: "an announced step starts when its warning runs out", spec: sizedSpec(1, 6), now: at(15, 10),
		in: CountInput{Demand: withWarn(active(1, 2, at(14, 0)), 10*time.Minute), Layout: "night", Active: 2, PerGPU: 1, Disruption: evicting(2, 1),
			Step: &AnnouncedStep{Layout: "night", From: 2, To: 3, Decided: at(15, 0), At: at(15, 10)}},
		count: 3,
	}, {
		name: "an announced step for another count is announced afresh", spec: sizedSpec(1, 6), now: at(15, 10),
		in: CountInput{Demand: withWarn(active(2, 2, at(14, 0)), 10*time.Minute), Layout: "night", Active: 2, PerGPU: 1, Disruption: evicting(2, 1),
			Step: &AnnouncedStep{Layout: "night", From: 2, To: 3, Decided: at(15, 0), At: at(15, 10)}},
		count: 2, step: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Layout = cmpOr(tc.in.Layout, "night")
			got, err := DecideCount(tc.spec, tc.now, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != tc.count {
				t.Errorf("count %d, want %d (%s)", got.Count, tc.count, got.Message)
			}
			if (got.Step != nil) != tc.step {
				t.Errorf("step %+v, want announced %v (%s)", got.Step, tc.step, got.Message)
			}
			if !strings.Contains(got.Message, tc.message) {
				t.Errorf("message %q, want it to contain %q", got.Message, tc.message)
			}
		})
	}
}

func withWarn(in *DemandInput, d time.Duration) *DemandInput {
	in.WarnAhead = d
	return in
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestDecideCountStaysWithinItsRails: on random inputs, the count is within [min, max]
// whenever demand sized it and nothing was in flight, a step only moves toward the
// count the demand needs, never past it, and a step that would break a guard rail is
// never taken.
func TestDecideCountStaysWithinItsRails(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	mon := testclock.Weekly(time.Monday, 0, 0, berlin)
	for seed := range int64(2000) {
		rng := rand.New(rand.NewSource(seed))
		lo := int32(1 + rng.Intn(3))
		hi := lo + int32(rng.Intn(5))
		spec := sizedSpec(lo, hi)
		now := mon.Add(time.Duration(rng.Intn(24*60)) * time.Minute)
		perGPU := int64(1 + rng.Intn(3))
		cur := 1 + rng.Intn(8)
		limit := rng.Intn(4)
		spec.Demand.MaxEvictions = ptr.To(int32(limit))
		pending, running := int64(rng.Intn(12)), int64(rng.Intn(12))
		in := &DemandInput{Active: "night", Observed: map[string]LayoutDemand{"night": {PendingGPUs: pending, RunningGPUs: running}},
			Switches: []PastSwitch{{ID: "a", To: "night", Reason: gpupoolv1.DesiredByDemand, Start: now.Add(-time.Duration(rng.Intn(120)) * time.Minute), End: now.Add(-time.Duration(rng.Intn(60)) * time.Minute)}}}
		if pending > 0 {
			in.Timers.PendingSince = map[string]time.Time{"night": now.Add(-time.Duration(rng.Intn(10)) * time.Minute)}
		}
		perStep := rng.Intn(3)
		got, err := DecideCount(spec, now, CountInput{Demand: in, Layout: "night", Active: cur, PerGPU: perGPU, Disruption: evicting(cur, perStep)})
		if err != nil {
			t.Fatal(err)
		}
		want := min(max(int((pending+running+perGPU-1)/perGPU), int(lo)), int(hi))
		lowEnd, highEnd := min(cur, want), max(cur, want)
		if got.Count < lowEnd || got.Count > highEnd {
			t.Fatalf("seed %d: count %d outside [%d, %d] (from %d toward %d): %s", seed, got.Count, lowEnd, highEnd, cur, want, got.Message)
		}
		if got.Count != cur {
			if ev := max(got.Count-cur, 0) * perStep; ev > limit {
				t.Fatalf("seed %d: step from %d to %d evicts %d, maxEvictions %d", seed, cur, got.Count, ev, limit)
			}
			if end := in.Switches[0].End; now.Before(end.Add(30 * time.Minute)) {
				t.Fatalf("seed %d: step within minDwell of %s: %s", seed, end, got.Message)
			}
		}
	}
}
