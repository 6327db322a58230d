package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// badCase is a spec that admission must refuse, and what the refusal must say: the
// field path (with index), the value as quoted, and a hint of what to write instead.
type badCase struct {
	name   string
	mutate func(p *gpupoolv1.GPUPoolProfile)
	// raw edits the object as sent, for values the Go types cannot even carry ("1d").
	raw   func(u map[string]any)
	path  string
	value string // substring, quoted as the message quotes it; "" for an absent value
	fix   string
}

// maxMessage bounds a refusal's length: a 4 KiB value must not make a 12 KiB message.
const maxMessage = 2048

func TestBadSpecsAreRejected(t *testing.T) {
	ctx := context.Background()
	owner := valid("owner")
	// The owner maps a ResourceFlavor too: a pool that maps it is refused (kueueCases).
	owner.Spec.Kueue = &gpupoolv1.KueueSpec{Flavors: []gpupoolv1.KueueFlavor{{Name: ownersFlavor, Layout: "night",
		Quota: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}}}
	if err := k8s.Create(ctx, owner); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), owner) })

	cases := append(append(append(append(append(append(append(vcenterCases(), labelCases()...), scheduleCases()...), workerCases()...), demandCases()...), kueueCases()...), convertCases()...), selectCases()...)
	cases = append(cases, accountingCases()...)
	if len(cases) < 60 {
		t.Fatalf("%d bad specs, want at least 60", len(cases))
	}
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
			if len(msg) > maxMessage {
				t.Errorf("message is %d bytes, want at most %d", len(msg), maxMessage)
			}
			if strings.Contains(msg, "hunter2") {
				t.Error("message repeats the password")
			}
		})
	}
}

func createBad(ctx context.Context, tc badCase) error {
	p := valid("bad")
	if tc.mutate != nil {
		tc.mutate(p)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(gpupoolv1.GroupVersion.WithKind("GPUPoolProfile"))
	if tc.raw != nil {
		tc.raw(u.Object)
	}
	err = k8s.Create(ctx, u)
	if err == nil {
		_ = k8s.Delete(ctx, u)
	}
	return err
}

// setWindow sets a field of schedule.windows[i] in an unstructured object.
func setWindow(i int, key string, val any) func(map[string]any) {
	return func(u map[string]any) {
		ws, _, _ := unstructured.NestedSlice(u, "spec", "schedule", "windows")
		ws[i].(map[string]any)[key] = val
		_ = unstructured.SetNestedSlice(u, ws, "spec", "schedule", "windows")
	}
}

func setField(val any, path ...string) func(map[string]any) {
	return func(u map[string]any) { _ = unstructured.SetNestedField(u, val, path...) }
}

func server(s string) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.Server = s }
}

func vcenterCases() []badCase {
	const sp = "spec.vcenter.server"
	return []badCase{
		{name: "server over http", mutate: server("http://vc.example"), path: sp, value: `"http://vc.example"`, fix: "https only"},
		{name: "server with user and password", mutate: server("https://admin:hunter2@vc.example"), path: sp, value: `"https://***@vc.example"`, fix: "into the Secret of credentialsSecretRef"},
		{name: "server with user info, no scheme", mutate: server("admin:hunter2@vc.example"), path: sp, value: `"***@vc.example"`, fix: "Secret"},
		{name: "server with another path", mutate: server("https://vc.example/api"), path: sp, value: `"https://vc.example/api"`, fix: "/sdk"},
		{name: "server is the vSphere Client URL", mutate: server("https://vc.example/ui/"), path: sp, value: `"https://vc.example/ui/"`, fix: "browser URL"},
		{name: "server port zero", mutate: server("vc.example:0"), path: sp, value: `"vc.example:0"`, fix: "1 to 65535"},
		{name: "server port out of range", mutate: server("vc.example:70000"), path: sp, value: `"vc.example:70000"`, fix: "1 to 65535"},
		{name: "server with trailing whitespace", mutate: server("vc.example "), path: sp, value: `"vc.example "`, fix: "whitespace"},
		{name: "server with another scheme", mutate: server("ftp://vc.example"), path: sp, value: `"ftp://vc.example"`, fix: "https"},
		{name: "server with a query", mutate: server("https://vc.example/sdk?debug=1"), path: sp, value: `"https://vc.example/sdk?debug=1"`, fix: "host name alone"},
		{name: "server host not a DNS name", mutate: server("vc_01.example"), path: sp, value: `"vc_01.example"`, fix: "vcenter.example.com"},
		{name: "secret name not an object name", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.CredentialsSecretRef.Name = "Vcenter Creds" },
			path: "spec.vcenter.credentialsSecretRef.name", value: `"Vcenter Creds"`, fix: "such as vcenter-credentials"},
		{name: "secret namespace not a namespace name", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.CredentialsSecretRef.Namespace = "gpupool.system" },
			path: "spec.vcenter.credentialsSecretRef.namespace", value: `"gpupool.system"`, fix: "such as gpupool-system"},
		{name: "secret name too long", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.CredentialsSecretRef.Name = strings.Repeat("s", 300) },
			path: "spec.vcenter.credentialsSecretRef.name", value: "(300 bytes)", fix: "such as vcenter-credentials"},
		{name: "datacenter with leading whitespace", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.Datacenter = " DC0" },
			path: "spec.vcenter.datacenter", value: `" DC0"`, fix: "such as DC0"},
		{name: "malformed thumbprint", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.Thumbprint = "not-a-thumbprint" },
			path: "spec.vcenter.thumbprint", value: `"not-a-thumbprint"`, fix: "govc about.cert -thumbprint"},
		{name: "caBundle without a certificate", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.CABundle = []byte("hello") },
			path: "spec.vcenter.caBundle", value: `"<PEM data>"`, fix: "paste the PEM"},
		{name: "no certificate verification configured", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.VCenter.Insecure = false },
			path: "spec.vcenter", fix: "set vcenter.thumbprint or vcenter.caBundle"},
		{name: "pool name longer than a label value", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Name = strings.Repeat("p", 64) },
			path: "metadata.name is longer than 63 characters", value: `"` + strings.Repeat("p", 64) + `"`, fix: "choose a shorter name"},
	}
}

func labels(l map[string]string) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[0].NodeLabels = l }
}

func taints(ts ...corev1.Taint) func(*gpupoolv1.GPUPoolProfile) {
	return func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Layouts[1].NodeTaints = ts }
}

func labelCases() []badCase {
	long := strings.Repeat("k", 64)
	const tp = "spec.layouts[1].nodeTaints"
	ns := corev1.TaintEffectNoSchedule
	return []badCase{
		{name: "label key with a space", mutate: labels(map[string]string{"my label": "x"}), path: "spec.layouts[0].nodeLabels[my label]", value: `"my label"`, fix: "such as example.com/workload"},
		{name: "label key name over 63", mutate: labels(map[string]string{"example.com/" + long: "x"}), path: "spec.layouts[0].nodeLabels[example.com/kkk", value: `"example.com/kkk`, fix: "at most 63"},
		{name: "label key with an upper-case prefix", mutate: labels(map[string]string{"Example.COM/x": "y"}), path: "spec.layouts[0].nodeLabels[Example.COM/x]", value: `"Example.COM/x"`, fix: "such as example.com/workload"},
		{name: "label value with a space", mutate: labels(map[string]string{"example.com/w": "two words"}), path: "spec.layouts[0].nodeLabels[example.com/w]", value: `"two words"`, fix: "such as inference"},
		{name: "label value over 63", mutate: labels(map[string]string{"example.com/w": strings.Repeat("v", 70)}), path: "spec.layouts[0].nodeLabels[example.com/w]", value: "(70 bytes)", fix: "at most 63"},
		{name: "label key gpupool.dev/pool", mutate: labels(map[string]string{gpupoolv1.LabelPool: "other"}), path: "spec.layouts[0].nodeLabels[gpupool.dev/pool]", value: `"gpupool.dev/pool"`, fix: "use a prefix of your own"},
		{name: "label key gpupool.dev/parked", mutate: labels(map[string]string{gpupoolv1.LabelParked: "false"}), path: "spec.layouts[0].nodeLabels[gpupool.dev/parked]", value: `"gpupool.dev/parked"`, fix: "managed by gpupool itself"},
		{name: "label key kubernetes.io/hostname", mutate: labels(map[string]string{"kubernetes.io/hostname": "gpu"}), path: "spec.layouts[0].nodeLabels[kubernetes.io/hostname]", value: `"kubernetes.io/hostname"`, fix: "belongs to Kubernetes"},
		{name: "label key node-role.kubernetes.io", mutate: labels(map[string]string{"node-role.kubernetes.io/gpu": ""}), path: "spec.layouts[0].nodeLabels[node-role.kubernetes.io/gpu]", value: `"node-role.kubernetes.io/gpu"`, fix: "such as example.com/role"},
		{name: "label key node.kubernetes.io", mutate: labels(map[string]string{"node.kubernetes.io/instance-type": "big"}), path: "spec.layouts[0].nodeLabels[node.kubernetes.io/instance-type]", value: `"node.kubernetes.io/instance-type"`, fix: "belongs to Kubernetes"},
		{name: "readiness label key with a space", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Readiness.NodeLabels = map[string]string{"vgpu present": "true"}
		},
			path: "spec.readiness.nodeLabels[vgpu present]", value: `"vgpu present"`, fix: "such as nvidia.com/vgpu.present"},
		{name: "readiness label value with a space", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Readiness.NodeLabels = map[string]string{"nvidia.com/vgpu.present": "yes it is"}
		},
			path: "spec.readiness.nodeLabels[nvidia.com/vgpu.present]", value: `"yes it is"`, fix: `such as "true"`},
		{name: "readiness gpuResource with a space", mutate: func(p *gpupoolv1.GPUPoolProfile) { r := "nvidia gpu"; p.Spec.Readiness.GPUResource = &r },
			path: "spec.readiness.gpuResource", value: `"nvidia gpu"`, fix: "such as nvidia.com/gpu"},
		{name: "readiness label key gpupool.dev/layout", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Readiness.NodeLabels = map[string]string{gpupoolv1.LabelLayout: "day"}
		}, path: "spec.readiness.nodeLabels[gpupool.dev/layout]", value: `"gpupool.dev/layout"`, fix: "such as nvidia.com/vgpu.present"},
		{name: "readiness label key gpupool.dev/state", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Readiness.NodeLabels = map[string]string{gpupoolv1.LabelState: "ready"}
		}, path: "spec.readiness.nodeLabels[gpupool.dev/state]", value: `"gpupool.dev/state"`, fix: "gpupool sets itself"},
		{name: "readiness label key a layout sets", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Layouts[1].NodeLabels = map[string]string{"example.com/workload": "training"}
			p.Spec.Readiness.NodeLabels = map[string]string{"example.com/workload": "training"}
		}, path: "spec.readiness.nodeLabels[example.com/workload]", value: `"example.com/workload"`, fix: "spec.layouts[1].nodeLabels"},
		{name: "readiness gpuResource without a prefix", mutate: func(p *gpupoolv1.GPUPoolProfile) { r := "gpu"; p.Spec.Readiness.GPUResource = &r },
			path: "spec.readiness.gpuResource", value: `"gpu"`, fix: "such as nvidia.com/gpu"},
		{name: "readiness gpuResource cpu", mutate: func(p *gpupoolv1.GPUPoolProfile) { r := "cpu"; p.Spec.Readiness.GPUResource = &r },
			path: "spec.readiness.gpuResource", value: `"cpu"`, fix: "extended resource"},
		{name: "readiness gpuResource kubernetes.io/gpu", mutate: func(p *gpupoolv1.GPUPoolProfile) { r := "kubernetes.io/gpu"; p.Spec.Readiness.GPUResource = &r },
			path: "spec.readiness.gpuResource", value: `"kubernetes.io/gpu"`, fix: "not kubernetes.io"},
		{name: "readiness gpuResource in a kubernetes.io subdomain", mutate: func(p *gpupoolv1.GPUPoolProfile) { r := "gpu.kubernetes.io/x"; p.Spec.Readiness.GPUResource = &r },
			path: "spec.readiness.gpuResource", value: `"gpu.kubernetes.io/x"`, fix: "such as nvidia.com/gpu"},
		{name: "readiness gpuResource quota form", mutate: func(p *gpupoolv1.GPUPoolProfile) { r := "requests.nvidia.com/gpu"; p.Spec.Readiness.GPUResource = &r },
			path: "spec.readiness.gpuResource", value: `"requests.nvidia.com/gpu"`, fix: "requests."},
		{name: "drain.jobPods unknown", mutate: func(p *gpupoolv1.GPUPoolProfile) { p.Spec.Drain.JobPods = "Wait" },
			path: "spec.drain.jobPods", value: `"Wait"`, fix: `"Evict", "WaitCompleted"`},
		{name: "schedule.warnAhead negative", mutate: func(p *gpupoolv1.GPUPoolProfile) {
			p.Spec.Schedule.WarnAhead = &metav1.Duration{Duration: -time.Minute}
		}, path: "spec.schedule.warnAhead", value: `"-1m0s"`, fix: "zero (no warning) or positive"},
		{name: "taint effect that does not exist", mutate: taints(corev1.Taint{Key: "example.com/t", Effect: "NoScheduel"}), path: tp + "[0].effect", value: `"NoScheduel"`, fix: `"NoSchedule", "PreferNoSchedule", "NoExecute"`},
		{name: "taint without effect", mutate: taints(corev1.Taint{Key: "example.com/t"}), path: tp + "[0].effect", fix: "NoSchedule, PreferNoSchedule or NoExecute"},
		{name: "taint without key", mutate: taints(corev1.Taint{Effect: ns}), path: tp + "[0].key", fix: "such as example.com/training"},
		{name: "taint key malformed", mutate: taints(corev1.Taint{Key: "bad key!", Effect: ns}), path: tp + "[0].key", value: `"bad key!"`, fix: "such as example.com/training"},
		{name: "taint key and effect twice", mutate: taints(corev1.Taint{Key: "example.com/t", Value: "a", Effect: ns}, corev1.Taint{Key: "example.com/t", Value: "b", Effect: ns}),
			path: tp + "[1]", value: `"example.com/t:NoSchedule"`, fix: "one taint per key and effect"},
		{name: "taint gpupool.dev/parked", mutate: taints(corev1.Taint{Key: gpupoolv1.TaintParked, Value: "true", Effect: ns}), path: tp + "[0].key", value: `"gpupool.dev/parked"`, fix: "managed by gpupool itself"},
		{name: "taint node.kubernetes.io/unschedulable", mutate: taints(corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: ns}), path: tp + "[0].key", value: `"node.kubernetes.io/unschedulable"`, fix: "belongs to Kubernetes"},
		{name: "taint value with a space", mutate: taints(corev1.Taint{Key: "example.com/t", Value: "a b", Effect: ns}), path: tp + "[0].value", value: `"a b"`, fix: "such as true"},
		{name: "taint with timeAdded", mutate: taints(corev1.Taint{Key: "example.com/t", Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: fixedNow}}), path: tp + "[0].timeAdded", fix: "remove it"},
	}
}

// setWorker sets a field of layouts[l].workers[w] in an unstructured object, for values
// the Go type leaves out (vgpus: 0).
func setWorker(l, w int, key string, val any) func(map[string]any) {
	return func(u map[string]any) {
		ls, _, _ := unstructured.NestedSlice(u, "spec", "layouts")
		ws := ls[l].(map[string]any)["workers"].([]any)
		ws[w].(map[string]any)[key] = val
		_ = unstructured.SetNestedSlice(u, ls, "spec", "layouts")
	}
}
