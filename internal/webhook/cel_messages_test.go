package webhook_test

import (
	"context"
	"strings"
	"testing"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// rawCEL is what the API server answers instead of a rule's message when the rule has
// none or when its messageExpression fails (for one, when its result holds a line break).
var rawCEL = []string{"failed rule:", "evaluating rule:", "type conversion error", "messageExpression"}

// TestCELRefusalsSayWhatToWrite sends values that the CRD's CEL rules refuse, so that
// the webhook never sees them: a value pasted with a newline or spaces around it, in
// upper case, in another format, too long. Every refusal must name the field, quote the
// value as the rule's message does (a newline shown as \n, a long value cut) and say what
// to write instead, never show the raw CEL rule.
func TestCELRefusalsSayWhatToWrite(t *testing.T) {
	ctx := context.Background()
	cases := append(append(append(durationCELCases(), profileCELCases()...), thumbprintCELCases()...), nameCELCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := createBad(ctx, tc)
			if err == nil {
				t.Fatal("accepted, want refused")
			}
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{tc.path, tc.value, tc.fix} {
				if want != "" && !strings.Contains(msg, want) {
					t.Errorf("message does not contain %q", want)
				}
			}
			for _, raw := range rawCEL {
				if strings.Contains(msg, raw) {
					t.Errorf("message shows the raw CEL (%q) instead of saying what to write", raw)
				}
			}
			if len(msg) > maxMessage {
				t.Errorf("message is %d bytes, want at most %d", len(msg), maxMessage)
			}
		})
	}
}

// durationField is a duration of the spec, with how its messages word it.
type durationField struct {
	path    string
	set     func(string) func(map[string]any)
	example string // the example its format message gives
	sign    string // what its sign rule says
	empty   string // what its message says about ""
}

func durationFields() []durationField {
	return []durationField{
		{"spec.nodeReadyTimeout", func(v string) func(map[string]any) { return setField(v, "spec", "nodeReadyTimeout") },
			"10m", "must be positive, such as 10m", "leave it out for the default of 10m"},
		{"spec.guestShutdownTimeout", func(v string) func(map[string]any) { return setField(v, "spec", "guestShutdownTimeout") },
			"2m", "must be positive, such as 2m", "leave it out for the default of 2m"},
		{"spec.drain.timeout", func(v string) func(map[string]any) { return setField(v, "spec", "drain", "timeout") },
			"10m", "must be positive, such as 10m", "leave it out for the default of 10m"},
		{"spec.drain.maxHold", func(v string) func(map[string]any) { return setField(v, "spec", "drain", "maxHold") },
			"5m", "must be zero (holds never honoured) or positive, such as 5m", "leave it out to honour holds until drain.timeout"},
		{"spec.schedule.leadTime", func(v string) func(map[string]any) { return setField(v, "spec", "schedule", "leadTime") },
			"10m", "must be zero or positive, such as 10m", "leave it out for no lead time"},
		{"spec.schedule.warnAhead", func(v string) func(map[string]any) { return setField(v, "spec", "schedule", "warnAhead") },
			"15m", "must be zero (no warning) or positive, such as 15m", "leave it out for the default"},
		{"spec.schedule.windows[0].duration", func(v string) func(map[string]any) { return setWindow(0, "duration", v) },
			"12h", "must be positive, such as 12h", "write how long the window stays open"},
	}
}

func durationCELCases() []badCase {
	const ws = "remove the whitespace around it (such as a pasted newline)"
	var cases []badCase
	for _, f := range durationFields() {
		name := f.path[strings.LastIndex(f.path, ".")+1:]
		format := name + " must be a duration such as " + f.example
		long := strings.Repeat("9", 100) + "s"
		for _, c := range []struct{ what, value, quoted, fix string }{
			{"trailing newline", "5m\n", `not "5m\n"`, ws + `, write "5m"`},
			{"trailing CRLF", "5m\r\n", `not "5m\r\n"`, ws + `, write "5m"`},
			{"leading space", " 5m", `not " 5m"`, ws + `, write "5m"`},
			{"trailing space", "5m ", `not "5m "`, ws + `, write "5m"`},
			{"upper case", "5M", `not "5M"`, `write "5m"`},
			{"a space between units", "1h 30m", `not "1h 30m"`, `write "1h30m"`},
			{"days", "1d", `not "1d"`, "a day is 24h, a week 168h"},
			{"ISO 8601 days", "P1D", `not "P1D"`, "a day is 24h"},
			{"ISO 8601 time", "PT10M", `not "PT10M"`, `write "10m"`},
			{"overflowing", "99999999999h", `not "99999999999h"`, "at most 99999 per unit"},
			{"in words", "ten minutes", `not "ten minutes"`, format},
			{"empty", "", `not ""`, f.empty},
			{"overlong", long, `not "` + long[:64] + `..."`, "at most 99999 per unit"},
		} {
			cases = append(cases, badCase{name: f.path + " " + c.what, raw: f.set(c.value), path: f.path + ": Invalid value", value: c.quoted, fix: c.fix})
		}
		cases = append(cases, badCase{name: f.path + " negative", raw: f.set("-1s"), path: f.path, value: `not "-1s"`, fix: name + " " + f.sign + `, not "-1s": remove the minus sign`})
		if !strings.Contains(f.sign, "zero") {
			cases = append(cases, badCase{name: f.path + " zero", raw: f.set("0s"), path: f.path, value: `not "0s"`, fix: name + " " + f.sign})
		}
	}
	// Longer than the schema's bound: the API server says so before any CEL rule runs.
	cases = append(cases, badCase{name: "spec.guestShutdownTimeout longer than the schema allows", raw: setField(strings.Repeat("9", 200)+"s", "spec", "guestShutdownTimeout"),
		path: "spec.guestShutdownTimeout", fix: "may not be more than 128 bytes"})
	return cases
}

func profileCELCases() []badCase {
	const pr = "spec.layouts[0].workers[0].profile"
	const ws = "remove the whitespace around it (such as a pasted newline)"
	c := func(what, profile, quoted, fix string) badCase {
		return badCase{name: "profile " + what, mutate: worker(0, 0, "", profile), path: pr + ": Invalid value", value: quoted, fix: fix}
	}
	return []badCase{
		c("with a trailing newline", "grid_t4-4q\n", `not "grid_t4-4q\n"`, ws+`, write "grid_t4-4q"`),
		c("with a leading space", " grid_t4-4q", `not " grid_t4-4q"`, ws+`, write "grid_t4-4q"`),
		c("with a trailing tab", "nvidia_a100-3-20c\t", `not "nvidia_a100-3-20c\t"`, ws+`, write "nvidia_a100-3-20c"`),
		c("in upper case", "GRID_T4-4Q", `not "GRID_T4-4Q"`, `write it in lower case, "grid_t4-4q"`),
		c("in upper case with a newline", "GRID_T4-4Q\n", `not "GRID_T4-4Q\n"`, ws+`, write "grid_t4-4q"`),
		c("without grid_ or nvidia_", "t4-4q", `not "t4-4q"`, `start it with grid_ or nvidia_ as vSphere lists it, such as "grid_t4-4q"`),
		c("with a frame buffer of 5 digits", "grid_p100-99999q", `not "grid_p100-99999q"`, "the frame buffer has at most 3 digits (GiB)"),
		c("of a series that does not exist", "grid_p100-4x", `not "grid_p100-4x"`, "such as grid_p100-4q"),
		// Longer than a label value: the schema refuses it before CEL (the rule's cost,
		// for up to 16384 workers, leaves no room for a longer maxLength).
		{name: "profile longer than a label value", mutate: worker(0, 0, "", "grid_"+strings.Repeat("x", 60)+"-4q"), path: pr, fix: "may not be more than 63 bytes"},
	}
}

func thumbprint(v string) func(map[string]any) {
	return setField(v, "spec", "vcenter", "thumbprint")
}

func thumbprintCELCases() []badCase {
	const tp = "spec.vcenter.thumbprint: Invalid value"
	const ws = "remove the whitespace around it (such as a pasted newline)"
	sha1 := "3B:9F:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:0F"
	sha256 := sha1 + ":12:34:56:78:9A:BC:DE:F0:12:34:56:78"
	return []badCase{
		{name: "SHA-1 thumbprint with a trailing newline", raw: thumbprint(sha1 + "\n"), path: tp, value: `not "` + sha1 + `\n"`, fix: ws + `, write "` + sha1 + `"`},
		{name: "SHA-256 thumbprint with a trailing newline", raw: thumbprint(sha256 + "\n"), path: tp, value: `not "` + sha256[:64] + `..."`, fix: ws + `, write "` + sha256 + `"`},
		{name: "thumbprint with leading spaces", raw: thumbprint("  " + sha1), path: tp, value: `not "  ` + sha1 + `"`, fix: ws + `, write "` + sha1 + `"`},
		{name: "thumbprint in lower case with a trailing space", raw: thumbprint(strings.ToLower(sha1) + " "), path: tp, fix: ws + `, write "` + strings.ToLower(sha1) + `"`},
		{name: "thumbprint as govc about.cert -thumbprint prints it", raw: thumbprint("vcenter.test " + sha256 + "\n"), path: tp, value: `not "vcenter.test ` + sha256[:51] + `..."`,
			fix: `write only the fingerprint, "` + sha256 + `"`},
		{name: "thumbprint as openssl x509 -fingerprint prints it", raw: thumbprint("SHA1 Fingerprint=" + sha1), path: tp, value: `not "SHA1 Fingerprint=` + sha1[:47] + `..."`,
			fix: `write only the fingerprint, "` + sha1 + `"`},
		{name: "thumbprint without colons", raw: thumbprint(strings.ReplaceAll(sha1, ":", "")), path: tp, value: `not "` + strings.ReplaceAll(sha1, ":", "") + `"`,
			fix: "put a colon between every two hex digits"},
		{name: "thumbprint with one pair too many", raw: thumbprint(sha1 + ":AA"), path: tp, value: `not "` + sha1 + `:AA"`, fix: "SHA-1 or SHA-256 fingerprint as colon-separated hex pairs"},
		{name: "thumbprint of 150 characters", raw: thumbprint(strings.Repeat("AB:", 50)), path: tp, value: `not "` + strings.Repeat("AB:", 50)[:64] + `..."`, fix: "as govc about.cert -thumbprint prints it"},
		{name: "thumbprint longer than the schema allows", raw: thumbprint(strings.Repeat("AB:", 90)), path: "spec.vcenter.thumbprint", fix: "may not be more than 256 bytes"},
	}
}

func nameCELCases() []badCase {
	const ln = "spec.layouts[1].name: Invalid value"
	layout := func(what, name, quoted, fix string) badCase {
		return badCase{name: "layout name " + what, mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[1].Name = name }, path: ln, value: quoted, fix: fix}
	}
	const gr = "spec.readiness.gpuResource: Invalid value"
	gpu := func(what, r, quoted, fix string) badCase {
		return badCase{name: "readiness.gpuResource " + what, mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Readiness.GPUResource = &r }, path: gr, value: quoted, fix: fix}
	}
	long := strings.Repeat("n", 70)
	return []badCase{
		layout("with a trailing newline", "night\n", `not "night\n"`, `write "night"`),
		layout("with a leading space", " night", `not " night"`, `write "night"`),
		layout("in upper case", "Night", `not "Night"`, `write "night"`),
		layout("with a space", "night shift", `not "night shift"`, `write "night-shift" (and use that name in defaultLayout, windows and override)`),
		layout("with an underscore", "night_shift", `not "night_shift"`, `write "night-shift"`),
		layout("starting with a dash", "-night", `not "-night"`, "starting and ending with a letter or digit"),
		layout("of 70 characters", long, `not "`+long[:64]+`..."`, "it is longer than 63 characters, shorten it"),
		{name: "two layouts of one name", raw: func(u map[string]any) {
			ls := u["spec"].(map[string]any)["layouts"].([]any)
			ls[1].(map[string]any)["name"] = "day"
		}, path: "spec.layouts[1]", value: `{"name":"day"}`, fix: "layout names must be unique; rename or remove the duplicate layout"},
		{name: "pool name of 100 characters", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Name = strings.Repeat("p", 100) },
			path: "metadata.name is longer than 63 characters", value: `"` + strings.Repeat("p", 64) + `..."`, fix: "choose a shorter name"},
		gpu("with a trailing newline", "nvidia.com/gpu\n", `not "nvidia.com/gpu\n"`, `remove the whitespace around it (such as a pasted newline), write "nvidia.com/gpu"`),
		gpu("in the quota form", "requests.nvidia.com/gpu", `not "requests.nvidia.com/gpu"`, `that is the ResourceQuota form, write "nvidia.com/gpu"`),
		gpu("without a domain", "gpu", `not "gpu"`, "add the device plugin's domain, such as nvidia.com/gpu"),
		{name: "readiness.dra.deviceClassName in upper case", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Readiness.DRA = &gpupoolv1.DRASpec{DeviceClassName: "GPU.nvidia.com", Driver: "gpu.nvidia.com"}
		}, path: "spec.readiness.dra.deviceClassName: Invalid value", value: `not "GPU.nvidia.com"`, fix: `write "gpu.nvidia.com"`},
		{name: "readiness.dra.deviceClassName with a slash", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Readiness.DRA = &gpupoolv1.DRASpec{DeviceClassName: "nvidia.com/gpu", Driver: "gpu.nvidia.com"}
		}, path: "spec.readiness.dra.deviceClassName: Invalid value", value: `not "nvidia.com/gpu"`, fix: "a DeviceClass name (a DNS subdomain"},
		{name: "readiness.dra.driver with a trailing newline", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Readiness.DRA = &gpupoolv1.DRASpec{DeviceClassName: "gpu.nvidia.com", Driver: "gpu.nvidia.com\n"}
		}, path: "spec.readiness.dra.driver: Invalid value", value: `not "gpu.nvidia.com\n"`, fix: `write "gpu.nvidia.com"`},
		{name: "vgpus zero", raw: setWorker(0, 0, "vgpus", int64(0)), path: "spec.layouts[0].workers[0].vgpus", fix: "between 1 and 16 vGPUs of the profile per VM, not 0; leave it out for one vGPU"},
		{name: "vgpus negative", raw: setWorker(0, 0, "vgpus", int64(-3)), path: "spec.layouts[0].workers[0].vgpus", value: "-3", fix: "not negative"},
		{name: "vgpus 17", raw: setWorker(0, 1, "vgpus", int64(17)), path: "spec.layouts[0].workers[1].vgpus", value: "17", fix: "not more than 16"},
		{name: "gpuReplicas zero", raw: func(u map[string]any) {
			u["spec"].(map[string]any)["layouts"].([]any)[0].(map[string]any)["gpuReplicas"] = int64(0)
		}, path: "spec.layouts[0].gpuReplicas", fix: "per vGPU, as the device plugin's time-slicing or MPS configuration sets them, not 0; leave it out to wait for at least one per vGPU"},
		{name: "gpuReplicas 300", mutate: func(p *gpupoolv1.GPUPoolProfile) { r := int32(300); p.Spec.Layouts[1].GPUReplicas = &r },
			path: "spec.layouts[1].gpuReplicas", value: "300", fix: "not more than 256"},
		{name: "node and noNode", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[0].Node, p.Spec.Layouts[0].Workers[0].NoNode = "gpu-1", true
		}, path: "spec.layouts[0].workers[0]", value: `"gpu-1"`, fix: `not both: remove node "gpu-1" or noNode`},
	}
}
