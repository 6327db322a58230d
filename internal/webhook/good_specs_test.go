package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// goodCase is a spec near an edge that admission must accept, with the warnings it must
// (and only those it must) produce, as substrings.
type goodCase struct {
	name   string
	mutate func(p *gpupoolv1.GPUPoolProfile)
	warn   []string
}

// secure verifies the certificate by thumbprint, so that no insecure warning comes.
func secure(p *gpupoolv1.GPUPoolProfile) {
	p.Spec.VCenter.Insecure = false
	p.Spec.VCenter.Thumbprint = "3B:9F:61:2A:5C:D4:7E:08:11:C2:9A:4F:6B:E3:70:15:8D:2C:44:91"
}

func both(fs ...func(*gpupoolv1.GPUPoolProfile)) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) {
		for _, f := range fs {
			f(p)
		}
	}
}

// goodCases are accepted without a warning.
func goodCases() []goodCase {
	return []goodCase{
		{"kueue flavors for both layouts, a waiting quota equal to the quota and one of 0", both(secure, withKueue(func(k *gpupoolv1.KueueSpec) {
			k.Flavors[0].WaitingQuota = k.Flavors[0].Quota
			k.Flavors = append(k.Flavors, gpupoolv1.KueueFlavor{Name: "day.t4-small", Layout: "day",
				Quota:        corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("64")},
				WaitingQuota: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0")}})
		})), nil},
		{"server as an https URL with port 443, /sdk/ and upper case", both(secure, server("https://VC01.Example:443/sdk/")), nil},
		{"server with a trailing dot", both(secure, server("vc01.example.")), nil},
		{"workers with 1, 2 and 16 vGPUs", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[0].VGPUs = 2
			p.Spec.Layouts[0].Workers[1].VGPUs = 16
			p.Spec.Layouts[1].Workers[0].VGPUs = 1
		}), nil},
		{"server as IPv6 with a port", both(secure, server("[fd00::5]:8443")), nil},
		{"select layouts by name pattern and folder, by inventory path, by MachineDeployment", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[1] = gpupoolv1.Layout{Name: "night", Select: &gpupoolv1.Selection{Profile: "grid_p100-16q", VGPUs: 2,
				VMSelector: gpupoolv1.VMSelector{NamePattern: "gpu-night-[0-9]*", Folder: "gpu/night"}}}
			p.Spec.Layouts = append(p.Spec.Layouts,
				gpupoolv1.Layout{Name: "late", Select: &gpupoolv1.Selection{Profile: "grid_p100-8q", VMSelector: gpupoolv1.VMSelector{Folder: "/DC0/vm/gpu/late/"}}},
				gpupoolv1.Layout{Name: "capi", Select: &gpupoolv1.Selection{Profile: "grid_p100-4q", VMSelector: gpupoolv1.VMSelector{
					MachineDeployment: &gpupoolv1.MachineDeploymentReference{Namespace: "capi-system", Name: "gpu.day-md-0"}}}},
				gpupoolv1.Layout{Name: "bycount", Convert: &gpupoolv1.Conversion{Base: "day", Count: 1, Profile: "grid_p100-16q",
					CandidatesFrom: &gpupoolv1.VMSelector{NamePattern: "gpu-night-*"}}})
		}), nil},
		{"VM paths inside a datacenter in a folder", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.VCenter.Datacenter = "/Lab/DC0"
			p.Spec.Layouts[0].Workers[0].VM = "/Lab/DC0/vm/gpu/" + p.Name + "-a"
		}), nil},
		{"VM path through a folder above a datacenter given by name", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[0].VM = "/Lab/DC0/vm/" + p.Name + "-a"
		}), nil},
		{"VM name with inner spaces and a datacenter with a space", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.VCenter.Datacenter = "Lab DC"
			p.Spec.Layouts[0].Workers[0].VM = "GPU worker " + p.Name
		}), nil},
		{"NVIDIA MIG-backed and media-extension type names", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[0].Profile = "nvidia_h100xm-1-10cme"
			p.Spec.Layouts[0].Workers[1].Profile = "grid_a100d-7-80c"
			p.Spec.Layouts[1].Workers[0].Profile = "grid_m60-0q"
		}), nil},
		{"readiness, job drains and warnings as a GPU operator user writes them", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			res := "nvidia.com/GRID-P100-4Q"
			p.Spec.Readiness = gpupoolv1.ReadinessSpec{GPUResource: &res,
				NodeLabels:     map[string]string{"nvidia.com/vgpu.present": "true", "feature.node.kubernetes.io/pci-10de.present": "true"},
				NodeConditions: []string{"VGPULicensed"}}
			p.Spec.Drain.JobPods = gpupoolv1.JobPodsWaitCompleted
			p.Spec.Schedule.WarnAhead = &metav1.Duration{}
		}), nil},
		{"readiness on time-slicing and MIG mixed resources, with labels a layout does not set", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			res := "nvidia.com/mig-1g.10gb"
			p.Spec.Layouts[0].NodeLabels = map[string]string{"example.com/workload": "inference"}
			p.Spec.Readiness = gpupoolv1.ReadinessSpec{GPUResource: &res,
				NodeLabels: map[string]string{"example.com/licensed": "true", "nvidia.com/gpu.shared.present": "true", "not-gpupool.dev/x": "y"}}
		}), nil},
		{"readiness gpuResource nvidia.com/gpu.shared", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			res := "nvidia.com/gpu.shared"
			p.Spec.Readiness.GPUResource = &res
		}), nil},
		{"readiness without a GPU wait", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			none := ""
			p.Spec.Readiness.GPUResource = &none
		}), nil},
		{"labels and taints at the edge of the rules", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].NodeLabels = map[string]string{
				"example.com/" + strings.Repeat("k", 63): strings.Repeat("v", 63),
				"empty-value":                            "",
				"gpu.example.com/under_score.dot":        "A_b.c-1",
				"not-gpupool.dev/x":                      "y",
			}
			p.Spec.Layouts[1].NodeTaints = []corev1.Taint{
				{Key: "example.com/t", Value: "a", Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/t", Value: "a", Effect: corev1.TaintEffectNoExecute},
				{Key: "dedicated", Effect: corev1.TaintEffectPreferNoSchedule},
			}
		}), nil},
		{"pool name of 63 characters", both(secure, func(p *gpupoolv1.GPUPoolProfile) { p.Name = strings.Repeat("n", 63) }), nil},
		{"cron on 29 February, '?' in the day fields, */2 in day-of-month with a weekday", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.Windows = []gpupoolv1.Window{
				{Layout: "day", Start: "0 0 29 2 *", Duration: metav1.Duration{Duration: 24 * time.Hour}},
				{Layout: "day", Start: "0 8 ? * 1-5", Duration: metav1.Duration{Duration: 90 * time.Minute}},
				{Layout: "day", Start: "30 6 */2 * 1", Duration: metav1.Duration{Duration: 90 * time.Second}, Priority: 2},
			}
		}), nil},
		{"zero lead time and fractional durations", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.LeadTime = &metav1.Duration{}
			p.Spec.Drain.Timeout = &metav1.Duration{Duration: 30 * time.Minute}
			p.Spec.NodeReadyTimeout = &metav1.Duration{Duration: 1500 * time.Millisecond}
		}), nil},
		{"override until with an offset", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Override = &gpupoolv1.Override{Layout: "day", Until: &metav1.Time{Time: fixedNow.Add(18 * time.Hour).In(time.FixedZone("CET", 3600))}}
		}), nil},
	}
}

// warnedCases are accepted with a warning that says what the operator will do.
func warnedCases() []goodCase {
	return []goodCase{
		{"insecure alone", nil, []string{"spec.vcenter.insecure is true: the vCenter certificate is not verified at all"}},
		{"insecure with a thumbprint", both(secure, func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.Insecure = true }),
			[]string{"has no effect: spec.vcenter.thumbprint is set, and gpupool pins the vCenter certificate to it"}},
		{"VM names that differ only in case", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[0].Workers[1].VM = strings.ToUpper(p.Spec.Layouts[0].Workers[0].VM)
		}), []string{"spec.layouts[0].workers[1].vm", "differs from workers[0].vm", "only in case"}},
		{"lead time longer than a window", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.LeadTime = &metav1.Duration{Duration: 2 * time.Hour}
			p.Spec.Schedule.Windows[0].Duration = metav1.Duration{Duration: time.Hour}
		}), []string{"spec.schedule.leadTime (2h0m0s) is longer than spec.schedule.windows[0].duration (1h0m0s)", "over before the window opens"}},
		{"window shorter than a minute", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.Windows[0].Duration = metav1.Duration{Duration: 30 * time.Second}
		}), []string{"spec.schedule.windows[0].duration (30s) is shorter than a minute"}},
		{"override until already past", both(secure, func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Override = &gpupoolv1.Override{Layout: "day", Until: &metav1.Time{Time: fixedNow.Add(-time.Hour)}}
		}), []string{"spec.override.until (" + fixedNow.Add(-time.Hour).UTC().Format(time.RFC3339) + ") is already past"}},
	}
}

func TestTrickyGoodSpecsAreAccepted(t *testing.T) {
	ctx := context.Background()
	cases := append(goodCases(), warnedCases()...)
	if len(cases) < 15 {
		t.Fatalf("%d good specs, want at least 15", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := valid("good")
			if tc.mutate != nil {
				tc.mutate(p)
			}
			warnings.take()
			if err := warned.Create(ctx, p, client.DryRunAll); err != nil {
				t.Fatalf("refused: %v", err)
			}
			got := strings.Join(warnings.take(), "\n")
			t.Log(got)
			for _, w := range tc.warn {
				if !strings.Contains(got, w) {
					t.Errorf("warnings do not contain %q", w)
				}
			}
			if len(tc.warn) == 0 && got != "" {
				t.Errorf("unexpected warnings: %s", got)
			}
		})
	}
}
