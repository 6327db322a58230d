package controllers

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// What of a status may wait for a later write (statusdefer.go): every field of the
// status and of a worker is named here, so that a field added later must be put in one
// class or the other before the tests pass.
var (
	statusMayWait = map[string]bool{"Progress": true, "Plan": true}
	// Workers and Conditions are judged entry by entry (the tests below); every other
	// field of the status must be written at once.
	statusByEntry = map[string]bool{"Workers": true, "Conditions": true}
	workerMayWait = map[string]bool{
		"Node": true, "Host": true, "GPU": true, "Profile": true, "PowerState": true,
		"Step": true, "Message": true,
	}
	workerWritten = map[string]bool{"VM": true, "Attempts": true, "NextRetryTime": true, "GuestShutdownTime": true}
)

// changed sets v to a value that differs from the one it has: a string or a number
// moved, a time an hour on, a nil pointer or list given a zero element, a struct's first
// field changed.
func changed(t *testing.T, v reflect.Value) {
	t.Helper()
	if v.Type() == reflect.TypeFor[metav1.Time]() {
		v.Set(reflect.ValueOf(metav1.NewTime(v.Interface().(metav1.Time).Add(time.Hour))))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "-changed")
	case reflect.Int32, reflect.Int64, reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
			return
		}
		changed(t, v.Elem())
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
	case reflect.Struct:
		changed(t, v.Field(0))
	default:
		t.Fatalf("no way to change a %s", v.Type())
	}
}

func sampleStatus() gpupoolv1.GPUPoolProfileStatus {
	at := metav1.NewTime(time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC))
	return gpupoolv1.GPUPoolProfileStatus{
		ObservedGeneration: 3, ActiveLayout: "day", DesiredLayout: "night", DesiredReason: gpupoolv1.DesiredReason("Override"),
		Phase: gpupoolv1.Phase("Transitioning"), Progress: "1/2",
		Transition: &gpupoolv1.TransitionStatus{ID: "t1", From: "day", To: "night", StartTime: at},
		Conditions: []metav1.Condition{
			{Type: gpupoolv1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: "Switching", Message: "1 of 2 workers settled", LastTransitionTime: at, ObservedGeneration: 3},
			{Type: gpupoolv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Switching", Message: "switching to night", LastTransitionTime: at, ObservedGeneration: 3},
		},
		Plan: &gpupoolv1.PlanPreview{For: gpupoolv1.PlanForCurrent, Layout: "night", Steps: 2},
		Workers: []gpupoolv1.WorkerStatus{
			{VM: "day-0", Node: "day-0", Host: "esx-1", GPU: "0000:3b:00.0", Profile: "grid_p100-4q", PowerState: "poweredOn", Step: gpupoolv1.Step("Park"), StepStartTime: &at,
				Task: &gpupoolv1.TaskReference{Operation: "Suspend", StartTime: at, KnownTasks: []string{"task-1"}}, Message: "Suspend starting"},
			{VM: "night-0", Host: "esx-1", PowerState: "poweredOff"},
		},
	}
}

// TestMustWriteStatusFields: a change of any field of the status but the workers, the
// progress, the plan's preview and the conditions' words must be written at once; those
// may wait.
func TestMustWriteStatusFields(t *testing.T) {
	typ := reflect.TypeFor[gpupoolv1.GPUPoolProfileStatus]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if statusByEntry[f.Name] {
			continue
		}
		stored, next := sampleStatus(), sampleStatus()
		changed(t, reflect.ValueOf(&next).Elem().Field(i))
		got := mustWrite(&stored, &next)
		if statusMayWait[f.Name] != (got == "") {
			t.Errorf("status.%s changed: mustWrite = %q; want it to wait: %v", f.Name, got, statusMayWait[f.Name])
		}
	}
	stored, next := sampleStatus(), sampleStatus()
	if got := mustWrite(&stored, &next); got != "" {
		t.Errorf("nothing changed: mustWrite = %q", got)
	}
}

// TestMustWriteWorkerFields: of a worker, where it is, its power, profile, step and
// words may wait (its task and its step's start: the tests below); its VM (the list reordered), its attempts, retry time and guest
// shutdown may not; a worker added or removed may not.
func TestMustWriteWorkerFields(t *testing.T) {
	typ := reflect.TypeFor[gpupoolv1.WorkerStatus]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Name == "Task" || f.Name == "StepStartTime" {
			continue // TestMustWriteTasks, TestMustWriteStepStarts
		}
		if workerMayWait[f.Name] == workerWritten[f.Name] {
			t.Errorf("worker field %s is in neither class or both: say whether it may wait", f.Name)
			continue
		}
		for w := range 2 { // a worker with every field set, and one with few
			stored, next := sampleStatus(), sampleStatus()
			changed(t, reflect.ValueOf(&next.Workers[w]).Elem().Field(i))
			got := mustWrite(&stored, &next)
			if workerMayWait[f.Name] != (got == "") {
				t.Errorf("worker %d's %s changed: mustWrite = %q; want it to wait: %v", w, f.Name, got, workerMayWait[f.Name])
			}
		}
	}
	stored, next := sampleStatus(), sampleStatus()
	next.Workers = append(next.Workers, gpupoolv1.WorkerStatus{VM: "night-1"})
	if mustWrite(&stored, &next) == "" || mustWrite(&next, &stored) == "" {
		t.Error("a worker added or removed may wait")
	}
}

// TestMustWriteTasks: a task's id recorded on its stored intent, and a task gone (ended,
// or its intent answered "not asked"), may wait; a new intent, another intent in place of
// the stored one, and an id that changes may not.
func TestMustWriteTasks(t *testing.T) {
	at := time.Date(2031, 6, 15, 10, 0, 5, 0, time.UTC)
	intent := &gpupoolv1.TaskReference{Operation: "Suspend", StartTime: metav1.NewTime(at), KnownTasks: []string{"task-1"}}
	withID := func(ref *gpupoolv1.TaskReference, id string) *gpupoolv1.TaskReference {
		c := ref.DeepCopy()
		c.ID = id
		return c
	}
	other := func(change func(*gpupoolv1.TaskReference)) *gpupoolv1.TaskReference {
		c := intent.DeepCopy()
		change(c)
		return c
	}
	for _, c := range []struct {
		name         string
		stored, next *gpupoolv1.TaskReference
		wait         bool
	}{
		{"none", nil, nil, true},
		{"intent as stored", intent, intent, true},
		{"id recorded", intent, withID(intent, "task-7"), true},
		{"task as stored", withID(intent, "task-7"), withID(intent, "task-7"), true},
		{"task ended", withID(intent, "task-7"), nil, true},
		{"intent not asked", intent, nil, true},
		{"new intent", nil, intent, false},
		{"new task", nil, withID(intent, "task-7"), false},
		{"id changed", withID(intent, "task-7"), withID(intent, "task-8"), false},
		{"id gone", withID(intent, "task-7"), intent, false},
		{"another operation", intent, other(func(r *gpupoolv1.TaskReference) { r.Operation = "PowerOn" }), false},
		{"another time", intent, other(func(r *gpupoolv1.TaskReference) { r.StartTime = metav1.NewTime(at.Add(time.Second)) }), false},
		{"other known tasks", intent, other(func(r *gpupoolv1.TaskReference) { r.KnownTasks = nil }), false},
		{"another intent with an id", intent, withID(other(func(r *gpupoolv1.TaskReference) { r.Operation = "PowerOn" }), "task-7"), false},
	} {
		stored, next := sampleStatus(), sampleStatus()
		stored.Workers[1].Task, next.Workers[1].Task = c.stored, c.next
		if got := mustWrite(&stored, &next); (got == "") != c.wait {
			t.Errorf("%s: mustWrite = %q; want it to wait: %v", c.name, got, c.wait)
		}
	}
}

// TestMustWriteStepStarts: a step begun, ended or moved to another step may wait (a
// crash begins it again later: its timeouts end later, never sooner); the same step
// begun again since the start stored may not (after a crash the older start would end
// its timeouts sooner than decided).
func TestMustWriteStepStarts(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(30 * time.Second))
	drain, park := gpupoolv1.Step("Drain"), gpupoolv1.Step("Park")
	for _, c := range []struct {
		name               string
		fromStep, toStep   gpupoolv1.Step
		fromStart, toStart *metav1.Time
		wait               bool
	}{
		{"no step", "", "", nil, nil, true},
		{"step begun", "", drain, nil, &t0, true},
		{"step ended", drain, "", &t0, nil, true},
		{"next step begun", drain, park, &t0, &t1, true},
		{"same step, same start", drain, drain, &t0, &t0, true},
		{"same step begun again", drain, drain, &t0, &t1, false},
	} {
		stored, next := sampleStatus(), sampleStatus()
		stored.Workers[1].Step, stored.Workers[1].StepStartTime = c.fromStep, c.fromStart
		next.Workers[1].Step, next.Workers[1].StepStartTime = c.toStep, c.toStart
		if got := mustWrite(&stored, &next); (got == "") != c.wait {
			t.Errorf("%s: mustWrite = %q; want it to wait: %v", c.name, got, c.wait)
		}
	}
}

// TestMustWriteConditions: a condition's message may wait; its status, reason, time,
// generation, type, and a condition added or removed may not.
func TestMustWriteConditions(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*metav1.Condition)
		wait   bool
	}{
		{"message", func(c *metav1.Condition) { c.Message = "2 of 2 workers settled" }, true},
		{"status", func(c *metav1.Condition) {
			c.Status = map[metav1.ConditionStatus]metav1.ConditionStatus{metav1.ConditionTrue: metav1.ConditionFalse, metav1.ConditionFalse: metav1.ConditionTrue}[c.Status]
		}, false},
		{"reason", func(c *metav1.Condition) { c.Reason = "Blocked" }, false},
		{"time", func(c *metav1.Condition) {
			c.LastTransitionTime = metav1.NewTime(c.LastTransitionTime.Add(time.Second))
		}, false},
		{"generation", func(c *metav1.Condition) { c.ObservedGeneration++ }, false},
		{"type", func(c *metav1.Condition) { c.Type = gpupoolv1.ConditionStalled }, false},
	} {
		for i := range 2 {
			stored, next := sampleStatus(), sampleStatus()
			c.change(&next.Conditions[i])
			if got := mustWrite(&stored, &next); (got == "") != c.wait {
				t.Errorf("condition %d's %s changed: mustWrite = %q; want it to wait: %v", i, c.name, got, c.wait)
			}
		}
	}
	stored, next := sampleStatus(), sampleStatus()
	next.Conditions = next.Conditions[:1]
	if mustWrite(&stored, &next) == "" || mustWrite(&next, &stored) == "" {
		t.Error("a condition added or removed may wait")
	}
}
