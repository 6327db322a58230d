package plan

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testclock"
)

// TestDecideEndsCleanly: what demand does after a switch ends badly or its reasons go.
// An aborted switch is not in flight (the schedule, demand's windows and idleness apply
// again), an abort counts once toward the budget, demand holds only the layouts it
// brought in, a window opening is a recheck, and an announced switch keeps its start.
func TestDecideEndsCleanly(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	mon := testclock.Weekly(time.Monday, 0, 0, berlin)
	at := func(h, m int) time.Time { return mon.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	arrivedDay := PastSwitch{ID: "day-0750", To: "day", Reason: gpupoolv1.DesiredBySchedule, Start: at(7, 50), End: at(8, 0)}
	// abortedNight is a demand switch to night started at 15:00 whose drain timed out:
	// in status.transition and, as Aborted, in status.history.
	abortedNight := PastSwitch{ID: "night-1500", To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(15, 0), Aborted: true}
	weekdayAfternoon := bringNight
	weekdayAfternoon.Windows = []gpupoolv1.DemandWindow{{Start: "0 12 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}}}
	bringDay := gpupoolv1.DemandRule{Layout: "day", Action: gpupoolv1.DemandBringIn, For: minutes(5), IdleFor: minutes(10)}
	lateSkipNight := gpupoolv1.DemandRule{Layout: "night", Action: gpupoolv1.DemandSkip, For: minutes(5), IdleFor: minutes(10),
		Windows: []gpupoolv1.DemandWindow{{Start: "0 22 * * *", Duration: metav1.Duration{Duration: 2 * time.Hour}}}}
	announced := &AnnouncedSwitch{Layout: "night", Action: gpupoolv1.DemandBringIn, Decided: at(19, 15), At: at(19, 25)}

	tests := []struct {
		name    string
		spec    *gpupoolv1.GPUPoolProfileSpec
		now     time.Time
		in      DemandInput
		layout  string
		reason  gpupoolv1.DesiredReason
		message string    // in the decision's or demand's message
		recheck time.Time // zero: not checked
		next    time.Time // zero: not checked; else the announced start Next says
	}{{
		name: "an aborted demand switch whose layout went idle is not kept", spec: demandSpec(weekdayAfternoon), now: at(15, 30),
		in: DemandInput{Active: "day", InFlight: "night", Observed: map[string]LayoutDemand{},
			Timers:   DemandTimers{IdleSince: map[string]time.Time{"night": at(15, 0)}},
			Switches: []PastSwitch{abortedNight, abortedNight, arrivedDay}},
		layout: "day", reason: gpupoolv1.DesiredByDefault,
	}, {
		name: "the schedule applies again after an aborted demand switch", spec: demandSpec(weekdayAfternoon), now: at(24+8, 0),
		in: DemandInput{Active: "day", InFlight: "night", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2}},
			Timers:   DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{abortedNight, abortedNight, arrivedDay}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "outside the windows", recheck: at(24+12, 0),
	}, {
		name: "an aborted switch is not in flight: demand decides from the active layout", spec: demandSpec(bringNight), now: at(15, 10),
		in: DemandInput{Active: "day", InFlight: "night", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2}},
			Timers:   DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{abortedNight, abortedNight, arrivedDay}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "cooldown until",
	}, {
		name: "an abort recorded twice counts once toward the budget", spec: demandSpec(bringNight), now: at(17, 0),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2, Pending: []string{"pod a/t1"}}},
			Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(16, 0)}},
			Switches: []PastSwitch{
				{ID: "night-0100", To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(1, 0), Aborted: true},
				{ID: "night-0100", To: "night", Start: at(1, 0)}, // the same switch, superseded
				abortedNight, arrivedDay}},
		layout: "night", reason: gpupoolv1.DesiredByDemand, message: "pod a/t1",
	}, {
		name: "demand does not keep a layout the schedule brought in", spec: nightByDefault(bringDay), now: at(20, 30),
		in:     DemandInput{Active: "day", Observed: map[string]LayoutDemand{"day": {RunningGPUs: 4}}, Switches: []PastSwitch{arrivedDay}},
		layout: "night", reason: gpupoolv1.DesiredByDefault,
	}, {
		name: "demand keeps a layout it brought in while in use", spec: nightByDefault(bringDay), now: at(20, 30),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"day": {RunningGPUs: 4}},
			Switches: []PastSwitch{{ID: "day-0600", To: "day", Reason: gpupoolv1.DesiredByDemand, Start: at(6, 0), End: at(6, 10)}}},
		layout: "day", reason: gpupoolv1.DesiredByDemand, message: "demand keeps layout day",
	}, {
		name: "an idle layout is looked at again when the Skip rule's window opens", spec: demandSpec(lateSkipNight), now: at(21, 0),
		in: DemandInput{Active: "night", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{IdleSince: map[string]time.Time{"night": at(20, 10)}},
			Switches: []PastSwitch{{ID: "night-2000", To: "night", Reason: gpupoolv1.DesiredBySchedule, Start: at(20, 0), End: at(20, 10)}}},
		layout: "night", reason: gpupoolv1.DesiredBySchedule, recheck: at(22, 0),
	}, {
		name: "an announced switch is rechecked against its announced start", spec: withMaxEvictions(demandSpec(weekdayAfternoon), 5), now: at(19, 22),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2, Evictions: 1}}, WarnAhead: 10 * time.Minute,
			Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(19, 0)}, Switch: announced}, Switches: []PastSwitch{arrivedDay}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "after the warning", next: at(19, 25),
	}, {
		name: "a cancelled switch says why", spec: withMaxEvictions(demandSpec(weekdayAfternoon), 5), now: at(19, 22),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 1, Evictions: 1}}, WarnAhead: 10 * time.Minute,
			Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(19, 0)}, Switch: announced}, Switches: []PastSwitch{arrivedDay}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "is cancelled: 1 GPUs pending, below minGPUs 2",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decide(tc.spec, tc.now, &tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Layout != tc.layout || got.Reason != tc.reason {
				t.Errorf("Decide = %s (%s), want %s (%s); %s; demand: %s", got.Layout, got.Reason, tc.layout, tc.reason, got.Decision.Message, got.Message)
			}
			if !strings.Contains(got.Decision.Message+" | "+got.Message, tc.message) {
				t.Errorf("messages %q | %q do not say %q", got.Decision.Message, got.Message, tc.message)
			}
			if !tc.recheck.IsZero() && !got.Recheck.Equal(tc.recheck) {
				t.Errorf("Recheck = %s, want %s", got.Recheck, tc.recheck)
			}
			if !tc.next.IsZero() && (got.Next == nil || !got.Next.At.Equal(tc.next) || got.Timers.Switch == nil) {
				t.Errorf("Next = %+v, switch %+v; want the switch still announced for %s", got.Next, got.Timers.Switch, tc.next)
			}
		})
	}
}
