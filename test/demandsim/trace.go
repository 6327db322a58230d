package demandsim

import (
	"errors"
	"fmt"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/internal/trace"
)

// Trace is the world as kubectl gpupool record would have recorded it under spec:
// inference as one-GPU pods of a Deployment (arriving as Inference rises, the newest
// leaving as it falls), training jobs as pods of Jobs that run to their end, and the
// switches a run under spec made (res, for the switch times a replay learns); the
// pool starts where Run starts it. A world
// with DoNotDisrupt cannot be recorded this way.
func (w *World) Trace(pool string, spec *gpupoolv1.GPUPoolProfileSpec, res *Result) (*trace.Trace, error) {
	if w.DoNotDisrupt != nil {
		return nil, errors.New("a world with DoNotDisrupt has no trace")
	}
	first, err := plan.Desired(spec, w.Start)
	if err != nil {
		return nil, err
	}
	active := first.Layout
	t := &trace.Trace{Header: trace.Header{Pool: pool, Start: w.Start, End: w.Start.Add(w.Span), Active: active, Spec: *spec,
		Capacity: map[string]trace.Capacity{
			Day:   {GPUs: int64(w.DayGPUs), Equivalents: float64(w.PhysicalGPUs)},
			Night: {GPUs: int64(w.NightGPUs), Equivalents: float64(w.PhysicalGPUs)},
		}}}
	var live []string
	next := 0
	for at := w.Start; at.Before(t.Header.End); at = at.Add(w.Step) {
		n := min(w.Inference(at), w.DayGPUs)
		for len(live) > n {
			t.Events = append(t.Events, trace.Event{At: at, Kind: trace.End, Pod: live[len(live)-1], Outcome: trace.Deleted})
			live = live[:len(live)-1]
		}
		for len(live) < n {
			name := fmt.Sprintf("serve/inference-%d", next)
			next++
			live = append(live, name)
			t.Events = append(t.Events, trace.Event{At: at, Kind: trace.Arrive, Pod: name, Tenant: "serve", GPUs: 1, Layouts: []string{Day}, Counts: true})
		}
	}
	for i, j := range w.Jobs {
		name := "train/job-" + itoa(i)
		end := j.Arrival.Add(j.Duration)
		if end.After(t.Header.End) {
			return nil, fmt.Errorf("job %d ends after the world", i)
		}
		t.Events = append(t.Events,
			trace.Event{At: j.Arrival, Kind: trace.Arrive, Pod: name, Tenant: "train", GPUs: int64(j.GPUs), Layouts: []string{Night}, Job: true, Counts: true},
			trace.Event{At: j.Arrival, Kind: trace.Start, Pod: name},
			trace.Event{At: end, Kind: trace.End, Pod: name, Outcome: trace.Succeeded})
	}
	if res != nil {
		for _, s := range res.Switches {
			t.Events = append(t.Events, trace.Event{At: s.Start, Kind: trace.Switch, From: s.From, To: s.To, Reason: s.Reason, Finished: s.End})
		}
	}
	t.Sort()
	return t, nil
}
