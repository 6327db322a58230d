package localenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestDiagnose: the newest events, oldest first, whichever of their times is set, cut to
// the newest diagnoseEvents; the last lines of the logs named (the manager's when none
// is), in turn; a log that cannot be read says so instead.
func TestDiagnose(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := eventsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2031, 6, 15, 10, 0, 0, 0, time.UTC)
	var objs []runtime.Object
	for i := range diagnoseEvents + 5 {
		at := base.Add(time.Duration(i) * time.Second)
		ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e%03d", i), Namespace: "default"},
			Type: corev1.EventTypeNormal, Reason: fmt.Sprintf("R%03d", i), Note: "note",
			Regarding: corev1.ObjectReference{Kind: "Node", Name: "gpu-day-1"}}
		switch i % 3 { // the times an event may carry, in reverse name order
		case 0:
			ev.EventTime = metav1.NewMicroTime(at)
		case 1:
			ev.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(at)}
			ev.EventTime = metav1.NewMicroTime(base.Add(-time.Hour))
		default:
			ev.DeprecatedLastTimestamp = metav1.NewTime(at)
		}
		ev.Name = fmt.Sprintf("e%03d", diagnoseEvents+5-i)
		objs = append(objs, ev)
	}
	dir := t.TempDir()
	e := &Env{Options: Options{Dir: dir}, Client: fake.NewClientBuilder().WithScheme(scheme).WithRuntimeObjects(objs...).Build()}

	var out bytes.Buffer
	e.Diagnose(context.Background(), &out)
	got := out.String()
	if !strings.Contains(got, "cannot read it") {
		t.Errorf("a missing manager log is not said:\n%s", got)
	}
	var reasons []string
	for _, l := range strings.Split(got, "\n") {
		if f := strings.Fields(l); len(f) > 3 && strings.HasPrefix(f[2], "R") {
			reasons = append(reasons, f[2])
		}
	}
	if len(reasons) != diagnoseEvents || reasons[0] != "R005" || reasons[len(reasons)-1] != fmt.Sprintf("R%03d", diagnoseEvents+4) {
		t.Errorf("events printed %d, from %v to %v: want the newest %d, oldest first (R005 ...)", len(reasons), first(reasons), last(reasons), diagnoseEvents)
	}
	for i := 1; i < len(reasons); i++ {
		if reasons[i] < reasons[i-1] {
			t.Errorf("event %s printed after %s: not oldest first", reasons[i], reasons[i-1])
		}
	}

	var log strings.Builder
	for i := range diagnoseLogLines + 10 {
		fmt.Fprintf(&log, "line %d\n", i)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "logs", "manager.log"), []byte(log.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	e.Diagnose(context.Background(), &out)
	got = out.String()
	if strings.Contains(got, "line 9\n") || !strings.Contains(got, "    line 10\n") || !strings.Contains(got, fmt.Sprintf("    line %d\n", diagnoseLogLines+9)) {
		t.Errorf("the log's tail is not its last %d lines:\n%s", diagnoseLogLines, got)
	}

	// Logs named: each in turn, a missing one said so; the manager's only when named.
	out.Reset()
	e.Diagnose(context.Background(), &out, "powerwire.log", "manager.log")
	got = out.String()
	wire, mgr := strings.Index(got, "powerwire.log\n    cannot read it"), strings.Index(got, "manager.log\n    line 10\n")
	if wire < 0 || mgr < wire {
		t.Errorf("the logs named are not printed in turn, the missing one said so:\n%s", got)
	}
	out.Reset()
	e.Diagnose(context.Background(), &out, "powerwire.log")
	if got = out.String(); strings.Contains(got, "manager.log") {
		t.Errorf("the manager's log printed though not named:\n%s", got)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
