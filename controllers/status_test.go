package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/plan"
)

// TestSummarize: the conditions and the phase follow from the pass's facts and the
// status alone, in the style of Cluster API's machine_controller_status_test.go.
func TestSummarize(t *testing.T) {
	now := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)
	type want struct {
		phase         gpupoolv1.Phase
		ready         metav1.ConditionStatus
		readyReason   string
		stalled       metav1.ConditionStatus
		stalledReason string
		paused        metav1.ConditionStatus
	}
	inFlight := func(st *gpupoolv1.GPUPoolProfileStatus) {
		st.Transition = &gpupoolv1.TransitionStatus{ID: "night-1", From: "day", To: "night", StartTime: metav1.NewTime(now)}
	}
	tests := []struct {
		name   string
		facts  facts
		status func(*gpupoolv1.GPUPoolProfileStatus)
		want   want
	}{{
		name:  "steady on the wanted layout",
		facts: facts{observed: true, done: true},
		want:  want{gpupoolv1.PhaseSteady, metav1.ConditionTrue, ReasonLayoutActive, metav1.ConditionFalse, ReasonAsExpected, metav1.ConditionFalse},
	}, {
		name: "a transition in progress", facts: facts{observed: true}, status: inFlight,
		want: want{gpupoolv1.PhaseTransitioning, metav1.ConditionFalse, ReasonTransitioning, metav1.ConditionFalse, ReasonAsExpected, metav1.ConditionFalse},
	}, {
		name:  "paused",
		facts: facts{paused: true},
		want:  want{gpupoolv1.PhasePaused, metav1.ConditionFalse, ReasonPaused, "", "", metav1.ConditionTrue},
	}, {
		name:  "the spec cannot be evaluated",
		facts: facts{invalidSpec: "schedule.timeZone \"Mars\""},
		want:  want{gpupoolv1.PhaseBlocked, metav1.ConditionFalse, ReasonInvalidSpec, metav1.ConditionTrue, ReasonInvalidSpec, metav1.ConditionFalse},
	}, {
		name:  "vCenter refuses the credentials",
		facts: facts{credentials: "login refused"},
		want:  want{gpupoolv1.PhaseBlocked, metav1.ConditionFalse, ReasonCredentials, metav1.ConditionTrue, ReasonCredentials, metav1.ConditionFalse},
	}, {
		name:  "vCenter unreachable before anything was observed",
		facts: facts{vcenter: "dial tcp: connection refused"},
		want:  want{gpupoolv1.PhasePending, metav1.ConditionFalse, ReasonVCenterUnavailable, metav1.ConditionFalse, ReasonAsExpected, metav1.ConditionFalse},
	}, {
		name:  "the wanted layout does not fit",
		facts: facts{observed: true, problems: []plan.Problem{{Reason: ReasonInfeasible, Message: "GPU full"}}},
		want:  want{gpupoolv1.PhaseBlocked, metav1.ConditionFalse, ReasonInfeasible, metav1.ConditionTrue, ReasonInfeasible, metav1.ConditionFalse},
	}, {
		name: "an aborted drain", facts: facts{observed: true},
		status: func(st *gpupoolv1.GPUPoolProfileStatus) {
			inFlight(st)
			st.Transition.AbortedTime = &metav1.Time{Time: now}
			st.Transition.Message = "aborted: a PDB"
		},
		want: want{gpupoolv1.PhaseBlocked, metav1.ConditionFalse, ReasonDrainAborted, metav1.ConditionFalse, ReasonAsExpected, metav1.ConditionFalse},
	}, {
		name:  "being deleted while tasks are in flight",
		facts: facts{observed: true, deleting: "waiting for 1 vSphere task"},
		want:  want{gpupoolv1.PhaseSteady, metav1.ConditionFalse, ReasonDeleting, metav1.ConditionFalse, ReasonAsExpected, metav1.ConditionFalse},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pool := &gpupoolv1.GPUPoolProfile{Status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day", DesiredLayout: "day"}}
			if tc.status != nil {
				tc.status(&pool.Status)
			}
			s := &scope{pool: pool, now: now, facts: tc.facts, decision: plan.Decision{Layout: "day", Reason: gpupoolv1.DesiredBySchedule}}
			summarize(s)
			if pool.Status.Phase != tc.want.phase {
				t.Errorf("phase %s, want %s", pool.Status.Phase, tc.want.phase)
			}
			check := func(typ string, status metav1.ConditionStatus, reason string) {
				c := findCondition(pool, typ)
				if status == "" {
					return
				}
				if c == nil || c.Status != status || c.Reason != reason {
					t.Errorf("%s = %+v, want %s (%s)", typ, c, status, reason)
				}
			}
			check(gpupoolv1.ConditionReady, tc.want.ready, tc.want.readyReason)
			check(gpupoolv1.ConditionStalled, tc.want.stalled, tc.want.stalledReason)
			check(gpupoolv1.ConditionPaused, tc.want.paused, map[metav1.ConditionStatus]string{metav1.ConditionTrue: ReasonPaused, metav1.ConditionFalse: ReasonNotPaused}[tc.want.paused])
		})
	}
}

// TestConditionsSayWhyNothingMoves: a pass that learnt nothing because vCenter refused
// the login or could not be reached replaces an earlier "nothing to do" with the reason;
// a new pool names no empty layout.
func TestConditionsSayWhyNothingMoves(t *testing.T) {
	now := time.Date(2031, 3, 17, 7, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		facts      facts
		wantReason string
		wantMsg    string
	}{
		{"credentials refused", facts{credentials: "login refused"}, ReasonCredentials, "Stalled"},
		{"vCenter unreachable", facts{vcenter: "dial tcp: connection refused"}, ReasonVCenterUnavailable, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &gpupoolv1.GPUPoolProfile{Status: gpupoolv1.GPUPoolProfileStatus{ActiveLayout: "day", DesiredLayout: "day"}}
			setCond(pool, gpupoolv1.ConditionProgressing, false, ReasonIdle, "layout day: nothing to do")
			summarize(&scope{pool: pool, now: now, facts: tc.facts, decision: plan.Decision{Layout: "day"}})
			c := findCondition(pool, gpupoolv1.ConditionProgressing)
			if c == nil || c.Reason != tc.wantReason || !strings.Contains(c.Message, tc.wantMsg) {
				t.Fatalf("Progressing = %+v, want reason %s saying %q", c, tc.wantReason, tc.wantMsg)
			}
		})
	}
	pool := &gpupoolv1.GPUPoolProfile{Status: gpupoolv1.GPUPoolProfileStatus{DesiredLayout: "night"}}
	summarize(&scope{pool: pool, now: now, facts: facts{observed: true}, decision: plan.Decision{Layout: "night"}})
	if c := findCondition(pool, gpupoolv1.ConditionReady); c == nil || strings.Contains(c.Message, `""`) || !strings.Contains(c.Message, "no layout is active yet") {
		t.Fatalf("Ready of a new pool = %+v, want no empty layout named", c)
	}
}

// TestProgress: status.progress, the WORKERS column of kubectl get gpp -o wide, counts
// the workers with no step left.
func TestProgress(t *testing.T) {
	w := func(steps ...gpupoolv1.Step) []gpupoolv1.WorkerStatus {
		var ws []gpupoolv1.WorkerStatus
		for i, s := range steps {
			ws = append(ws, gpupoolv1.WorkerStatus{VM: fmt.Sprintf("vm-%d", i), Step: s})
		}
		return ws
	}
	for _, tc := range []struct {
		ws   []gpupoolv1.WorkerStatus
		want string
	}{
		{nil, ""},
		{w(gpupoolv1.StepNone, gpupoolv1.StepNone), "2/2"},
		{w(gpupoolv1.StepNone, gpupoolv1.StepParkRequired, gpupoolv1.StepNone, gpupoolv1.StepWaitNodeReady, gpupoolv1.StepNone), "3/5"},
	} {
		if got := progress(tc.ws); got != tc.want {
			t.Errorf("progress(%v) = %q, want %q", tc.ws, got, tc.want)
		}
	}
}
