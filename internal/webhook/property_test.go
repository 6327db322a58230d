package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
)

// propertySpecs is how many specs the property test generates: enough to hit every edge
// list many times, few enough for a few seconds.
const propertySpecs = 300

// TestAdmittedSpecsCanBeCarriedOut generates specs, random and from lists of edge values,
// and sends each to the real API server and webhook (dry run). For every spec admission
// accepts: it decodes into the Go type, plan.Desired evaluates it, and a Node carrying
// each layout's labels and taints plus gpupool's own (and a parked Node) passes a
// dry-run create, so the API server's Node validation is the judge of the label rules.
// A spec that passes admission but fails there is an admission bug.
func TestAdmittedSpecsCanBeCarriedOut(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 2026))
	accepted, refused := 0, 0
	for i := range propertySpecs {
		u := genSpec(rng, i)
		err := k8s.Create(ctx, u, client.DryRunAll)
		if err != nil {
			refused++
			if testing.Verbose() && refused <= 15 {
				t.Logf("spec %d refused: %v", i, err)
			}
			checkCauses(t, i, err)
			continue
		}
		accepted++
		if msg := carryOut(ctx, u, i); msg != "" {
			spec, _ := json.Marshal(u.Object["spec"])
			t.Errorf("spec %d admitted but %s\nspec: %s", i, msg, spec)
		}
	}
	t.Logf("%d specs: %d admitted, %d refused", propertySpecs, accepted, refused)
	if accepted < propertySpecs/5 || refused < propertySpecs/5 {
		t.Errorf("admitted %d, refused %d: the generator should produce plenty of both", accepted, refused)
	}
}

// checkCauses bounds every cause of a refusal: each names its field and stays short
// whatever the value (a refusal with many causes is long, one cause must not be).
func checkCauses(t *testing.T, i int, err error) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 {
		t.Errorf("spec %d: refusal without field causes: %v", i, err)
		return
	}
	for _, c := range status.Status().Details.Causes {
		if len(c.Message) > maxMessage/2 {
			t.Errorf("spec %d: cause of %d bytes at %s, want at most %d", i, len(c.Message), c.Field, maxMessage/2)
		}
	}
}

// carryOut checks what the operator will do with an admitted spec; "" when all works.
func carryOut(ctx context.Context, u *unstructured.Unstructured, i int) string {
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return "does not encode: " + err.Error()
	}
	var p gpupoolv1.GPUPoolProfile
	if err := json.Unmarshal(raw, &p); err != nil {
		return "does not decode into GPUPoolProfile: " + err.Error()
	}
	if _, err := plan.Desired(&p.Spec, fixedNow); err != nil {
		return "plan.Desired fails: " + err.Error()
	}
	for j, l := range p.Spec.Layouts {
		profiles := map[string]bool{}
		for _, w := range l.Workers {
			if profiles[w.Profile] {
				continue
			}
			profiles[w.Profile] = true
			mib, err := inventory.ProfileFrameBufferMiB(w.Profile)
			if err != nil || mib <= 0 {
				return fmt.Sprintf("profile %q has no frame buffer: %v", w.Profile, err)
			}
			labels := map[string]string{
				gpupoolv1.LabelPool: p.Name, gpupoolv1.LabelLayout: l.Name,
				gpupoolv1.LabelProfile: w.Profile, gpupoolv1.LabelMemoryMiB: strconv.FormatInt(mib, 10),
			}
			for k, v := range l.NodeLabels {
				labels[k] = v
			}
			if msg := dryRunNode(ctx, fmt.Sprintf("prop-%d-%d", i, j), labels, l.NodeTaints); msg != "" {
				return fmt.Sprintf("layout %q: %s", l.Name, msg)
			}
		}
	}
	parked := []corev1.Taint{{Key: gpupoolv1.TaintParked, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	if msg := dryRunNode(ctx, fmt.Sprintf("prop-%d-parked", i), map[string]string{gpupoolv1.LabelPool: p.Name, gpupoolv1.LabelParked: "true"}, parked); msg != "" {
		return "parked node: " + msg
	}
	return ""
}

func dryRunNode(ctx context.Context, name string, labels map[string]string, taints []corev1.Taint) string {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	if err := k8s.Create(ctx, n, client.DryRunAll); err != nil {
		return "a Node with its labels and taints is refused: " + err.Error()
	}
	return ""
}

// pick returns one of good most of the time, else one of edge: values near or past a
// rule, some of which admission must refuse.
func pick[T any](rng *rand.Rand, good, edge []T) T {
	if len(edge) > 0 && rng.IntN(100) < 2 {
		return edge[rng.IntN(len(edge))]
	}
	return good[rng.IntN(len(good))]
}

// randString is a random string over an alphabet that mixes valid and invalid label
// characters, for keys and values nobody thought of.
func randString(rng *rand.Rand, maxLen int) string {
	const alphabet = "abcxyz0189abcxyz0189-_.ABZ/ @é"
	n := rng.IntN(maxLen + 1)
	var b strings.Builder
	for range n {
		r := []rune(alphabet)
		b.WriteRune(r[rng.IntN(len(r))])
	}
	return b.String()
}

var (
	goodServers   = []string{"vcenter.test", "https://VCENTER.test:443/sdk/", "vc.test.", "10.0.0.5:8443", "[fd00::5]"}
	edgeServers   = []string{"http://vc.test", "https://u:p@vc.test", "vc.test/ui", "vc.test:0", "vc.test:65536", " vc.test", "vc_1.test", "https://vc.test/sdk#x", "vc.test:65535"}
	goodProfiles  = []string{"grid_p100-4q", "grid_p100-16q", "nvidia_a100-3-20c", "nvidia_h100xm-1-10cme", "grid_m60-0q", "grid_a100dx-7-80c"}
	edgeProfiles  = []string{"grid_p100-4", "grid_p100-9999q", "grid_a100-8-40c", "grid_p100-4cme", "nvidia_" + strings.Repeat("x", 60) + "-4q", "GRID_P100-4Q"}
	goodVMs       = []string{"gpu-%d-a", "GPU %d b", "/DC0/vm/gpu/%d-c", "/DC0/vm/%d-d"}
	edgeVMs       = []string{" gpu-%d", "gpu-%d ", "/", "/DC1/vm/%d", "vm/%d", "/DC0/vm//%d", "/DC0/vm/%d/", "/DC0/vm/../%d"}
	goodCrons     = []string{"0 8 * * 1-5", "*/15 * * * *", "0 0 29 2 *", "0 8 ? * 1-5", "30 6 */2 * 1", "0 22 * * 5"}
	edgeCrons     = []string{"0 0 30 2 *", "0 0 31 4 *", "? 7 * * 1-5", "0 ? * * *", "@daily", "0 25 * * *", "CRON_TZ=UTC 0 8 * * *", "0 8 * *", "0 0 31 2,4 *"}
	goodZones     = []string{"UTC", "Europe/Berlin", "Australia/Lord_Howe", "America/New_York"}
	edgeZones     = []string{"Local", "Mars/Olympus", "europe/berlin", "", "CET"}
	goodDurations = []string{"12h", "90m", "1h30m", "45s", "0.5h", "24h"}
	edgeDurations = []string{"1d", "P1D", "9999999999h", "0s", "-1h", "1.5µs", "ten minutes", "99999h99999h99999h99999h", "30s"}
	goodLeads     = []string{"0s", "10m", "1h"}
	edgeLeads     = []string{"-5m", "25h", "1d", "99999h"}
	// Untils in the future of the webhook's clock (fixedNow), and one long past.
	goodUntils = []string{"", fixedNow.Add(18 * time.Hour).UTC().Format(time.RFC3339),
		fixedNow.Add(18 * time.Hour).In(time.FixedZone("", 3600)).Format(time.RFC3339), "2020-01-01T00:00:00Z"}
	edgeUntils  = []string{"2026-12-01t06:00:00z", "2026-12-01 06:00:00Z", "2026-12-01T06:00:00", "tomorrow"}
	goodKeys    = []string{"example.com/workload", "dedicated", "a.b-c.d/e_f.g", "lab.example/" + strings.Repeat("k", 63)}
	edgeKeys    = []string{"gpupool.dev/pool", "kubernetes.io/hostname", "node-role.kubernetes.io/gpu", "x.k8s.io/y", "my key", "", "/x", "example.com/", "Example.com/x"}
	goodValues  = []string{"", "inference", "A_b.c-1", strings.Repeat("v", 63)}
	edgeValues  = []string{"two words", strings.Repeat("v", 64), "-x", "x-", "é"}
	effects     = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	edgeEffects = []corev1.TaintEffect{"", "NoScheduel", "noschedule"}
	goodNames   = []string{"prop-%d", "p.%d.x", "%d-" + strings.Repeat("n", 55)}
	edgeNames   = []string{"%d-" + strings.Repeat("n", 61)}
)

// genSpec builds spec i: the accepted base with every field drawn from its lists, or
// for labels and taints sometimes made up at random.
func genSpec(rng *rand.Rand, i int) *unstructured.Unstructured {
	p := valid("x")
	p.Name = fmt.Sprintf(pick(rng, goodNames, edgeNames), i)
	p.Spec.VCenter.Server = pick(rng, goodServers, edgeServers)
	for li := range p.Spec.Layouts {
		l := &p.Spec.Layouts[li]
		for wi := range l.Workers {
			l.Workers[wi].VM = strings.ReplaceAll(pick(rng, goodVMs, edgeVMs), "%d", fmt.Sprintf("%d-%d-%d", i, li, wi))
			l.Workers[wi].Profile = pick(rng, goodProfiles, edgeProfiles)
		}
		l.NodeLabels = map[string]string{}
		for range rng.IntN(4) {
			k, v := pick(rng, goodKeys, edgeKeys), pick(rng, goodValues, edgeValues)
			if rng.IntN(15) == 0 {
				k, v = randString(rng, 12)+"/"+randString(rng, 70), randString(rng, 70)
			}
			l.NodeLabels[k] = v
		}
		for range rng.IntN(3) {
			t := corev1.Taint{Key: pick(rng, goodKeys, edgeKeys), Value: pick(rng, goodValues, edgeValues), Effect: pick(rng, effects, edgeEffects)}
			if rng.IntN(15) == 0 {
				t.Key, t.Value = randString(rng, 20), randString(rng, 20)
			}
			l.NodeTaints = append(l.NodeTaints, t)
		}
	}
	p.Spec.Schedule.TimeZone = pick(rng, goodZones, edgeZones)
	p.Spec.Schedule.Windows[0].Start = pick(rng, goodCrons, edgeCrons)
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		panic(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetGroupVersionKind(gpupoolv1.GroupVersion.WithKind("GPUPoolProfile"))
	setWindow(0, "duration", pick(rng, goodDurations, edgeDurations))(u.Object)
	setField(pick(rng, goodLeads, edgeLeads), "spec", "schedule", "leadTime")(u.Object)
	setField(pick(rng, goodDurations, edgeDurations), "spec", "drain", "timeout")(u.Object)
	if until := pick(rng, goodUntils, edgeUntils); until != "" {
		setField(map[string]any{"layout": "day", "until": until}, "spec", "override")(u.Object)
	}
	return u
}
