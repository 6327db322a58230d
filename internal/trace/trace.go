// Package trace is the format of what a pool saw, recorded (kubectl gpupool record) to
// be replayed (kubectl gpupool simulate, internal/replay): the pods that asked for the
// pool's GPUs, when they arrived, started and ended, and the pool's switches. It is JSON
// Lines: a header, then one event a line in the order of time. docs/simulate.md.
package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Version is the format's version; a reader refuses another.
const Version = 1

// MaxEvents bounds a trace: a recorder stops adding pods beyond it (Header.Truncated)
// and a reader refuses a longer file, so that neither grows without end.
const MaxEvents = 1_000_000

// Event kinds.
const (
	Arrive = "arrive"
	Start  = "start"
	End    = "end"
	Switch = "switch"
)

// Outcomes of an End.
const (
	// Succeeded and Failed: the pod ran to its end (its run is work a replay redoes
	// when it is evicted).
	Succeeded = "succeeded"
	Failed    = "failed"
	// Deleted: the pod went before it ended (scaled down, evicted, deleted).
	Deleted = "deleted"
	// Admitted: a Workload's wait ended: Kueue admitted it (its pods, of its group, are
	// created then).
	Admitted = "admitted"
)

// Header is a trace's first line.
type Header struct {
	Version int    `json:"version"`
	Pool    string `json:"pool"`
	// Start and End are the period recorded: events lie within it.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Active is the pool's active layout when the recording started.
	Active string `json:"active,omitempty"`
	// Spec is the pool's spec when the recording started: the live policy a replay runs.
	Spec gpupoolv1.GPUPoolProfileSpec `json:"spec"`
	// Capacity is, per layout, the GPUs its nodes offer pods and their GPU-equivalents
	// (internal/accounting's share): a replay takes a layout's from the spec it runs
	// when that spec lists the layout's workers, and from here otherwise.
	Capacity map[string]Capacity `json:"capacity,omitempty"`
	// Truncated: the recorder reached MaxEvents (or its --max-pods) and recorded no
	// further pods.
	Truncated bool `json:"truncated,omitempty"`
}

// Capacity is what one layout offers.
type Capacity struct {
	GPUs        int64   `json:"gpus"`
	Equivalents float64 `json:"gpuEquivalents"`
}

// Event is one line after the header.
type Event struct {
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Pod is the pod's namespace/name (Arrive, Start, End); a Workload's is
	// workload:namespace/name.
	Pod string `json:"pod,omitempty"`

	// Arrive: who the pod is, what it asks for and where it could run.
	Tenant string `json:"tenant,omitempty"`
	GPUs   int64  `json:"gpus,omitempty"`
	// Layouts are the pool's layouts whose nodes could take the pod when it was
	// recorded (the matcher demand uses); a replay under another spec matches
	// Constraints against that spec's layouts instead, when they are recorded.
	Layouts     []string     `json:"layouts,omitempty"`
	Constraints *Constraints `json:"constraints,omitempty"`
	// Job: the pod belongs to a Job (it runs to an end); DoNotDisrupt: it carries
	// gpupool.dev/do-not-disrupt; Counts: the pool's demand selects it (namespace and pod
	// selectors), so that it may bring a layout in or keep one.
	Job          bool `json:"job,omitempty"`
	DoNotDisrupt bool `json:"doNotDisrupt,omitempty"`
	Counts       bool `json:"counts,omitempty"`
	// Workload: a Kueue Workload gpupool's admission check holds (its pods do not exist
	// yet); it waits for its layouts until it is admitted. Group is the UID of the Job a
	// Workload or a pod belongs to: a Workload's pods are created when it is admitted.
	Workload bool   `json:"workload,omitempty"`
	Group    string `json:"group,omitempty"`

	// End: how the pod ended.
	Outcome string `json:"outcome,omitempty"`

	// Switch: a transition from the pool's history.
	From     string                  `json:"from,omitempty"`
	To       string                  `json:"to,omitempty"`
	Reason   gpupoolv1.DesiredReason `json:"reason,omitempty"`
	Finished time.Time               `json:"finished,omitzero"`
	Aborted  bool                    `json:"aborted,omitempty"`
}

// Constraints are what a scheduler matches a pod against a node with, as demand does:
// its node selector, required node affinity and tolerations.
type Constraints struct {
	NodeSelector map[string]string    `json:"nodeSelector,omitempty"`
	Affinity     *corev1.NodeSelector `json:"requiredNodeAffinity,omitempty"`
	Tolerations  []corev1.Toleration  `json:"tolerations,omitempty"`
}

// Pod is the pod Constraints describe, for the matcher.
func (c *Constraints) Pod() *corev1.Pod {
	p := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: c.NodeSelector, Tolerations: c.Tolerations}}
	if c.Affinity != nil {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: c.Affinity}}
	}
	return p
}

// ConstraintsOf are a pod's constraints.
func ConstraintsOf(p *corev1.Pod) *Constraints {
	c := &Constraints{NodeSelector: p.Spec.NodeSelector, Tolerations: p.Spec.Tolerations}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		c.Affinity = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	return c
}

// Trace is a header and its events.
type Trace struct {
	Header Header
	Events []Event
}

// Sort orders the events by time, keeping the order they were added in at one instant:
// that order is causal (a pod arrives before it starts; a replica's predecessor ends
// before the replica of its name arrives), which no order of kinds is.
func (t *Trace) Sort() {
	slices.SortStableFunc(t.Events, func(a, b Event) int { return a.At.Compare(b.At) })
}

// Write writes t as JSON Lines, events sorted.
func Write(w io.Writer, t *Trace) error {
	t.Sort()
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	h := t.Header
	h.Version = Version
	if err := enc.Encode(h); err != nil {
		return err
	}
	for i := range t.Events {
		if err := enc.Encode(&t.Events[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Read reads a trace Write wrote and checks it: the version, each event's kind and
// fields, times within the period, a pod's events in order. An error names the line.
func Read(r io.Reader) (*Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	t := &Trace{}
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			if err := strictUnmarshal(sc.Bytes(), &t.Header); err != nil {
				return nil, fmt.Errorf("line 1 (the header): %w", err)
			}
			if t.Header.Version != Version {
				return nil, fmt.Errorf("line 1: trace version %d; this gpupool reads version %d", t.Header.Version, Version)
			}
			if t.Header.Start.IsZero() || t.Header.End.Before(t.Header.Start) {
				return nil, fmt.Errorf("line 1: the period %s to %s is empty or reversed", t.Header.Start.Format(time.RFC3339), t.Header.End.Format(time.RFC3339))
			}
			continue
		}
		if len(t.Events) >= MaxEvents {
			return nil, fmt.Errorf("line %d: more than %d events", line, MaxEvents)
		}
		var ev Event
		if err := strictUnmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		t.Events = append(t.Events, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line+1, err)
	}
	if line == 0 {
		return nil, errors.New("empty trace: no header")
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return t, nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// check holds the events to what a replay relies on. Line numbers count the header.
func (t *Trace) check() error {
	state := map[string]string{}
	workload := map[string]bool{}
	for i, ev := range t.Events {
		where := fmt.Sprintf("line %d (%s %s)", i+2, ev.Kind, ev.Pod)
		// Switches before the start are the pool's history (cooldown, minDwell).
		if (ev.Kind != Switch && ev.At.Before(t.Header.Start)) || ev.At.After(t.Header.End) {
			return fmt.Errorf("%s: at %s, outside the period %s to %s", where, ev.At.Format(time.RFC3339), t.Header.Start.Format(time.RFC3339), t.Header.End.Format(time.RFC3339))
		}
		if i > 0 && ev.At.Before(t.Events[i-1].At) {
			return fmt.Errorf("%s: events must be in the order of time", where)
		}
		switch ev.Kind {
		case Arrive:
			if ev.Pod == "" || ev.GPUs <= 0 {
				return fmt.Errorf("%s: an arrival names its pod and asks for at least one GPU (gpus %d)", where, ev.GPUs)
			}
			if s := state[ev.Pod]; s != "" && s != End {
				return fmt.Errorf("%s: the pod arrived again before it ended", where)
			}
			state[ev.Pod], workload[ev.Pod] = Arrive, ev.Workload
		case Start:
			if state[ev.Pod] != Arrive || workload[ev.Pod] {
				return fmt.Errorf("%s: a start follows the pod's arrival, once (a Workload does not start: it is admitted)", where)
			}
			state[ev.Pod] = Start
		case End:
			if s := state[ev.Pod]; s != Arrive && s != Start {
				return fmt.Errorf("%s: an end follows the pod's arrival, once", where)
			}
			if workload[ev.Pod] && ev.Outcome != Admitted {
				return fmt.Errorf("%s: a Workload ends %s, not %q", where, Admitted, ev.Outcome)
			}
			if !workload[ev.Pod] && ev.Outcome != Succeeded && ev.Outcome != Failed && ev.Outcome != Deleted {
				return fmt.Errorf("%s: outcome %q; write %s, %s or %s (%s is a Workload's)", where, ev.Outcome, Succeeded, Failed, Deleted, Admitted)
			}
			state[ev.Pod] = End
		case Switch:
			if ev.To == "" {
				return fmt.Errorf("%s: a switch names the layout it switched to", where)
			}
		default:
			return fmt.Errorf("%s: kind %q; write %s, %s, %s or %s", where, ev.Kind, Arrive, Start, End, Switch)
		}
	}
	return nil
}
