package plan

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testclock"
)

func minutes(n int) *metav1.Duration {
	return &metav1.Duration{Duration: time.Duration(n) * time.Minute}
}

// demandSpec is day by default, night from 20:00 for 12h in Berlin, and the given rules
// with a 30m dwell, a 15m cooldown and 4 switches a day.
func demandSpec(rules ...gpupoolv1.DemandRule) *gpupoolv1.GPUPoolProfileSpec {
	return &gpupoolv1.GPUPoolProfileSpec{
		Layouts:       []gpupoolv1.Layout{{Name: "day"}, {Name: "night"}},
		DefaultLayout: "day",
		Schedule: &gpupoolv1.Schedule{TimeZone: "Europe/Berlin", Windows: []gpupoolv1.Window{
			{Layout: "night", Start: "0 20 * * *", Duration: metav1.Duration{Duration: 12 * time.Hour}}}},
		Demand: &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: rules, MinDwell: minutes(30), Cooldown: minutes(15), MaxSwitchesPerDay: ptr.To(int32(4))},
	}
}

var bringNight = gpupoolv1.DemandRule{Layout: "night", Action: gpupoolv1.DemandBringIn, MinGPUs: ptr.To(int32(2)), For: minutes(5), IdleFor: minutes(10)}

func TestDecide(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	mon := testclock.Weekly(time.Monday, 0, 0, berlin)
	at := func(h, m int) time.Time { return mon.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute) }
	pending := func(gpus int64, pods ...string) map[string]LayoutDemand {
		return map[string]LayoutDemand{"night": {PendingGPUs: gpus, Pending: pods}}
	}
	arrivedDay := []PastSwitch{{To: "day", Reason: gpupoolv1.DesiredBySchedule, Start: at(7, 50), End: at(8, 0)}}
	weekdayAfternoon := bringNight
	weekdayAfternoon.Windows = []gpupoolv1.DemandWindow{{Start: "0 12 * * 1-5", Duration: metav1.Duration{Duration: 8 * time.Hour}}}
	skipNight := gpupoolv1.DemandRule{Layout: "night", Action: gpupoolv1.DemandSkip, For: minutes(5), IdleFor: minutes(10)}
	skipNightForDay := skipNight
	skipNightForDay.Instead = "day"

	tests := []struct {
		name     string
		spec     *gpupoolv1.GPUPoolProfileSpec
		now      time.Time
		in       DemandInput
		layout   string
		reason   gpupoolv1.DesiredReason
		message  string // in the decision's or demand's message
		announce bool
	}{{
		name: "demand held for `for` brings night in", spec: demandSpec(bringNight), now: at(15, 0),
		in:     DemandInput{Active: "day", Observed: pending(2, "pod a/t1"), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 55)}}, Switches: arrivedDay},
		layout: "night", reason: gpupoolv1.DesiredByDemand, message: "pod a/t1",
	}, {
		name: "demand not yet held for `for`", spec: demandSpec(bringNight), now: at(15, 0),
		in:     DemandInput{Active: "day", Observed: pending(2, "pod a/t1"), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 58)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "demand acts at",
	}, {
		name: "demand below minGPUs", spec: demandSpec(bringNight), now: at(15, 0),
		in:     DemandInput{Active: "day", Observed: pending(1, "pod a/t1"), Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "below minGPUs 2",
	}, {
		name: "outside the rule's windows", spec: demandSpec(weekdayAfternoon), now: at(10, 0),
		in:     DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(9, 0)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "outside the windows",
	}, {
		name: "dwell holds demand back", spec: demandSpec(bringNight), now: at(8, 20),
		in:     DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(8, 0)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "minDwell 30m",
	}, {
		name: "cooldown holds demand back", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{{To: "night", Start: at(14, 50)}, {To: "day", Reason: gpupoolv1.DesiredByOverride, Start: at(13, 0), End: at(13, 10)}}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "cooldown until",
	}, {
		name: "the switch budget holds demand back", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{{To: "day", Start: at(1, 0)}, {To: "night", Start: at(2, 0)}, {To: "day", Start: at(3, 0)}, {To: "day", Start: at(4, 0), End: at(4, 10)}}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "switch budget spent: 4 scheduled and demand switches",
	}, {
		name: "overrides do not spend the switch budget", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{{To: "day", Start: at(1, 0), Reason: gpupoolv1.DesiredByOverride}, {To: "night", Start: at(2, 0), Reason: gpupoolv1.DesiredByOverride},
				{To: "day", Start: at(3, 0), Reason: gpupoolv1.DesiredByOverride}, {To: "day", Start: at(4, 0), End: at(4, 10)}}},
		layout: "night", reason: gpupoolv1.DesiredByDemand,
	}, {
		name: "an admin's reset forgets the switches before it", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches:    []PastSwitch{{To: "day", Start: at(1, 0)}, {To: "night", Start: at(2, 0)}, {To: "day", Start: at(3, 0)}, {To: "day", Start: at(4, 0), End: at(4, 10)}},
			BudgetSince: at(3, 30)},
		layout: "night", reason: gpupoolv1.DesiredByDemand,
	}, {
		name: "a pending layout's wait says the budget is spent", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 58)}},
			Switches: []PastSwitch{{To: "day", Start: at(1, 0)}, {To: "night", Start: at(2, 0)}, {To: "day", Start: at(3, 0)}, {To: "day", Start: at(4, 0), End: at(4, 10)}}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "but the switch budget is spent until",
	}, {
		name: "do-not-disrupt holds demand back", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2, DoNotDisrupt: []string{"pod a/serve"}, Evictions: 1}},
			Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "do-not-disrupt pods (pod a/serve)",
	}, {
		name: "more evictions than allowed hold demand back", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2, Evictions: 3}},
			Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "evict 3 GPU pods (maxEvictions 0)",
	}, {
		name: "a switch that evicts is announced warnAhead ahead", spec: withMaxEvictions(demandSpec(bringNight), 5), now: at(15, 0),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2, Evictions: 3}}, WarnAhead: 10 * time.Minute,
			Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "after the warning", announce: true,
	}, {
		name: "an announced switch starts at its time", spec: withMaxEvictions(demandSpec(bringNight), 5), now: at(15, 10),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2, Evictions: 3}}, WarnAhead: 10 * time.Minute,
			Timers:   DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}, Switch: &AnnouncedSwitch{Layout: "night", Action: gpupoolv1.DemandBringIn, Decided: at(15, 0), At: at(15, 10)}},
			Switches: arrivedDay},
		layout: "night", reason: gpupoolv1.DesiredByDemand, message: "brings layout night in",
	}, {
		name: "night demand brought in stays while its work runs", spec: demandSpec(bringNight), now: at(17, 0),
		in: DemandInput{Active: "night", Observed: map[string]LayoutDemand{"night": {RunningGPUs: 2}},
			Switches: []PastSwitch{{To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(15, 0), End: at(15, 10)}}},
		layout: "night", reason: gpupoolv1.DesiredByDemand, message: "2 GPUs in use",
	}, {
		name: "idle night stays for idleFor", spec: demandSpec(bringNight), now: at(17, 0),
		in: DemandInput{Active: "night", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{IdleSince: map[string]time.Time{"night": at(16, 55)}},
			Switches: []PastSwitch{{To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(15, 0), End: at(15, 10)}}},
		layout: "night", reason: gpupoolv1.DesiredByDemand, message: "let go at",
	}, {
		name: "idle night goes back to the schedule", spec: demandSpec(bringNight), now: at(17, 0),
		in: DemandInput{Active: "night", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{IdleSince: map[string]time.Time{"night": at(16, 0)}},
			Switches: []PastSwitch{{To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(15, 0), End: at(15, 10)}}},
		layout: "day", reason: gpupoolv1.DesiredByDefault,
	}, {
		name: "a layout demand brought in is kept for its dwell", spec: demandSpec(bringNight), now: at(15, 20),
		in: DemandInput{Active: "night", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{IdleSince: map[string]time.Time{"night": at(15, 0)}},
			Switches: []PastSwitch{{To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(15, 0), End: at(15, 10)}}},
		layout: "night", reason: gpupoolv1.DesiredByDemand, message: "until its dwell ends",
	}, {
		name: "skip night when nothing is pending", spec: demandSpec(skipNight), now: at(20, 0),
		in:     DemandInput{Active: "day", Observed: map[string]LayoutDemand{}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDemand, message: "skips layout night",
	}, {
		name: "pending work held for `for` lifts the skip", spec: demandSpec(skipNight), now: at(21, 0),
		in:     DemandInput{Active: "day", Observed: pending(1), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(20, 50)}}, Switches: arrivedDay},
		layout: "night", reason: gpupoolv1.DesiredBySchedule,
	}, {
		name: "an idle night is ended", spec: demandSpec(skipNight), now: at(23, 0),
		in: DemandInput{Active: "night", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{IdleSince: map[string]time.Time{"night": at(22, 0)}},
			Switches: []PastSwitch{{To: "night", Reason: gpupoolv1.DesiredBySchedule, Start: at(20, 0), End: at(20, 10)}}},
		layout: "day", reason: gpupoolv1.DesiredByDemand, message: "ends layout night",
	}, {
		name: "an idle default layout is ended for instead", spec: nightByDefault(skipNightForDay), now: at(24*5+10, 0),
		in: DemandInput{Active: "night", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{IdleSince: map[string]time.Time{"night": at(24*5+9, 0)}},
			Switches: []PastSwitch{{To: "night", Reason: gpupoolv1.DesiredBySchedule, Start: at(24*4+20, 0), End: at(24*4+20, 10)}}},
		layout: "day", reason: gpupoolv1.DesiredByDemand, message: "layout day instead",
	}, {
		name: "a switch decided when it evicted nothing is warned once it would evict", spec: withMaxEvictions(demandSpec(bringNight), 5), now: at(15, 1),
		in: DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2, Evictions: 2}}, WarnAhead: 10 * time.Minute,
			Timers:   DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}, Switch: &AnnouncedSwitch{Layout: "night", Action: gpupoolv1.DemandBringIn, Decided: at(15, 0), At: at(15, 0)}},
			Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "after the warning", announce: true,
	}, {
		name: "no BringIn when its window closes before the layout could stay its dwell", spec: demandSpec(weekdayAfternoon), now: at(19, 50),
		in:     DemandInput{Active: "day", Observed: pending(2), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(19, 0)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "closes at",
	}, {
		name: "demand keeps the switch it started when its pods are gone", spec: demandSpec(weekdayAfternoon), now: at(19, 40),
		in: DemandInput{Active: "day", InFlight: "night", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{IdleSince: map[string]time.Time{"night": at(19, 0)}},
			Switches: append([]PastSwitch{{To: "night", Reason: gpupoolv1.DesiredByDemand, Start: at(19, 10)}}, arrivedDay...)},
		layout: "night", reason: gpupoolv1.DesiredByDemand, message: "keeps the switch to layout night",
	}, {
		name: "an override wins over demand", spec: withOverride(demandSpec(bringNight), "day"), now: at(15, 0),
		in:     DemandInput{Active: "day", Observed: pending(4), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}}, Switches: arrivedDay},
		layout: "day", reason: gpupoolv1.DesiredByOverride, message: "override in force",
	}, {
		name: "no layout active yet", spec: demandSpec(bringNight), now: at(15, 0),
		in:     DemandInput{Observed: pending(4), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}}},
		layout: "day", reason: gpupoolv1.DesiredByDefault, message: "no layout active yet",
	}, {
		name: "demand starts nothing while a switch is in flight", spec: demandSpec(bringNight), now: at(15, 0),
		in: DemandInput{Active: "night", InFlight: "day", Observed: pending(4), Timers: DemandTimers{PendingSince: map[string]time.Time{"night": at(14, 0)}},
			Switches: []PastSwitch{{To: "day", Start: at(14, 58)}}},
		layout: "day", reason: gpupoolv1.DesiredByDefault,
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
			if announced := got.Timers.Switch != nil && got.Layout != got.Timers.Switch.Layout; announced != tc.announce {
				t.Errorf("announced switch %+v, want announced=%v", got.Timers.Switch, tc.announce)
			}
			if tc.announce && (got.Next == nil || got.Next.Layout != "night" || !got.Next.At.Equal(tc.now.Add(tc.in.WarnAhead))) {
				t.Errorf("Next = %+v, want night at now + warnAhead (the warnings go on the nodes)", got.Next)
			}
		})
	}
}

// nightByDefault is the sample's shape: night by default, day on weekdays 08:00-20:00.
func nightByDefault(rules ...gpupoolv1.DemandRule) *gpupoolv1.GPUPoolProfileSpec {
	s := demandSpec(rules...)
	s.DefaultLayout = "night"
	s.Schedule.Windows = []gpupoolv1.Window{{Layout: "day", Start: "0 8 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour}}}
	return s
}

func withMaxEvictions(s *gpupoolv1.GPUPoolProfileSpec, n int32) *gpupoolv1.GPUPoolProfileSpec {
	s.Demand.MaxEvictions = ptr.To(n)
	return s
}

func withOverride(s *gpupoolv1.GPUPoolProfileSpec, layout string) *gpupoolv1.GPUPoolProfileSpec {
	s.Override = &gpupoolv1.Override{Layout: layout}
	return s
}

// TestDecideTimers: the timers start when their condition starts, keep their start while
// it holds and are forgotten when it ends, so that `for` and idleFor measure holding.
func TestDecideTimers(t *testing.T) {
	spec := demandSpec(bringNight)
	berlin, _ := time.LoadLocation("Europe/Berlin")
	now := testclock.Weekly(time.Monday, 15, 0, berlin) // day by the schedule
	in := &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2}}}
	d1, err := Decide(spec, now, in)
	if err != nil {
		t.Fatal(err)
	}
	if !d1.Timers.PendingSince["night"].Equal(now) || !d1.Recheck.Equal(now.Add(5*time.Minute)) {
		t.Fatalf("first sight: timers %+v, recheck %s", d1.Timers, d1.Recheck)
	}
	in.Timers = d1.Timers
	d2, _ := Decide(spec, now.Add(time.Minute), in)
	if !d2.Timers.PendingSince["night"].Equal(now) {
		t.Fatalf("still pending: since %s, want %s", d2.Timers.PendingSince["night"], now)
	}
	in.Timers, in.Observed = d2.Timers, map[string]LayoutDemand{"night": {PendingGPUs: 1}}
	d3, _ := Decide(spec, now.Add(2*time.Minute), in)
	if _, ok := d3.Timers.PendingSince["night"]; ok {
		t.Fatalf("below minGPUs: the timer stays %+v", d3.Timers)
	}
	if _, ok := d3.Timers.IdleSince["night"]; ok {
		t.Fatalf("1 GPU pending is not idle: %+v", d3.Timers)
	}

	// Demand outside the rule's windows looks again when a window opens.
	afternoon := bringNight
	afternoon.Windows = []gpupoolv1.DemandWindow{{Start: "0 16 * * *", Duration: metav1.Duration{Duration: time.Hour}}}
	d4, _ := Decide(demandSpec(afternoon), now, &DemandInput{Active: "day", Observed: map[string]LayoutDemand{"night": {PendingGPUs: 2}}})
	if want := now.Add(time.Hour); !d4.Recheck.Equal(want) {
		t.Fatalf("outside the window: recheck %s, want the window's start %s", d4.Recheck, want)
	}
}

// TestDecideReportsTheBudget: the budget Decide counted is what status shows: used and
// max, and while spent, when the next switch is allowed.
func TestDecideReportsTheBudget(t *testing.T) {
	at := func(h, m int) time.Time { return time.Date(2026, 12, 7, h, m, 0, 0, time.UTC) }
	spec := demandSpec(bringNight)
	in := &DemandInput{Active: "day", Observed: map[string]LayoutDemand{}, Timers: DemandTimers{PendingSince: map[string]time.Time{}, IdleSince: map[string]time.Time{}},
		Switches: []PastSwitch{{To: "day", Start: at(1, 0)}, {To: "night", Start: at(2, 0), Reason: gpupoolv1.DesiredByOverride}}}
	d, err := Decide(spec, at(15, 0), in)
	if err != nil {
		t.Fatal(err)
	}
	if d.Budget != (DemandBudget{Used: 1, Max: 4}) {
		t.Fatalf("budget %+v, want 1 of 4 used (the override does not count), none spent", d.Budget)
	}
	in.Switches = append(in.Switches, PastSwitch{To: "day", Start: at(3, 0)}, PastSwitch{To: "night", Start: at(4, 0)}, PastSwitch{To: "day", Start: at(5, 0)})
	if d, _ = Decide(spec, at(15, 0), in); d.Budget.Used != 4 || !d.Budget.FreeAt.Equal(at(1, 0).Add(24*time.Hour)) {
		t.Fatalf("budget %+v, want 4 used, free again 24h after the oldest", d.Budget)
	}
}
