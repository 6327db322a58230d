package main

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// The plugin's tests run it against a real kube-apiserver (envtest) as users bound only
// to the ClusterRoles config/rbac ships for it, while the real reconciler, driven by
// hand with a fake clock, runs the pool on vgpusim. The workers have noNode, so no
// kubelet is needed: the status the plugin reads is what the operator writes.

var (
	scheme = testworld.Scheme()
	admin  client.Client
	// kubeconfigs are files per user: admin (system:masters), viewer (gpupool-viewer),
	// editor (gpupool-viewer and gpupool-editor), requester (gpupool-viewer and
	// gpupool-requester), nobody (no role).
	kubeconfigs = map[string]string{}
	assets      string
)

const credentialsNamespace = "gpupool-system"

func TestMain(m *testing.M) {
	// Run as the plugin when kubectl runs this test binary under the plugin's name
	// (TestKubectlRunsThePlugin links it onto PATH), so no separate build is needed.
	if filepath.Base(os.Args[0]) == "kubectl-gpupool" {
		main()
		os.Exit(0)
	}
	os.Exit(testworld.Main(m, testenv.Options{}, func(s *testworld.Suite) error {
		assets = s.Env.BinaryAssetsDirectory
		var err error
		if admin, err = client.New(s.Config, client.Options{Scheme: scheme}); err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "kubectl-gpupool-")
		if err != nil {
			return err
		}
		s.Defer(func() { _ = os.RemoveAll(dir) })
		return setUpUsers(s.Env, dir)
	}))
}

// setUpUsers installs the user ClusterRoles from config/rbac (named as the install names
// them) and writes a kubeconfig per user.
func setUpUsers(env *envtest.Environment, dir string) error {
	ctx := context.Background()
	roles := map[string]string{}
	for _, f := range []string{"gpupool_viewer_role.yaml", "gpupool_editor_role.yaml", "gpupool_requester_role.yaml"} {
		clusterRoles, _, err := testworld.ReadRBAC(f)
		if err != nil {
			return err
		}
		if len(clusterRoles) != 1 {
			return fmt.Errorf("config/rbac/%s: %d ClusterRoles, want one", f, len(clusterRoles))
		}
		role := clusterRoles[0]
		role.Name = "gpupool-" + role.Name // config/default's namePrefix
		if err := admin.Create(ctx, &role); err != nil {
			return err
		}
		roles[f] = role.Name
	}
	bindings := map[string][]string{
		"viewer":    {roles["gpupool_viewer_role.yaml"]},
		"editor":    {roles["gpupool_viewer_role.yaml"], roles["gpupool_editor_role.yaml"]},
		"requester": {roles["gpupool_viewer_role.yaml"], roles["gpupool_requester_role.yaml"]},
	}
	for user, rs := range bindings {
		for _, r := range rs {
			if err := testworld.BindClusterRole(ctx, admin, user+"-"+r, r, user); err != nil {
				return err
			}
		}
	}
	for user, groups := range map[string][]string{"admin": {"system:masters"}, "viewer": nil, "editor": nil, "requester": nil, "nobody": nil} {
		u, err := env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
		if err != nil {
			return err
		}
		data, err := u.KubeConfig()
		if err != nil {
			return err
		}
		kubeconfigs[user] = filepath.Join(dir, user+".kubeconfig")
		if err := os.WriteFile(kubeconfigs[user], data, 0o600); err != nil {
			return err
		}
	}
	return admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: credentialsNamespace}})
}

// mondayMorning is a Monday, 10:00 in Berlin: the day window is open.
var mondayMorning = testworld.Monday(10, 0)

// shown is t as the plugin prints it in the pool's zone (Berlin), which it shows when
// --tz is not given.
func shown(t time.Time) string { return t.In(berlin).Format("Mon 2006-01-02 15:04 MST") }

// shownAt is t as shown with how far it is from the world's now: "... (in 2h)".
func (w *world) shownAt(t time.Time) string {
	return shown(t) + " (" + relative(t, w.clock.Now()) + ")"
}

var berlin = testworld.Berlin

// world is one test's pool on its own simulator, and the operator that runs it.
type world struct {
	t     *testing.T
	ctx   context.Context
	name  string
	sim   *vgpusim.Sim
	clock *clocktesting.FakeClock
	rec   *controllers.GPUPoolProfileReconciler
	// wrap, when set, wraps the plugin's client (app.wrapClient).
	wrap func(client.Client) client.Client
}

func newWorld(t *testing.T, prefix string) *world {
	t.Helper()
	sim := vgpusim.StartT(t, fmt.Sprintf(vgpusim.OneHostDayNight, prefix))
	w := &world{t: t, ctx: context.Background(), name: prefix + "lab", sim: sim, clock: clocktesting.NewFakeClock(mondayMorning)}
	w.must(admin.Create(w.ctx, testworld.VCenterSecret(sim, prefix+"vcenter", credentialsNamespace)))
	conn := vsphere.NewConnector()
	t.Cleanup(func() { _ = conn.Close() })
	w.rec = &controllers.GPUPoolProfileReconciler{Client: admin, APIReader: admin, Recorder: &events.FakeRecorder{},
		Clock: w.clock, VSphere: conn, Credentials: secretpolicy.Policy{Namespace: credentialsNamespace}}
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// pool is the day/night pool of this world, its workers without Kubernetes nodes,
// parking by suspend.
func (w *world) pool() *gpupoolv1.GPUPoolProfile {
	prefix := strings.TrimSuffix(w.name, "lab")
	p := testworld.DayNight(w.sim, prefix, w.name, gpupoolv1.SecretReference{Name: prefix + "vcenter", Namespace: credentialsNamespace})
	p.TypeMeta = metav1.TypeMeta{APIVersion: gpupoolv1.GroupVersion.String(), Kind: "GPUPoolProfile"}
	p.Spec.Parking = gpupoolv1.ParkingSuspend
	for i := range p.Spec.Layouts {
		for j := range p.Spec.Layouts[i].Workers {
			p.Spec.Layouts[i].Workers[j].NoNode = true
		}
	}
	return p
}

func (w *world) create(p *gpupoolv1.GPUPoolProfile) {
	w.t.Helper()
	testworld.CreatePool(w.t, admin, p)
}

func (w *world) get() *gpupoolv1.GPUPoolProfile {
	w.t.Helper()
	return testworld.GetPool(w.t, admin, w.name)
}

// operate runs the operator until the pool is Steady with the layout (any wanted layout
// when empty) active, or Paused with it wanted when spec.paused is set, moving the fake
// clock by the requeue delay (bounded) after each pass (testworld.Loop). The workers
// have no nodes, so there is no world to settle.
func (w *world) operate(layout string) *gpupoolv1.GPUPoolProfile {
	w.t.Helper()
	return testworld.Loop{T: w.t, Clock: w.clock, Reconcile: w.reconcile, Get: w.get}.Converge(layout, 40)
}

// pass runs one reconcile of the pool and moves the clock by a second.
func (w *world) pass() {
	w.t.Helper()
	w.reconcile()
	w.clock.Step(time.Second)
}

func (w *world) reconcile() ctrl.Result {
	w.t.Helper()
	res, err := w.rec.Reconcile(w.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: w.name}})
	w.must(err)
	return res
}

// run runs the plugin as a user, at the world's time, with stdin, and returns what it
// printed. Without --tz in args, times are shown in the pool's zone (Europe/Berlin).
func (w *world) run(user, stdin string, args ...string) (string, error) {
	w.t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}
	a := newApp(streams, w.clock.Now)
	a.wrapClient = w.wrap
	cmd := a.command()
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfigs[user]}, args...))
	err := cmd.ExecuteContext(w.ctx)
	if testing.Verbose() {
		w.t.Logf("$ kubectl gpupool %s   # as %s\n%s%s", strings.Join(args, " "), user, out.String(), errOut.String())
	}
	return out.String() + errOut.String(), err
}

// ok runs the plugin and fails the test when it fails or misses a want.
func (w *world) ok(user, stdin string, args []string, want ...string) string {
	w.t.Helper()
	out, err := w.run(user, stdin, args...)
	if err != nil {
		w.t.Fatalf("kubectl gpupool %v as %s: %v\n%s", args, user, err, out)
	}
	for _, s := range want {
		if !strings.Contains(out, s) {
			w.t.Errorf("kubectl gpupool %v: output lacks %q:\n%s", args, s, out)
		}
	}
	return out
}

func ioStreams(out *strings.Builder) genericiooptions.IOStreams {
	return genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: out}
}
