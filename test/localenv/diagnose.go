package localenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	eventsv1 "k8s.io/api/events/v1"
)

// What Diagnose prints at most: the newest events of the cluster and the last lines of
// the manager's log.
const (
	diagnoseEvents   = 120
	diagnoseLogLines = 80
)

// Diagnose prints what a failed end-to-end test needs to be understood after its
// environment is gone: the cluster's newest events, oldest first (gpupool's on its pools
// and nodes, the scheduler's, the kubelets'), and the tail of each of the environment's
// logs named (Dir/logs/NAME), the manager's when none is. A failure to read any of them
// is printed in its place.
func (e *Env) Diagnose(ctx context.Context, out io.Writer, logs ...string) {
	fmt.Fprintf(out, "==> diagnosis: the cluster's last %d events, oldest first\n", diagnoseEvents)
	var evs eventsv1.EventList
	if err := e.Client.List(ctx, &evs); err != nil {
		fmt.Fprintf(out, "    cannot list events: %v\n", err)
	} else {
		items := evs.Items
		slices.SortStableFunc(items, func(a, b eventsv1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
		if len(items) > diagnoseEvents {
			items = items[len(items)-diagnoseEvents:]
		}
		for i := range items {
			ev := &items[i]
			fmt.Fprintf(out, "    %s %s %s %s/%s: %s\n", eventTime(ev).UTC().Format("15:04:05.000"), ev.Type, ev.Reason,
				ev.Regarding.Kind, ev.Regarding.Name, ev.Note)
		}
	}
	if len(logs) == 0 {
		logs = []string{"manager.log"}
	}
	for _, name := range logs {
		printTail(out, filepath.Join(e.Dir, "logs", name))
	}
}

// printTail prints the last diagnoseLogLines lines of the file at path.
func printTail(out io.Writer, path string) {
	fmt.Fprintf(out, "==> diagnosis: the last %d lines of %s\n", diagnoseLogLines, path)
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(out, "    cannot read it: %v\n", err)
		return
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > diagnoseLogLines {
		lines = lines[len(lines)-diagnoseLogLines:]
	}
	for _, l := range lines {
		fmt.Fprintf(out, "    %s\n", l)
	}
}

// eventTime is when an event last happened, by the first of its times that is set.
func eventTime(ev *eventsv1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case !ev.DeprecatedLastTimestamp.IsZero():
		return ev.DeprecatedLastTimestamp.Time
	}
	return ev.CreationTimestamp.Time
}
