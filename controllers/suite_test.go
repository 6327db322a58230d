package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/nodes"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// The suite runs the reconciler against a real kube-apiserver and etcd (envtest), kwok
// as the nodes' kubelets and vgpusim as vCenter. Tests call Reconcile directly with a
// fake clock, so time only moves when a test says so.

var (
	testScheme = testworld.Scheme(clusterv1.AddToScheme)
	k8s        client.WithWatch
	kwok       *cluster.Kwok
	// operator is the reconciler's client: a user bound to the ClusterRole generated
	// into config/rbac, so the tests fail when the RBAC markers miss a permission.
	operator client.WithWatch
	// suiteEnv is the suite's control plane, for what tests start on it later (Kueue).
	suiteEnv *envtest.Environment
	// operatorConfig is the operator user's REST config, for tests that record events
	// through the events API as the manager does.
	operatorConfig *rest.Config
)

func TestMain(m *testing.M) {
	root := testenv.Root()
	opts := testenv.Options{ExtraCRDPaths: []string{
		filepath.Join(root, "test", "crds", "cluster-api"), filepath.Join(root, "test", "crds", "infrastructure")}}
	os.Exit(testworld.Main(m, opts, setUpSuite))
}

// setUpSuite makes the admin and operator clients and starts kwok as the nodes'
// kubelets; Kueue's controller is started by the first test that needs it (startKueue).
func setUpSuite(s *testworld.Suite) error {
	suiteEnv = s.Env
	var err error
	if k8s, err = client.NewWithWatch(s.Config, client.Options{Scheme: testScheme}); err != nil {
		return err
	}
	if operator, err = operatorClient(s.Env); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gpupool-kwok-")
	if err != nil {
		return err
	}
	s.Defer(func() { _ = os.RemoveAll(dir) })
	if kwok, err = cluster.StartKwok(filepath.Join(s.Env.BinaryAssetsDirectory, "kwok"), s.Env.KubeConfig, dir); err != nil {
		return err
	}
	s.Defer(func() {
		if s.Code != 0 {
			fmt.Fprintln(os.Stderr, "kwok log (tail):", tail(kwok.Log(), 3000))
		}
		kwok.Stop()
	})
	s.Defer(stopKueue)
	return nil
}

// operatorClient makes a user with exactly the operator's generated RBAC
// (config/rbac/role.yaml: the ClusterRole, and the namespaced Role for Secrets, which
// grantSecrets binds in a test's namespace) and returns a client acting as that user.
func operatorClient(env *envtest.Environment) (client.WithWatch, error) {
	ctx := context.Background()
	clusterRoles, roles, err := testworld.ReadRBAC("role.yaml")
	if err != nil {
		return nil, err
	}
	if len(clusterRoles) != 1 || len(roles) != 1 {
		return nil, fmt.Errorf("config/rbac/role.yaml: %d ClusterRoles and %d Roles, want one of each", len(clusterRoles), len(roles))
	}
	role := clusterRoles[0]
	secretsRole = roles[0]
	if err := k8s.Create(ctx, &role); err != nil {
		return nil, err
	}
	if err := testworld.BindClusterRole(ctx, k8s, "gpupool-operator", role.Name, "gpupool-operator"); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "gpupool-operator"}, nil)
	if err != nil {
		return nil, err
	}
	cfg := user.Config()
	cfg.QPS, cfg.Burst = 1000, 2000 // as envtest's admin config: no client-side throttling
	operatorConfig = cfg
	return client.NewWithWatch(cfg, client.Options{Scheme: testScheme})
}

// secretsRole is the generated namespaced Role that lets the operator read Secrets.
var secretsRole rbacv1.Role

// grantSecrets binds the generated Secrets Role to the operator in namespace ns, as the
// install does in the operator's namespace and an admin does in each allowed one.
func grantSecrets(ctx context.Context, ns string) error {
	role := secretsRole.DeepCopy()
	role.Namespace, role.ResourceVersion = ns, ""
	if err := k8s.Create(ctx, role); err != nil {
		return err
	}
	return k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gpupool-operator-secrets", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "gpupool-operator"}},
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// monday0700 is a Monday, 07:00 in Berlin: night by the day/night schedule.
var monday0700 = testworld.Monday(7, 0)

func mustZone(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return l
}

// harness is one test's world: its own vgpusim, nodes and pool, named with a prefix so
// tests never see each other's objects.
type harness struct {
	t        *testing.T
	ctx      context.Context
	prefix   string
	sim      *vgpusim.Sim
	clock    *clocktesting.FakeClock
	conn     vsphere.Connector
	recorder *events.FakeRecorder
	// eventSink, when set, is the reconciler's recorder instead of recorder.
	eventSink events.EventRecorder
	// restart makes every reconcile run on a new reconciler with a new vSphere
	// connector, as after an operator restart.
	restart bool
	// forget makes every reconcile run on a new reconciler on the same connector: what
	// a restarted operator remembers of earlier passes (nothing), with the connector's
	// hooks (hookConnector) kept.
	forget bool
	// startsBehind: the reconciler asks vCenter for its task starts past the pass
	// (execute.Starts, as the manager does), each reconciler with Starts of its own (a
	// restarted manager remembers none); reconcile waits for them after each pass.
	startsBehind bool
	// statusInterval is the reconciler's StatusInterval (0: every pass writes).
	statusInterval time.Duration
	rec            *GPUPoolProfileReconciler
	// steps is every (vm, step) a worker was seen at, in order.
	steps []string
	// client, when set, wraps the reconciler's client (to inject faults).
	client func(client.WithWatch) client.Client
	// errors counts reconciles that returned an error; with tolerateErrors they do
	// not fail the test.
	errors         int
	tolerateErrors bool
	restarts       int
	crashes        int
	// kueueFollows: every pool pass (reconcile) is followed by a pass of the Kueue
	// controller, as the manager's watch of the pool's status would wake it.
	kueueFollows bool
}

func newHarness(t *testing.T, prefix string) *harness {
	t.Helper()
	return newHarnessWith(t, prefix, vgpusim.OneHostDayNight)
}

// newHarnessWith is a harness on another vgpusim inventory, a template in which %[1]s
// stands for the test's prefix.
func newHarnessWith(t *testing.T, prefix, inventory string) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sim := vgpusim.StartT(t, fmt.Sprintf(inventory, prefix))
	h := &harness{t: t, ctx: ctx, prefix: prefix, sim: sim, clock: clocktesting.NewFakeClock(monday0700),
		recorder: events.NewFakeRecorder(10000)}
	h.conn = newConnector()
	t.Cleanup(func() { closeConnector(h.conn) })

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "apps"}}
	h.must(k8s.Create(ctx, ns))
	h.must(grantSecrets(ctx, ns.Name))
	h.must(k8s.Create(ctx, testworld.VCenterSecret(sim, "vcenter", ns.Name)))

	vc := h.vsphereClient()
	got, err := vc.Inventory(ctx)
	h.must(err)
	// The simulated device plugin advertises the GPUs shortly after a node is Ready;
	// settle waits for it, so that only the tests that look at that wait see it.
	h.must(cluster.CreateNodes(ctx, k8s, got, cluster.WithGPUDelay(harnessGPUDelay)))
	t.Cleanup(func() {
		for _, vm := range got.VMs {
			_ = k8s.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: vm.Name}})
		}
	})
	h.waitNodesMatchPower()
	return h
}

func closeConnector(c vsphere.Connector) {
	if cl, ok := c.(interface{ Close() }); ok {
		cl.Close()
	}
}

func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) vsphereClient() vsphere.Client {
	h.t.Helper()
	vc, err := h.conn.Connect(h.ctx, h.vcConfig())
	h.must(err)
	return vc
}

func (h *harness) vcConfig() vsphere.Config {
	return vsphere.Config{Server: h.sim.URL.Host, Datacenter: h.sim.Datacenter(), Username: h.sim.Username,
		Password: h.sim.Password, Thumbprint: h.sim.ThumbprintSHA256()}
}

// dayNight is the day/night sample pointed at this test's simulator, with the sample's
// node labels and the night layout's taint.
func (h *harness) dayNight() *gpupoolv1.GPUPoolProfile {
	p := testworld.DayNight(h.sim, h.prefix, h.prefix+"daynight", gpupoolv1.SecretReference{Name: "vcenter", Namespace: h.prefix + "apps"})
	testworld.Layout(p, "day").NodeLabels = map[string]string{"lab.example/workload": "inference"}
	night := testworld.Layout(p, "night")
	night.NodeLabels = map[string]string{"lab.example/workload": "training"}
	night.NodeTaints = []corev1.Taint{{Key: "lab.example/training", Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	return p
}

func (h *harness) create(p *gpupoolv1.GPUPoolProfile) {
	h.t.Helper()
	testworld.CreatePool(h.t, k8s, p)
}

func (h *harness) reconciler() *GPUPoolProfileReconciler {
	if h.rec == nil || h.restart || h.forget {
		if h.restart && h.rec != nil {
			closeConnector(h.conn)
			h.conn = newConnector()
		}
		c := client.Client(operator)
		if h.client != nil {
			c = h.client(operator)
		}
		if h.rec != nil {
			h.restarts++
		}
		var rec events.EventRecorder = h.recorder
		if h.eventSink != nil {
			rec = h.eventSink
		}
		// The field managers the manager's clients write under (cmd/manager, SetupWithManager).
		h.rec = &GPUPoolProfileReconciler{Client: client.WithFieldOwner(c, FieldOwner), APIReader: operator, Recorder: rec, Clock: h.clock, VSphere: h.conn,
			Credentials: secretpolicy.Policy{Namespace: h.prefix + "apps"}, StatusInterval: h.statusInterval}
		if h.startsBehind {
			h.rec.starts = execute.NewStarts(h.ctx, nil)
		}
	}
	return h.rec
}

// errCrash is what a fault injector panics with to stand in for the manager dying in
// the middle of a pass; reconcile recovers it and restarts the reconciler.
type errCrash struct{}

func (h *harness) call(name string) (res ctrl.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			if _, crash := v.(errCrash); !crash {
				panic(v)
			}
			h.crashes++
			h.rec = nil // the next pass runs on a new manager
			closeConnector(h.conn)
			h.conn = newConnector()
			res = ctrl.Result{RequeueAfter: time.Second}
		}
	}()
	return h.reconciler().Reconcile(h.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
}

// reconcile runs one reconcile of the pool and records the workers' steps.
func (h *harness) reconcile(name string) ctrl.Result {
	h.t.Helper()
	res, err := h.call(name)
	if h.startsBehind && h.rec != nil {
		h.rec.starts.Wait() // the starts the pass handed out are answered
	}
	if err != nil {
		h.errors++
		if !h.tolerateErrors {
			h.t.Fatalf("reconcile: %v", err)
		}
	}
	if h.kueueFollows {
		h.reconcileKueue(name)
	}
	var p gpupoolv1.GPUPoolProfile
	if err := k8s.Get(h.ctx, client.ObjectKey{Name: name}, &p); err != nil {
		return res // deleted
	}
	for _, w := range p.Status.Workers {
		if w.Step == "" {
			continue
		}
		e := w.VM + ":" + string(w.Step)
		if n := len(h.steps); n == 0 || !slices.Contains(h.steps[max(0, n-8):], e) {
			h.steps = append(h.steps, e)
		}
	}
	return res
}

// kueueReconciler is a Kueue controller on the harness's client and clock, as
// SetupWithManager registers beside the pool reconciler (it keeps no state between
// passes, so each pass may have a new one).
func (h *harness) kueueReconciler() *KueueReconciler {
	c := client.Client(operator)
	if h.client != nil {
		c = h.client(operator)
	}
	var rec events.EventRecorder = h.recorder
	if h.eventSink != nil {
		rec = h.eventSink
	}
	return &KueueReconciler{Client: client.WithFieldOwner(c, FieldOwnerKueue), APIReader: operator, Recorder: rec, Clock: h.clock}
}

// reconcileKueue runs one pass of the Kueue controller on the pool.
func (h *harness) reconcileKueue(name string) ctrl.Result {
	h.t.Helper()
	res, err := h.kueueReconciler().Reconcile(h.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}})
	if err != nil {
		h.errors++
		if !h.tolerateErrors {
			h.t.Fatalf("reconcile (Kueue): %v", err)
		}
	}
	return res
}

func (h *harness) get(name string) *gpupoolv1.GPUPoolProfile {
	h.t.Helper()
	return testworld.GetPool(h.t, k8s, name)
}

// settle lets the simulated world catch up after a reconcile: the power wire copies VM
// power states to the nodes, and the test waits until kwok has made each node's
// readiness match its VM.
func (h *harness) settle() {
	h.t.Helper()
	inv, err := h.vsphereClient().Inventory(h.ctx)
	h.must(err)
	if _, err := cluster.SyncPower(h.ctx, k8s, inv); err != nil {
		h.t.Fatal(err)
	}
	h.waitNodesMatchPower()
}

// harnessGPUDelay is how long after a node is Ready kwok advertises its GPUs in tests.
const harnessGPUDelay = 100 * time.Millisecond

// waitNodesMatchPower waits, with a watch and a deadline, until every node of this test
// is Ready exactly when its VM is powered on, and advertises its VM's GPUs exactly when
// it is Ready.
func (h *harness) waitNodesMatchPower() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 60*time.Second)
	defer cancel()
	check := func() (bool, string) {
		var list corev1.NodeList
		if err := k8s.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		for _, n := range list.Items {
			if !strings.HasPrefix(n.Name, h.prefix) {
				continue
			}
			// A node whose device plugin a test slowed down is waited for only to follow
			// its VM's power: the test looks at the wait for its GPUs.
			slowed := n.Annotations[cluster.AnnotationSimGPUDelay] != harnessGPUDelay.String()
			if slowed && nodes.Ready(&n) == (n.Annotations[cluster.AnnotationSimPower] == "poweredOn") {
				continue
			}
			if !cluster.FollowsPower(&n) {
				return false, fmt.Sprintf("node %s: Ready=%v, GPUs %s, VM %s with %s vGPUs", n.Name, nodes.Ready(&n), cluster.AdvertisedGPUs(&n),
					n.Annotations[cluster.AnnotationSimPower], n.Annotations[cluster.AnnotationSimGPUs])
			}
		}
		return true, ""
	}
	w, err := k8s.Watch(ctx, &corev1.NodeList{})
	h.must(err)
	defer w.Stop()
	for {
		ok, why := check()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("nodes did not follow their VMs' power state: %s", why)
		case ev, open := <-w.ResultChan():
			if !open || ev.Type == watch.Error {
				h.t.Fatalf("node watch ended: %v", ev.Object)
			}
		}
	}
}

// converge reconciles until the pool is Steady with the wanted layout active, letting
// the world settle and the fake clock move by the requeue delay (bounded) after each
// pass (testworld.Loop). It fails the test when the pool is Blocked or after maxIter
// passes.
func (h *harness) converge(name, layout string, maxIter int) *gpupoolv1.GPUPoolProfile {
	h.t.Helper()
	return testworld.Loop{T: h.t, Clock: h.clock,
		Reconcile: func() ctrl.Result { return h.reconcile(name) },
		Settle:    h.settle,
		Get:       func() *gpupoolv1.GPUPoolProfile { return h.get(name) },
	}.Converge(layout, maxIter)
}

func (h *harness) node(vm string) *corev1.Node {
	h.t.Helper()
	var n corev1.Node
	h.must(k8s.Get(h.ctx, client.ObjectKey{Name: h.prefix + vm}, &n))
	return &n
}

func (h *harness) vm(name string) vgpusim.VMState {
	h.t.Helper()
	st, ok := h.sim.VM(h.prefix + name)
	if !ok {
		h.t.Fatalf("no VM %s", name)
	}
	return st
}

// events drains the recorded events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// newConnector is the tests' session cache. Every pool's reads are kept by a view
// (vsphere.WithWatchedInventory(1)), as a large pool's are in the manager, so that
// every scenario of the suite (faults, crashes, exactly once) runs on it; reads made
// afresh, as a small pool's, are covered by the vsphere package's tests in both modes
// and by the end-to-end tests.
func newConnector(opts ...vsphere.Option) *vsphere.SessionCache {
	return vsphere.NewConnector(append([]vsphere.Option{vsphere.WithWatchedInventory(1)}, opts...)...)
}
