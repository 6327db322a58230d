// Package argocd_test runs docs/argocd-health.lua with gopher-lua, the Lua interpreter
// Argo CD embeds for health checks, over pools in the states gpupool reports.
package argocd_test

import (
	"os"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func cond(typ string, status bool, reason string) metav1.Condition {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: reason + " message"}
}

// The condition sets are those controllers/status.go (summarize) computes.
func TestArgoCDHealth(t *testing.T) {
	script, err := os.ReadFile("../../docs/argocd-health.lua")
	if err != nil {
		t.Fatal(err)
	}
	steady := []metav1.Condition{cond("Paused", false, "NotPaused"), cond("Stalled", false, "AsExpected"), cond("Degraded", false, "AsExpected"),
		cond("Progressing", false, "Idle"), cond("Reconciling", false, "Idle"), cond("Ready", true, "LayoutActive")}
	cases := []struct {
		name       string
		generation int64
		observed   int64
		conds      []metav1.Condition
		want       string
		message    string
	}{
		{name: "new, not reconciled yet", generation: 1, want: "Progressing", message: "generation 1"},
		{name: "at its layout", generation: 2, observed: 2, conds: steady, want: "Healthy", message: "LayoutActive"},
		{name: "spec changed, not acted on", generation: 3, observed: 2, conds: steady, want: "Progressing", message: "generation 3"},
		{name: "transition running", generation: 1, observed: 1, want: "Progressing", message: "Transitioning",
			conds: []metav1.Condition{cond("Stalled", false, "AsExpected"), cond("Degraded", false, "AsExpected"), cond("Progressing", true, "Transitioning"),
				cond("Reconciling", true, "Transitioning"), cond("Ready", false, "Transitioning")}},
		{name: "task failed, retrying", generation: 1, observed: 1, want: "Progressing", message: "Transitioning",
			conds: []metav1.Condition{cond("Stalled", false, "AsExpected"), cond("Degraded", true, "VSphereTaskFailed"), cond("Reconciling", true, "Transitioning"),
				cond("Ready", false, "Transitioning")}},
		{name: "drain aborted", generation: 1, observed: 1, want: "Degraded", message: "DrainAborted",
			conds: []metav1.Condition{cond("Stalled", false, "AsExpected"), cond("Degraded", true, "DrainAborted"), cond("Progressing", false, "DrainAborted"),
				cond("Reconciling", false, "DrainAborted"), cond("Ready", false, "DrainAborted")}},
		{name: "layout infeasible", generation: 1, observed: 1, want: "Degraded", message: "LayoutInfeasible",
			conds: []metav1.Condition{cond("Stalled", true, "LayoutInfeasible"), cond("Reconciling", false, "LayoutInfeasible"), cond("Ready", false, "LayoutInfeasible")}},
		{name: "paused", generation: 1, observed: 1, want: "Suspended", message: "Paused",
			conds: []metav1.Condition{cond("Paused", true, "Paused"), cond("Reconciling", false, "Paused"), cond("Ready", false, "Paused")}},
		{name: "vCenter unreachable at first", generation: 1, observed: 1, want: "Progressing", message: "VCenterUnavailable",
			conds: []metav1.Condition{cond("Degraded", true, "VCenterUnavailable"), cond("Reconciling", true, "VCenterUnavailable"), cond("Ready", false, "VCenterUnavailable")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &gpupoolv1.GPUPoolProfile{
				TypeMeta:   metav1.TypeMeta{APIVersion: gpupoolv1.GroupVersion.String(), Kind: "GPUPoolProfile"},
				ObjectMeta: metav1.ObjectMeta{Name: "daynight", Generation: c.generation},
				Status:     gpupoolv1.GPUPoolProfileStatus{ObservedGeneration: c.observed, Conditions: c.conds},
			}
			status, msg := health(t, string(script), p)
			if status != c.want || !strings.Contains(msg, c.message) {
				t.Errorf("health %s (%s), want %s with %q", status, msg, c.want, c.message)
			}
		})
	}
}

// health runs the script as Argo CD does: the object as the global obj, the script's
// return value a table with status and message.
func health(t *testing.T, script string, p *gpupoolv1.GPUPoolProfile) (string, string) {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer L.Close()
	L.SetGlobal("obj", toLua(L, u))
	if err := L.DoString(script); err != nil {
		t.Fatal(err)
	}
	ret, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the script returned %v, not a table", L.Get(-1))
	}
	return ret.RawGetString("status").String(), ret.RawGetString("message").String()
}

// toLua converts JSON-like Go values to Lua values, as Argo CD does.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	panic("unexpected JSON value")
}
