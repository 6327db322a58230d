package trace

import (
	"bytes"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func header() Header {
	return Header{Pool: "lab", Start: t0, End: t0.Add(24 * time.Hour), Active: "day",
		Capacity: map[string]Capacity{"day": {GPUs: 16, Equivalents: 4}}}
}

// randomTrace is a valid trace of n pods, each arriving, maybe starting, maybe ending,
// at random instants within the day, with a switch or two.
func randomTrace(rng *rand.Rand, n int) *Trace {
	t := &Trace{Header: header()}
	at := func(after time.Time) time.Time {
		left := t.Header.End.Sub(after)
		return after.Add(time.Duration(rng.Int63n(int64(left) + 1))).Truncate(time.Second)
	}
	for i := range n {
		name := fmt.Sprintf("ns-%d/pod-%d", i%3, i)
		arrive := at(t0)
		t.Events = append(t.Events, Event{At: arrive, Kind: Arrive, Pod: name, Tenant: fmt.Sprint("ns-", i%3), GPUs: 1 + rng.Int63n(4),
			Layouts: []string{"night"}, Job: rng.Intn(2) == 0, Counts: true,
			Constraints: &Constraints{NodeSelector: map[string]string{"lab.example/workload": "training"},
				Tolerations: []corev1.Toleration{{Key: "lab.example/training", Operator: corev1.TolerationOpExists}}}})
		last := arrive
		if rng.Intn(3) > 0 {
			last = at(last)
			t.Events = append(t.Events, Event{At: last, Kind: Start, Pod: name})
		}
		if rng.Intn(3) > 0 {
			t.Events = append(t.Events, Event{At: at(last), Kind: End, Pod: name, Outcome: []string{Succeeded, Failed, Deleted}[rng.Intn(3)]})
		}
	}
	t.Events = append(t.Events, Event{At: t0.Add(-2 * time.Hour), Kind: Switch, From: "night", To: "day", Finished: t0.Add(-110 * time.Minute)},
		Event{At: at(t0), Kind: Switch, From: "day", To: "night", Reason: "Demand"})
	return t
}

// TestRoundTrip: any valid trace, its events shuffled across instants (but in their
// order at each instant), is written in the order of time and read back as it was.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := range 50 {
		tr := randomTrace(rng, rng.Intn(40))
		tr.Sort()
		want := &Trace{Header: tr.Header, Events: append([]Event(nil), tr.Events...)}
		want.Header.Version = Version
		rng.Shuffle(len(tr.Events), func(i, j int) {
			if !tr.Events[i].At.Equal(tr.Events[j].At) {
				tr.Events[i], tr.Events[j] = tr.Events[j], tr.Events[i]
			}
		})
		var a bytes.Buffer
		if err := Write(&a, tr); err != nil {
			t.Fatal(err)
		}
		back, err := Read(bytes.NewReader(a.Bytes()))
		if err != nil {
			t.Fatalf("trace %d: %v\n%s", i, err, a.String())
		}
		if !reflect.DeepEqual(normalised(back), normalised(want)) {
			t.Fatalf("trace %d read back differs:\n%+v\nwant\n%+v", i, back, want)
		}
	}
}

// normalised compares times by instant (JSON keeps the offset, not the *Location).
func normalised(t *Trace) *Trace {
	c := &Trace{Header: t.Header, Events: append([]Event(nil), t.Events...)}
	c.Header.Start, c.Header.End = c.Header.Start.UTC(), c.Header.End.UTC()
	for i := range c.Events {
		c.Events[i].At = c.Events[i].At.UTC()
		if !c.Events[i].Finished.IsZero() {
			c.Events[i].Finished = c.Events[i].Finished.UTC()
		}
	}
	return c
}

// TestReadRefusesBadTraces: each kind of bad line is refused with its line number and
// what to write instead, never read as a smaller trace.
func TestReadRefusesBadTraces(t *testing.T) {
	h := `{"version":1,"pool":"lab","start":"2026-11-30T08:00:00Z","end":"2026-12-01T08:00:00Z","spec":{"vcenter":{"server":"","datacenter":"","credentialsSecretRef":{"name":"","namespace":""}},"layouts":null,"defaultLayout":"","drain":{},"readiness":{}}}`
	arrive := `{"at":"2026-11-30T09:00:00Z","kind":"arrive","pod":"ml/a","gpus":1}`
	for _, c := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"empty", nil, "empty trace"},
		{"not JSON", []string{"hello"}, "line 1"},
		{"other version", []string{strings.Replace(h, `"version":1`, `"version":2`, 1)}, "this gpupool reads version 1"},
		{"no version", []string{strings.Replace(h, `"version":1,`, ``, 1)}, "trace version 0"},
		{"unknown header field", []string{strings.Replace(h, `"pool"`, `"pools"`, 1)}, `unknown field "pools"`},
		{"reversed period", []string{strings.Replace(h, `"end":"2026-12-01T08:00:00Z"`, `"end":"2026-11-29T08:00:00Z"`, 1)}, "empty or reversed"},
		{"unknown kind", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"left","pod":"ml/a"}`}, `line 2 (left ml/a): kind "left"; write arrive, start, end or switch`},
		{"unknown event field", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"arrive","pod":"ml/a","gpu":1}`}, `line 2: json: unknown field "gpu"`},
		{"no GPUs", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"arrive","pod":"ml/a"}`}, "asks for at least one GPU (gpus 0)"},
		{"negative GPUs", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"arrive","pod":"ml/a","gpus":-2}`}, "(gpus -2)"},
		{"before the period", []string{h, strings.Replace(arrive, "2026-11-30T09", "2026-11-30T07", 1)}, "outside the period"},
		{"after the period", []string{h, strings.Replace(arrive, "2026-11-30T09", "2026-12-02T09", 1)}, "outside the period"},
		{"out of order", []string{h, arrive, `{"at":"2026-11-30T08:30:00Z","kind":"arrive","pod":"ml/b","gpus":1}`}, "line 3 (arrive ml/b): events must be in the order of time"},
		{"arrived twice", []string{h, arrive, arrive}, "line 3 (arrive ml/a): the pod arrived again before it ended"},
		{"switch after the period", []string{h, `{"at":"2026-12-02T09:00:00Z","kind":"switch","to":"day"}`}, "outside the period"},
		{"a line too long", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"arrive","pod":"` + strings.Repeat("x", 5<<20) + `","gpus":1}`}, "line 2: bufio.Scanner: token too long"},
		{"start without arrival", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"start","pod":"ml/a"}`}, "a start follows the pod's arrival"},
		{"started twice", []string{h, arrive, `{"at":"2026-11-30T09:00:00Z","kind":"start","pod":"ml/a"}`, `{"at":"2026-11-30T09:00:00Z","kind":"start","pod":"ml/a"}`}, "line 4"},
		{"end without arrival", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"end","pod":"ml/a","outcome":"succeeded"}`}, "an end follows the pod's arrival"},
		{"bad outcome", []string{h, arrive, `{"at":"2026-11-30T09:00:00Z","kind":"end","pod":"ml/a","outcome":"done"}`}, `outcome "done"; write succeeded, failed or deleted (admitted is a Workload's)`},
		{"ended twice", []string{h, arrive, `{"at":"2026-11-30T09:00:00Z","kind":"end","pod":"ml/a","outcome":"deleted"}`, `{"at":"2026-11-30T09:00:00Z","kind":"end","pod":"ml/a","outcome":"deleted"}`}, "line 4"},
		{"a pod admitted", []string{h, arrive, `{"at":"2026-11-30T09:00:00Z","kind":"end","pod":"ml/a","outcome":"admitted"}`}, "(admitted is a Workload's)"},
		{"a Workload started", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"arrive","pod":"workload:ml/w","gpus":1,"workload":true}`, `{"at":"2026-11-30T09:00:00Z","kind":"start","pod":"workload:ml/w"}`}, "a Workload does not start"},
		{"a Workload succeeded", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"arrive","pod":"workload:ml/w","gpus":1,"workload":true}`, `{"at":"2026-11-30T09:00:00Z","kind":"end","pod":"workload:ml/w","outcome":"succeeded"}`}, `a Workload ends admitted, not "succeeded"`},
		{"switch to nowhere", []string{h, `{"at":"2026-11-30T09:00:00Z","kind":"switch"}`}, "names the layout it switched to"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := strings.Join(c.lines, "\n")
			if len(c.lines) > 0 {
				in += "\n"
			}
			tr, err := Read(strings.NewReader(in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("read %+v, error %v; want an error with %q", tr, err, c.want)
			}
		})
	}
}

// TestConstraintsRoundTrip: the constraints recorded of a pod make a pod the matcher
// sees as the original (node selector, required affinity, tolerations).
func TestConstraintsRoundTrip(t *testing.T) {
	p := &corev1.Pod{Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"a": "b"},
		Tolerations:  []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "x", Operator: corev1.NodeSelectorOpIn, Values: []string{"y"}}}}}}}},
	}}
	back := ConstraintsOf(p).Pod()
	if !reflect.DeepEqual(back.Spec.NodeSelector, p.Spec.NodeSelector) || !reflect.DeepEqual(back.Spec.Tolerations, p.Spec.Tolerations) ||
		!reflect.DeepEqual(back.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution) {
		t.Fatalf("constraints round trip: %+v, want %+v", back.Spec, p.Spec)
	}
	if c := ConstraintsOf(&corev1.Pod{}); c.Pod().Spec.Affinity != nil {
		t.Fatal("a pod without affinity gained one")
	}
}
