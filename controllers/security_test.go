package controllers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/vsphere"
)

const canary = "canary-Pa55-0c1d2e" //nolint:gosec // a test password, looked for everywhere.

// setPassword puts password into the test's credentials Secret (a new resourceVersion).
func (h *harness) setPassword(password string) {
	h.t.Helper()
	var s corev1.Secret
	h.must(k8s.Get(h.ctx, client.ObjectKey{Namespace: h.prefix + "apps", Name: "vcenter"}, &s))
	s.Data = map[string][]byte{"username": []byte(h.sim.Username), "password": []byte(password)}
	h.must(k8s.Update(h.ctx, &s))
}

// named is the day/night pool under another name, with the given VMs' workers only.
func (h *harness) named(name string) *gpupoolv1.GPUPoolProfile {
	p := h.dayNight()
	p.Name = h.prefix + name
	return p
}

func (h *harness) condition(name, typ string) metav1.Condition {
	h.t.Helper()
	if c := findCondition(h.get(name), typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// A pool that names a Secret outside the allowed namespaces (it got past admission:
// webhook down) is held before any Secret is read or any login is tried.
func TestCredentialsNamespaceNotAllowed(t *testing.T) {
	h := newHarness(t, "secns-")
	p := h.dayNight()
	p.Spec.VCenter.CredentialsSecretRef.Namespace = "kube-system"
	h.create(p)
	before := h.sim.Logins()
	h.reconcile(p.Name)
	c := h.condition(p.Name, gpupoolv1.ConditionStalled)
	if c.Status != metav1.ConditionTrue || c.Reason != ReasonCredentialsNotAllowed {
		t.Fatalf("Stalled = %+v, want True/%s", c, ReasonCredentialsNotAllowed)
	}
	if n := h.sim.Logins() - before; n != 0 {
		t.Fatalf("%d login attempts with a Secret from a namespace that is not allowed", n)
	}
}

// TestRefusedLoginNodeEvents: 1,000 node events, each reconciling one of 10 pools that
// share a refused account, make one login attempt per back-off period (counted by
// vgpusim); a changed Secret is tried at once.
func TestRefusedLoginNodeEvents(t *testing.T) {
	h := newHarness(t, "lock-")
	h.conn = newConnector(vsphere.WithClock(h.clock))
	t.Cleanup(func() { closeConnector(h.conn) })
	h.setPassword(canary)
	var names []string
	for i := 0; i < 10; i++ {
		p := h.named(fmt.Sprintf("p%d", i))
		h.create(p)
		names = append(names, p.Name)
	}
	before := h.sim.Logins()
	var res ctrl.Result
	for event := 0; event < 1000; event++ {
		res = h.reconcile(names[event%len(names)])
	}
	if n := h.sim.Logins() - before; n != 1 {
		t.Fatalf("1,000 node events over 10 pools: %d login attempts, want 1", n)
	}
	if res.RequeueAfter < vsphere.LoginBackoff-time.Second || res.RequeueAfter > vsphere.LoginBackoff {
		t.Fatalf("requeue after %s, want the back-off (%s)", res.RequeueAfter, vsphere.LoginBackoff)
	}
	c := h.condition(names[0], gpupoolv1.ConditionStalled)
	if c.Reason != ReasonCredentials || !strings.Contains(c.Message, "refused") {
		t.Fatalf("Stalled = %+v, want the refused credentials", c)
	}

	h.clock.Step(vsphere.LoginBackoff)
	for event := 0; event < 100; event++ {
		h.reconcile(names[event%len(names)])
	}
	if n := h.sim.Logins() - before; n != 2 {
		t.Fatalf("after one back-off: %d login attempts, want 2", n)
	}

	h.setPassword(h.sim.Password)
	h.reconcile(names[0])
	if n := h.sim.Logins() - before; n != 3 {
		t.Fatalf("after the Secret was fixed: %d login attempts, want 3", n)
	}
	if c := h.condition(names[0], gpupoolv1.ConditionStalled); c.Reason == ReasonCredentials {
		t.Fatalf("still stalled on credentials after the fix: %+v", c)
	}
}

// The password is rotated on vCenter before the Secret, and the session expires: the
// refused re-login is reported as refused credentials (not "vCenter unavailable",
// retried every 30 s) and not tried again for the back-off, however often the pool is
// reconciled.
func TestRotatedPasswordReloginRefused(t *testing.T) {
	h := newHarness(t, "rotate-")
	h.conn = newConnector(vsphere.WithClock(h.clock))
	t.Cleanup(func() { closeConnector(h.conn) })
	p := h.dayNight()
	h.create(p)
	h.converge(p.Name, "night", 40)

	h.sim.SetPassword(canary)
	h.sim.ExpireSessions()
	before := h.sim.Logins()
	var res ctrl.Result
	for i := 0; i < 100; i++ {
		res = h.reconcile(p.Name)
	}
	if n := h.sim.Logins() - before; n != 1 {
		t.Fatalf("100 reconciles after the rotation: %d login attempts, want 1", n)
	}
	c := h.condition(p.Name, gpupoolv1.ConditionStalled)
	if c.Status != metav1.ConditionTrue || c.Reason != ReasonCredentials {
		t.Fatalf("Stalled = %+v, want True/%s; %s", c, ReasonCredentials, testworld.Conditions(h.get(p.Name)))
	}
	if res.RequeueAfter < time.Minute {
		t.Fatalf("requeue after %s: a refused login must wait for the back-off", res.RequeueAfter)
	}
}

// Two pools claim one VM through two spellings of one vCenter (an address and a name
// that vgpusim answers on alike): the younger is held with ConflictingClaim before it
// acts, the older goes on.
func TestConflictingClaimHoldsYoungerPool(t *testing.T) {
	h := newHarness(t, "claim-")
	older := h.named("a-older")
	h.create(older)
	younger := h.named("b-younger")
	younger.Spec.VCenter.Server = "https://localhost:" + h.sim.URL.Port() + "/sdk/"
	younger.Spec.Layouts = younger.Spec.Layouts[:1] // only the day VMs
	younger.Spec.DefaultLayout, younger.Spec.Schedule = "day", nil
	h.create(younger)
	if !olderThan(h.get(older.Name), h.get(younger.Name)) {
		t.Fatal("test setup: the pools' ages are not as named")
	}

	h.sim.ResetCalls()
	h.reconcile(younger.Name)
	c := h.condition(younger.Name, gpupoolv1.ConditionStalled)
	if c.Status != metav1.ConditionTrue || c.Reason != ReasonConflictingClaim || !strings.Contains(c.Message, older.Name) {
		t.Fatalf("younger pool: Stalled = %+v, want True/%s naming %s; %s", c, ReasonConflictingClaim, older.Name, testworld.Conditions(h.get(younger.Name)))
	}
	for _, m := range []string{"PowerOnVM_Task", "PowerOffVM_Task", "SuspendVM_Task", "ReconfigVM_Task", "ShutdownGuest"} {
		if n := h.sim.Calls(m); n != 0 {
			t.Fatalf("the held pool called %s %d times", m, n)
		}
	}
	h.reconcile(older.Name)
	if c := h.condition(older.Name, gpupoolv1.ConditionStalled); c.Reason == ReasonConflictingClaim {
		t.Fatalf("the older pool is held too: %+v", c)
	}
}

// noVMs points a pool's workers at VMs that do not exist, so it claims nothing.
func noVMs(p *gpupoolv1.GPUPoolProfile) {
	for i := range p.Spec.Layouts {
		for j := range p.Spec.Layouts[i].Workers {
			p.Spec.Layouts[i].Workers[j].VM = p.Name + "-absent-" + fmt.Sprint(j)
		}
	}
}

// TestCanaryNeverLeaks: a canary password appears in no log line, event, status field,
// condition, metric label or error: when the login is refused, when it works, and when
// the server is malformed or carries user info.
func TestCanaryNeverLeaks(t *testing.T) {
	h := newHarness(t, "canary-")
	var (
		mu   sync.Mutex
		logs bytes.Buffer
	)
	sink := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(&logs, prefix, args)
	}, funcr.Options{Verbosity: 5}) // every level gpupool logs at; 8+ is client-go's dump of API bodies
	h.conn = newConnector(vsphere.WithLogger(sink), vsphere.WithClock(h.clock))
	t.Cleanup(func() { closeConnector(h.conn) })
	ctx := logr.NewContext(h.ctx, sink)
	var errs []string
	reconcile := func(name string) {
		if _, err := h.reconciler().Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Name: name}}); err != nil {
			errs = append(errs, err.Error())
		}
	}

	h.setPassword(canary) // refused: vgpusim has another password
	good := h.named("good")
	h.create(good)
	userInfo := h.named("userinfo")
	userInfo.Spec.VCenter.Server = "https://" + h.sim.Username + ":" + canary + "@" + h.sim.URL.Host + "/sdk"
	noVMs(userInfo)
	h.create(userInfo)
	malformed := h.named("malformed")
	malformed.Spec.VCenter.Server = "%zz" + h.sim.Username + ":" + canary + "@" + h.sim.URL.Host
	noVMs(malformed)
	h.create(malformed)
	names := []string{good.Name, userInfo.Name, malformed.Name}
	for i := 0; i < 3; i++ {
		for _, n := range names {
			reconcile(n)
		}
	}
	if c := h.condition(good.Name, gpupoolv1.ConditionStalled); c.Reason != ReasonCredentials {
		t.Fatalf("the refused login is not reported: %+v", c)
	}

	// The canary becomes the right password: a successful login and a transition.
	h.sim.SetPassword(canary)
	var s corev1.Secret
	h.must(k8s.Get(h.ctx, client.ObjectKey{Namespace: h.prefix + "apps", Name: "vcenter"}, &s))
	s.Labels = map[string]string{"rotated": "yes"} // any change of the Secret retries at once
	h.must(k8s.Update(h.ctx, &s))
	for i := 0; i < 5; i++ {
		// No settle: the harness's own vSphere client still has the old password.
		reconcile(good.Name)
		h.clock.Step(5 * time.Second)
	}
	if c := h.condition(good.Name, gpupoolv1.ConditionStalled); c.Reason == ReasonCredentials {
		t.Fatalf("still refused after the rotation: %+v", c)
	}

	var where []string
	check := func(what, text string) {
		if strings.Contains(text, canary) {
			where = append(where, what)
		}
	}
	mu.Lock()
	for _, line := range strings.Split(logs.String(), "\n") {
		// The line is shown with the canary masked, to say where it leaked.
		if i := strings.Index(line, canary); i >= 0 {
			check("log line ..."+strings.ReplaceAll(line[max(0, i-200):min(len(line), i+100)], canary, "<CANARY>"), line)
		}
	}
	mu.Unlock()
	for _, e := range h.events() {
		check("event "+e, e)
	}
	for _, e := range errs {
		check("error", e)
	}
	for _, n := range names {
		p := h.get(n)
		st, _ := json.Marshal(p.Status)
		check("status of "+n, string(st))
	}
	families, err := metrics.Registry.Gather()
	h.must(err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				check("metric "+f.GetName(), l.GetValue())
			}
		}
	}
	if len(where) > 0 {
		t.Fatalf("the password leaked into: %s", strings.Join(where, "; "))
	}
	if logs.Len() == 0 {
		t.Fatal("no logs were captured: the check above proves nothing")
	}
}
