package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func TestPoolCollectorExportsStatus(t *testing.T) {
	s := runtime.NewScheme()
	if err := gpupoolv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(time.Unix(1800000000, 0))
	start := metav1.NewTime(time.Unix(1799990000, 0))
	pool := &gpupoolv1.GPUPoolProfile{ObjectMeta: metav1.ObjectMeta{Name: "daynight"}}
	pool.Status = gpupoolv1.GPUPoolProfileStatus{
		ActiveLayout: "day", DesiredLayout: "night",
		NextTransition: &gpupoolv1.NextTransition{Layout: "day", At: at},
		Transition:     &gpupoolv1.TransitionStatus{ID: "t1", From: "day", To: "night", StartTime: start},
		Plan:           &gpupoolv1.PlanPreview{For: gpupoolv1.PlanForNext, Layout: "day", At: &at, Problems: []string{"VMNotFound: VM day-1 not found"}},
		Conditions: []metav1.Condition{
			{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Transitioning"},
			{Type: "Degraded", Status: metav1.ConditionTrue, Reason: "VCenterUnavailable"},
		},
	}
	c := &PoolCollector{Reader: fake.NewClientBuilder().WithScheme(s).WithObjects(pool).Build()}
	want := `
# HELP gpupool_condition 1 for each condition a pool reports, with its status and reason.
# TYPE gpupool_condition gauge
gpupool_condition{pool="daynight",reason="Transitioning",status="False",type="Ready"} 1
gpupool_condition{pool="daynight",reason="VCenterUnavailable",status="True",type="Degraded"} 1
# HELP gpupool_layout_info Always 1: a pool's active and desired layout (equal when the pool is where it should be).
# TYPE gpupool_layout_info gauge
gpupool_layout_info{active="day",desired="night",pool="daynight"} 1
# HELP gpupool_next_layout_feasible 1 when the next scheduled switch's layout can be reached from the state observed now, 0 when its plan (status.plan) has problems; absent when no next switch is planned.
# TYPE gpupool_next_layout_feasible gauge
gpupool_next_layout_feasible{layout="day",pool="daynight"} 0
# HELP gpupool_next_transition_timestamp_seconds When the pool's next scheduled switch starts (Unix time), and to which layout.
# TYPE gpupool_next_transition_timestamp_seconds gauge
gpupool_next_transition_timestamp_seconds{layout="day",pool="daynight"} 1.8e+09
# HELP gpupool_transition_start_timestamp_seconds When the transition in progress started (Unix time); absent when none is.
# TYPE gpupool_transition_start_timestamp_seconds gauge
gpupool_transition_start_timestamp_seconds{from="day",pool="daynight",to="night"} 1.79999e+09
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
