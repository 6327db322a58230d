package webhook_test

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func start(s string) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.Windows[0].Start = s }
}

func scheduleCases() []badCase {
	const ws = "spec.schedule.windows[0].start"
	const wd = "spec.schedule.windows[0].duration"
	const durFix = "write 24h for a day"
	huge := strings.Repeat("0 8 * * 1-5 ", 350) // about 4 KiB
	return []badCase{
		{name: "cron does not parse", mutate: start("0 25 * * *"), path: ws, value: `"0 25 * * *"`, fix: "minute hour day-of-month month day-of-week"},
		{name: "cron with six fields", mutate: start("0 0 8 * * 1-5"), path: ws, value: `"0 0 8 * * 1-5"`, fix: "write 5 fields"},
		{name: "cron with a time zone prefix", mutate: start("CRON_TZ=UTC 0 8 * * *"), path: ws, value: `"CRON_TZ=UTC 0 8 * * *"`, fix: "set schedule.timeZone instead"},
		{name: "cron descriptor", mutate: start("@daily"), path: ws, value: `"@daily"`, fix: "write 5 fields"},
		{name: "cron on 30 February", mutate: start("0 0 30 2 *"), path: ws, value: `"0 0 30 2 *"`, fix: "fix the day-of-month or the month"},
		{name: "cron on 31 April", mutate: start("0 6 31 4 *"), path: ws, value: `"0 6 31 4 *"`, fix: "never open"},
		{name: "cron with ? in the minute", mutate: start("? 7 * * 1-5"), path: ws, value: `"? 7 * * 1-5"`, fix: "write a number such as 0"},
		{name: "cron with ? in the hour", mutate: start("0 ? * * *"), path: ws, value: `"0 ? * * *"`, fix: "every hour"},
		{name: "cron of 4 KiB", mutate: start(huge), path: ws, value: "(4200 bytes)", fix: "at most 128"},
		{name: "unknown time zone", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.TimeZone = "Mars/Olympus_Mons" },
			path: "spec.schedule.timeZone", value: `"Mars/Olympus_Mons"`, fix: "such as UTC, Europe/Berlin"},
		{name: "time zone Local", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Schedule.TimeZone = "Local" },
			path: "spec.schedule.timeZone", value: `"Local"`, fix: "such as UTC"},
		{name: "duration in days", raw: setWindow(0, "duration", "1d"), path: wd, value: `not "1d"`, fix: durFix},
		{name: "duration in years", raw: setWindow(0, "duration", "1y"), path: wd, value: `not "1y"`, fix: durFix},
		{name: "duration in ISO 8601", raw: setWindow(0, "duration", "P1D"), path: wd, value: `not "P1D"`, fix: "no days, years or ISO 8601"},
		{name: "duration in words", raw: setWindow(0, "duration", "ten minutes"), path: wd, value: `not "ten minutes"`, fix: "such as 12h"},
		{name: "duration that overflows", raw: setWindow(0, "duration", "9999999999h"), path: wd, value: `not "9999999999h"`, fix: "at most 99999 per unit"},
		{name: "zero window duration", raw: setWindow(0, "duration", "0s"), path: wd, value: `not "0s"`, fix: "must be positive, such as 12h"},
		{name: "negative window duration", raw: setWindow(0, "duration", "-1h"), path: wd, value: `not "-1h"`, fix: "must be positive"},
		{name: "drain timeout in days", raw: setField("1d", "spec", "drain", "timeout"), path: "spec.drain.timeout", value: `not "1d"`, fix: durFix},
		{name: "zero node ready timeout", raw: setField("0s", "spec", "nodeReadyTimeout"), path: "spec.nodeReadyTimeout", value: `not "0s"`, fix: "positive, such as 10m"},
		{name: "negative lead time", raw: setField("-5m", "spec", "schedule", "leadTime"), path: "spec.schedule.leadTime", value: `not "-5m"`, fix: "zero or positive"},
		{name: "defaultLayout names unknown layout", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.DefaultLayout = "weekend" },
			path: "spec.defaultLayout", value: `"weekend"`, fix: `the layouts are "day", "night"`},
		{name: "override names unknown layout", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Override = &gpupoolv1.Override{Layout: "maintenance"} },
			path: "spec.override.layout", value: `"maintenance"`, fix: `the layouts are "day", "night"`},
		{name: "second window names unknown layout", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.Windows = append(p.Spec.Schedule.Windows, gpupoolv1.Window{Layout: "evening", Start: "0 20 * * *", Duration: metav1.Duration{Duration: time.Hour}})
		}, path: "spec.schedule.windows[1].layout", value: `"evening"`, fix: `the layouts are "day", "night"`},
		{name: "until with lower-case t and z", raw: setField(map[string]any{"layout": "day", "until": "2026-12-01t06:00:00z"}, "spec", "override"),
			path: "spec.override.until", value: `"2026-12-01t06:00:00z"`, fix: "upper-case T and Z"},
		{name: "until not a time", raw: setField(map[string]any{"layout": "day", "until": "tomorrow at noon"}, "spec", "override"),
			path: "spec.override.until", value: `"tomorrow at noon"`, fix: "date-time"},
	}
}

func worker(l, w int, vm, profile string) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) {
		if vm != "" {
			p.Spec.Layouts[l].Workers[w].VM = vm
		}
		if profile != "" {
			p.Spec.Layouts[l].Workers[w].Profile = profile
		}
	}
}

func workerCases() []badCase {
	const vm = "spec.layouts[0].workers[1].vm"
	const pr = "spec.layouts[0].workers[0].profile"
	const prFix = "such as grid_p100-4q"
	return []badCase{
		{name: "VM name with leading whitespace", mutate: worker(0, 1, " gpu-1", ""), path: vm, value: `" gpu-1"`, fix: "remove it"},
		{name: "VM name with trailing whitespace", mutate: worker(0, 1, "gpu-1\t", ""), path: vm, value: `"gpu-1\t"`, fix: "remove it"},
		{name: "VM path is the root", mutate: worker(0, 1, "/", ""), path: vm, value: `"/"`, fix: "/DC0/vm/gpu/worker-1"},
		{name: "VM path outside the datacenter", mutate: worker(0, 1, "/DC1/vm/gpu-1", ""), path: vm, value: `"/DC1/vm/gpu-1"`, fix: "starts with /DC0/vm/"},
		{name: "VM path outside the vm folder", mutate: worker(0, 1, "/DC0/host/gpu-1", ""), path: vm, value: `"/DC0/host/gpu-1"`, fix: "starts with /DC0/vm/"},
		{name: "VM path relative", mutate: worker(0, 1, "gpu/worker-1", ""), path: vm, value: `"gpu/worker-1"`, fix: "absolute inventory path"},
		{name: "VM path with an empty element", mutate: worker(0, 1, "/DC0/vm//gpu-1", ""), path: vm, value: `"/DC0/vm//gpu-1"`, fix: "/DC0/vm/gpu/worker-1"},
		{name: "VM path with a trailing slash", mutate: worker(0, 1, "/DC0/vm/gpu-1/", ""), path: vm, value: `"/DC0/vm/gpu-1/"`, fix: "absolute inventory path"},
		{name: "VM listed twice in one layout", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[1].VM = "/DC0/vm/" + p.Spec.Layouts[0].Workers[0].VM
		},
			path: vm, value: `"/DC0/vm/bad-a"`, fix: "list each VM once per layout"},
		{name: "VM claimed by another pool on the same server spelled differently", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.VCenter.Server = "https://VCENTER.test.:443/sdk/"
			p.Spec.Layouts[1].Workers[0].VM = "owner-c"
		}, path: "spec.layouts[1].workers[0].vm", value: `"owner-c"`, fix: `claimed by GPUPoolProfile "owner"`},
		{name: "worker asks for no vGPU", raw: setWorker(0, 0, "vgpus", int64(0)),
			path: "spec.layouts[0].workers[0].vgpus", value: "0", fix: "leave it out for one vGPU"},
		{name: "worker asks for a negative number of vGPUs", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[0].Workers[0].VGPUs = -2 },
			path: "spec.layouts[0].workers[0].vgpus", value: "-2", fix: "between 1 and 16"},
		{name: "worker asks for more vGPUs than a VM can carry", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[0].Workers[1].VGPUs = 17 },
			path: "spec.layouts[0].workers[1].vgpus", value: "17", fix: "leave it out for one vGPU"},
		{name: "worker node not a node name", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[0].Workers[0].Node = "GPU Node 1" },
			path: "spec.layouts[0].workers[0].node", value: `"GPU Node 1"`, fix: "as kubectl get nodes shows it"},
		{name: "worker with node and noNode", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[0].Node, p.Spec.Layouts[0].Workers[0].NoNode = "gpu-1", true
		}, path: "spec.layouts[0].workers[0]", fix: "not both"},
		{name: "two VMs name one node", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[0].Node, p.Spec.Layouts[0].Workers[1].Node = "gpu-1", "gpu-1"
		}, path: "spec.layouts[0].workers[1].node", value: `"gpu-1"`, fix: "every VM has its own node"},
		{name: "a VM given two nodes by two layouts", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[0].Node = "gpu-1"
			p.Spec.Layouts[1].Workers = append(p.Spec.Layouts[1].Workers, gpupoolv1.Worker{VM: p.Spec.Layouts[0].Workers[0].VM, Profile: "grid_p100-16q", Node: "gpu-2"})
		}, path: "spec.layouts[1].workers[1].node", value: `"gpu-2"`, fix: "a VM has one node"},
		{name: "profile without prefix", mutate: worker(0, 0, "", "p100-4q"), path: pr, value: `"p100-4q"`, fix: prFix},
		{name: "profile frame buffer overflows", mutate: worker(0, 0, "", "grid_p100-99999999999999999999q"), path: pr, value: `"grid_p100-99999999999999999999q"`, fix: prFix},
		{name: "profile with media extensions but no MIG slices", mutate: worker(0, 0, "", "grid_a100-4cme"), path: pr, value: `"grid_a100-4cme"`, fix: "MIG with media extensions"},
		{name: "profile with eight MIG slices", mutate: worker(0, 0, "", "grid_a100-8-40c"), path: pr, value: `"grid_a100-8-40c"`, fix: prFix},
		{name: "profile with an unknown series", mutate: worker(0, 0, "", "grid_p100-4x"), path: pr, value: `"grid_p100-4x"`, fix: prFix},
		{name: "layout name not a DNS label", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[1].Name = "Night Shift"
			p.Spec.DefaultLayout = "Night Shift"
		}, path: "spec.layouts[1].name", value: `not "Night Shift"`, fix: "such as night or day-small"},
		{name: "parking mode unknown", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Parking = "Hibernate" },
			path: "spec.parking", value: `"Hibernate"`, fix: `supported values: "Suspend", "PowerOff"`},
		{name: "drain onTimeout unknown", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Drain.OnTimeout = "Ignore" },
			path: "spec.drain.onTimeout", value: `"Ignore"`, fix: `supported values: "Abort", "Force"`},
		{name: "maxParallel below one", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.MaxParallel = -1 },
			path: "spec.maxParallel", value: "-1", fix: "greater than or equal to 1"},
		{name: "empty layout list", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts = nil },
			path: "spec.layouts", fix: "Required value"},
		{name: "layout without workers", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[1].Workers = nil },
			path: "spec.layouts[1].workers", fix: "Required value"},
	}
}
