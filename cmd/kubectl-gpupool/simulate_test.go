package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/replay"
	"github.com/gpupool/gpupool/internal/trace"
	"github.com/gpupool/gpupool/test/demandsim"
)

// offline runs the plugin without a cluster.
func offline(args ...string) (string, error) {
	var out bytes.Buffer
	a := newApp(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}, func() time.Time { return mondayMorning })
	cmd := a.command()
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// weekFiles writes bench-demand's first synthetic week as kubectl gpupool record would
// have recorded it under the schedule alone, and the bench's demand policy as a
// candidate manifest.
func weekFiles(t *testing.T) (dir, tracePath, candidate string) {
	t.Helper()
	dir = t.TempDir()
	start := time.Date(2026, time.November, 30, 0, 0, 0, 0, berlin)
	w := demandsim.Week(start, 1)
	live := demandsim.WeekPool("week", "Europe/Berlin", w, nil)
	res, err := demandsim.Run(w, &live.Spec, 15*time.Minute, false)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := w.Trace("week", &live.Spec, res)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := trace.Write(&buf, tr); err != nil {
		t.Fatal(err)
	}
	tracePath = filepath.Join(dir, "week.jsonl")
	if err := os.WriteFile(tracePath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(demandsim.WeekPool("week", "Europe/Berlin", w, demandsim.BenchPolicy()))
	if err != nil {
		t.Fatal(err)
	}
	candidate = filepath.Join(dir, "demand.yaml")
	if err := os.WriteFile(candidate, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, tracePath, candidate
}

// TestSimulateWeek (issue 39, simulate): the week replayed under its live spec, the
// demand candidate and a sweep of the candidate's cooldown prints one row each, with the
// figures replay.Run gives for that spec; live departs from nothing recorded (the week
// was recorded under it), the candidate from live where demand first brings night in;
// the same trace and specs print the same bytes; JSON carries the same rows.
func TestSimulateWeek(t *testing.T) {
	_, tracePath, candidate := weekFiles(t)
	args := []string{"simulate", tracePath, "--candidate", candidate, "--sweep", "demand.minDwell=10m,60m", "--step", "1m"}
	out, err := offline(args...)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	t.Logf("\n%s", out)
	lines := strings.Split(out, "\n")
	row := func(name string) []string {
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(l, name+" ") {
				return f
			}
		}
		t.Fatalf("no row %q in\n%s", name, out)
		return nil
	}
	f, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Read(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	cand, err := readCandidate(candidate)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		spec *gpupoolv1.GPUPoolProfileSpec
		// field is where the row's figures start (after the name's words).
		field int
	}{{"live", &tr.Header.Spec, 1}, {"demand.yaml", cand, 1}} {
		want, err := replay.Run(tr, c.spec, replay.Options{Step: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got := row(c.name)
		wantFields := []string{fmt.Sprintf("%.2f", want.QueuedGPUHours), shortDur(want.P50Wait()), shortDur(want.P95Wait()),
			fmt.Sprintf("%.2f", want.IdleGPUHours), fmt.Sprintf("%.2f", want.UnservedGPUHours), fmt.Sprint(len(want.Switches)), fmt.Sprint(want.Evictions)}
		if strings.Join(got[c.field:c.field+len(wantFields)], " ") != strings.Join(wantFields, " ") {
			t.Errorf("row %s: %v, want %v", c.name, got, wantFields)
		}
	}
	if r := row("live"); r[len(r)-1] != "none" {
		t.Errorf("live departs from the recording: %v", r)
	}
	if r := strings.Join(row("demand.yaml"), " "); !strings.Contains(r, "to night at Mon") || !strings.Contains(r, "(live: to night at Mon 20:00:00)") {
		t.Errorf("the candidate's first divergence: %s", r)
	}
	row("demand.yaml demand.minDwell=10m")
	row("demand.yaml demand.minDwell=60m")

	again, err := offline(args...)
	if err != nil || again != out {
		t.Errorf("the same trace and specs printed differently (%v):\n%s\n---\n%s", err, out, again)
	}
	js, err := offline(append(args, "-o", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Pool string `json:"pool"`
		Rows []struct {
			Name   string        `json:"name"`
			Result replay.Result `json:"result"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil || doc.Pool != "week" || len(doc.Rows) != 4 || doc.Rows[1].Name != "demand.yaml" {
		t.Errorf("json: %v %+v", err, doc)
	}
}

// TestSweepValuesWithCommas: values that hold commas (cron's day lists) are separated by
// semicolons, one row each, named by the value.
func TestSweepValuesWithCommas(t *testing.T) {
	_, tracePath, _ := weekFiles(t)
	out, err := offline("simulate", tracePath, "--step", "10m", "--sweep", "schedule.windows[0].start=0 20 * * 1,2,3;0 21 * * *")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, row := range []string{"live schedule.windows[0].start=0 20 * * 1,2,3 ", "live schedule.windows[0].start=0 21 * * * "} {
		if !strings.Contains(out, row) {
			t.Errorf("no row %q:\n%s", row, out)
		}
	}
}

// TestSimulateRefusesBadInput: every bad trace, candidate, sweep or flag is an error that
// names what is wrong and what to write; none prints a table.
func TestSimulateRefusesBadInput(t *testing.T) {
	dir, tracePath, candidate := weekFiles(t)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cand, err := os.ReadFile(candidate)
	if err != nil {
		t.Fatal(err)
	}
	notPool := write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
	unknown := write("unknown.yaml", strings.Replace(string(cand), "defaultLayout:", "defaultLayoutt:", 1))
	invalid := write("invalid.yaml", strings.Replace(string(cand), "server: vcenter.example.com", "server: \"\"", 1))
	badTrace := write("bad.jsonl", "{\"version\":7}\n")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing trace", []string{"simulate", filepath.Join(dir, "none.jsonl")}, "no such file"},
		{"bad trace", []string{"simulate", badTrace}, "line 1: trace version 7"},
		{"not a pool", []string{"simulate", tracePath, "--candidate", notPool}, `kind "ConfigMap"; give a GPUPoolProfile manifest`},
		{"unknown field", []string{"simulate", tracePath, "--candidate", unknown}, `unknown field "defaultLayoutt"`},
		{"invalid candidate", []string{"simulate", tracePath, "--candidate", invalid}, "spec.vcenter.server"},
		{"sweep without values", []string{"simulate", tracePath, "--sweep", "demand.cooldown"}, "write FIELD=V1,V2,..."},
		{"sweep of an unknown field", []string{"simulate", tracePath, "--sweep", "demand.cooldwn=5m"}, `unknown field "cooldwn"`},
		{"sweep past a list", []string{"simulate", tracePath, "--candidate", candidate, "--sweep", "demand.rules[5].for=5m"}, "spec.demand.rules has 2 items: no index 5"},
		{"sweep with a bad index", []string{"simulate", tracePath, "--sweep", "layouts[x].name=a"}, "write an index such as layouts[0]"},
		{"sweep into a value", []string{"simulate", tracePath, "--sweep", "defaultLayout.name=a"}, "spec.defaultLayout is not an object"},
		{"sweep to a value admission refuses", []string{"simulate", tracePath, "--candidate", candidate, "--sweep", "demand.cooldown=-5m"}, "demand.cooldown=-5m: "},
		{"sweep to a value of the wrong type", []string{"simulate", tracePath, "--sweep", "demand=5"}, "demand: json: cannot unmarshal number"},
		{"bad step", []string{"simulate", tracePath, "--step", "0s"}, "--step 0s: give a positive step"},
		{"negative switch time", []string{"simulate", tracePath, "--switch-time", "-1m"}, "--switch-time -1m0s: give a positive duration"},
		{"yaml", []string{"simulate", tracePath, "-o", "yaml"}, `output format "yaml" is not supported by simulate`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := offline(c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("simulate %v: %v, want an error with %q\n%s", c.args, err, c.want, out)
			}
			if strings.Contains(out, "POLICY") {
				t.Errorf("a table printed despite the error:\n%s", out)
			}
		})
	}
}
