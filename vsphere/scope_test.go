package vsphere_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/object"
	vimtypes "github.com/vmware/govmomi/vim25/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpupool/gpupool/internal/testclock"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// TestScopedInventoryAgreesWithTheWholeRead: for every VM, and every pair of VMs, of
// each test inventory (clusters, folders, standalone hosts, hosts in maintenance or not
// responding, suspended VMs, several vGPUs), the inventory scoped to them holds exactly
// the hosts of their compute resources, as the whole read has them, every VM on those
// hosts as the whole read has it, and every other VM of the datacenter by name, path,
// host and power state; and a second read of the same scope is one round trip.
// With page set, the reads come in answers of that many objects (vsphere's readPage):
// the whole read in pages must agree with the one in one answer, and the scoped reads
// with it.
//
// Every scoped read test runs twice: with the reads of a pool made afresh each time, as
// for small pools, and kept by a view (inventoryview.go), as for large ones.
func TestScopedInventoryAgreesWithTheWholeRead(t *testing.T) {
	for _, file := range []string{"daynight.yaml", "twohost.yaml", "features.yaml"} {
		for _, page := range []int32{0, 1, 2, 7} {
			for _, m := range readModes {
				t.Run(fmt.Sprintf("%s/page=%d/%s", file, page, m.name), func(t *testing.T) { scopedAgreesWithWhole(t, file, page, m) })
			}
		}
	}
}

// readMode is how a test's client reads a pool: afresh, or through a view.
type readMode struct {
	name    string
	watched bool
}

var readModes = []readMode{{"afresh", false}, {"watched", true}}

func (m readMode) options() []vsphere.Option {
	if m.watched {
		return []vsphere.Option{vsphere.WithWatchedInventory(1)}
	}
	return []vsphere.Option{vsphere.WithWatchedInventory(0)}
}

// wantOneRead fails unless the reads since the last ResetCalls were one round trip of
// the mode: one property read, or one poll of the view and no read.
func (m readMode) wantOneRead(t *testing.T, e *env, what string) {
	t.Helper()
	reads := e.sim.Calls("RetrievePropertiesEx") + e.sim.Calls("RetrieveProperties")
	polls := e.sim.Calls(vgpusim.PollMethod)
	if m.watched && (reads != 0 || polls != 1) {
		t.Errorf("%s: %d property reads and %d polls, want one poll", what, reads, polls)
	}
	if !m.watched && (reads != 1 || polls != 0) {
		t.Errorf("%s: %d property reads and %d polls, want one read", what, reads, polls)
	}
}

func scopedAgreesWithWhole(t *testing.T, file string, page int32, m readMode) {
	// Each scope is a pool of its own; the views of the scopes before are left idle
	// long enough to make room (a session keeps 8).
	clk := clocktesting.NewFakeClock(testclock.Base())
	e := newEnv(t, file, append(m.options(), vsphere.WithClock(clk))...)
	whole, err := e.c.Inventory(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if page > 0 {
		vsphere.SetReadPage(t, page)
		e.sim.ResetCalls()
		paged, err := e.c.Inventory(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(paged, whole) {
			t.Errorf("read in pages of %d\n got %+v\nwant %+v", page, paged, whole)
		}
		if e.sim.Calls("ContinueRetrievePropertiesEx") == 0 {
			t.Errorf("read in pages of %d: no ContinueRetrievePropertiesEx", page)
		}
	}
	spec, err := vgpusim.LoadFile("../test/vgpusim/testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	// A host without a cluster is a compute resource of its own.
	clusterOf := func(host string) string {
		for _, h := range spec.Hosts {
			if h.Name == host && h.Cluster != "" {
				return h.Cluster
			}
		}
		return "standalone " + host
	}
	var scopes [][]string
	for i, a := range whole.VMs {
		scopes = append(scopes, []string{a.Name})
		for _, b := range whole.VMs[i+1:] {
			scopes = append(scopes, []string{a.Name, b.Path})
		}
	}
	for _, ids := range scopes {
		clk.Step(time.Hour)
		hosts := map[string]bool{}
		for _, id := range ids {
			vm, _ := whole.FindVM(id)
			for _, h := range whole.Hosts {
				if clusterOf(h.Name) == clusterOf(vm.Host) {
					hosts[h.Name] = true
				}
			}
		}
		scoped, err := e.c.Inventory(e.ctx, ids...)
		if err != nil {
			t.Fatal(err)
		}
		var gotHosts []string
		for _, h := range scoped.Hosts {
			gotHosts = append(gotHosts, h.Name)
			w, _ := whole.FindHost(h.Name)
			if !reflect.DeepEqual(h, *w) {
				t.Errorf("scope %v: host %s\n got %+v\nwant %+v", ids, h.Name, h, *w)
			}
		}
		for h := range hosts {
			if !slices.Contains(gotHosts, h) {
				t.Errorf("scope %v: host %s of the VMs' compute resources missing (got %v)", ids, h, gotHosts)
			}
		}
		if len(gotHosts) != len(hosts) {
			t.Errorf("scope %v: hosts %v, want those of the VMs' compute resources only (%d)", ids, gotHosts, len(hosts))
		}
		if len(scoped.VMs) != len(whole.VMs) {
			t.Fatalf("scope %v: %d VMs listed, want all %d", ids, len(scoped.VMs), len(whole.VMs))
		}
		for i, v := range scoped.VMs {
			w := whole.VMs[i]
			if hosts[w.Host] {
				if !reflect.DeepEqual(v, w) {
					t.Errorf("scope %v: VM %s\n got %+v\nwant %+v", ids, w.Name, v, w)
				}
				continue
			}
			if v.Name != w.Name || v.Path != w.Path || v.Host != w.Host || v.PowerState != w.PowerState || v.Ref != w.Ref {
				t.Errorf("scope %v: VM %s outside the scope listed as %+v, want name, path, host and power state of %+v", ids, w.Name, v, w)
			}
			if v.Profile != "" || len(v.GPUs) > 0 {
				t.Errorf("scope %v: VM %s outside the scope was read in full: %+v", ids, w.Name, v)
			}
		}
		e.sim.ResetCalls()
		if _, err := e.c.Inventory(e.ctx, ids...); err != nil {
			t.Fatal(err)
		}
		m.wantOneRead(t, e, fmt.Sprintf("scope %v: the second read", ids))
	}
}

// TestScopedInventorySurvivesADeletedVM: a VM of the kept scope deleted between two
// reads (Cluster API replacing a VM, an admin cleaning up) does not fail the read, nor
// every read after it.
func TestScopedInventorySurvivesADeletedVM(t *testing.T) {
	for _, m := range readModes {
		t.Run(m.name, func(t *testing.T) { survivesADeletedVM(t, m) })
	}
}

func survivesADeletedVM(t *testing.T, m readMode) {
	e := newEnv(t, "features.yaml", m.options()...)
	for range 2 {
		if _, err := e.c.Inventory(e.ctx, "small-1"); err != nil {
			t.Fatal(err)
		}
	}
	u := *e.sim.URL
	u.User = url.UserPassword(e.sim.Username, e.sim.Password)
	c, err := govmomi.NewClient(e.ctx, &u, true)
	if err != nil {
		t.Fatal(err)
	}
	task, err := object.NewVirtualMachine(c.Client, vimtypes.ManagedObjectReference{Type: "VirtualMachine", Value: e.ref("mover")}).Destroy(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(e.ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		inv, err := e.c.Inventory(e.ctx, "small-1")
		if err != nil {
			t.Fatalf("read %d after the deletion: %v", i+1, err)
		}
		if _, ok := inv.FindVM("mover"); ok {
			t.Fatalf("read %d: the deleted VM is still listed", i+1)
		}
		for _, vm := range inv.VMs {
			if vm.Name == "" {
				t.Fatalf("read %d: a VM without a name: %+v", i+1, vm)
			}
		}
		if vm, ok := inv.FindVM("small-1"); !ok || vm.Profile == "" {
			t.Fatalf("read %d: small-1 %+v", i+1, vm)
		}
	}
	if polls := e.sim.Calls(vgpusim.PollMethod); m.watched && polls == 0 {
		t.Fatal("no read after the deletion was served by the view")
	}
}

// TestScopedReadsFollowEveryChange: over a seeded random walk of power operations and
// vGPU reconfigurations on the day/night host, each scoped read (served partly from the
// session's memo of devices) has every VM and host of its scope exactly as a whole read
// (every device read afresh) has it; a read after no change is one property read, and
// one after a reconfiguration two (the devices of the reconfigured VM only). Through a
// view, each scoped read is one poll, whatever changed.
func TestScopedReadsFollowEveryChange(t *testing.T) {
	for _, m := range readModes {
		t.Run(m.name, func(t *testing.T) { readsFollowEveryChange(t, m) })
	}
}

func readsFollowEveryChange(t *testing.T, m readMode) {
	e := newEnv(t, "daynight.yaml", m.options()...)
	vms := []string{"gpu-day-1", "gpu-day-2", "gpu-day-3", "gpu-day-4", "gpu-night-1"}
	profiles := []string{"grid_p100-1q", "grid_p100-2q", "grid_p100-4q", "grid_p100-8q", "grid_p100-16q"}
	rng := rand.New(rand.NewPCG(7, 37))
	compare := func(step int) {
		t.Helper()
		scoped, err := e.c.Inventory(e.ctx, "gpu-day-1")
		if err != nil {
			t.Fatal(err)
		}
		whole, err := e.c.Inventory(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(scoped.VMs, whole.VMs) || !reflect.DeepEqual(scoped.Hosts, whole.Hosts) {
			t.Fatalf("step %d: scoped read\n%+v\nwhole read\n%+v", step, scoped, whole)
		}
	}
	reads := func() int {
		return e.sim.Calls("RetrievePropertiesEx") + e.sim.Calls("RetrieveProperties")
	}
	compare(-1)
	reconfigured := 0
	for step := range 60 {
		vm := vms[rng.IntN(len(vms))]
		st, _ := e.sim.VM(vm)
		var op func(context.Context, string) (string, error)
		changes := false
		switch {
		case st.PowerState != "poweredOff" && rng.IntN(2) == 0:
			op = e.c.Suspend
		case st.PowerState != "poweredOff":
			op = e.c.PowerOff
		case rng.IntN(2) == 0:
			op = func(ctx context.Context, id string) (string, error) { return e.c.PowerOn(ctx, id, "") }
		default:
			p := profiles[rng.IntN(len(profiles))]
			n := 1 + rng.IntN(2)
			op = func(ctx context.Context, id string) (string, error) { return e.c.SetProfile(ctx, id, p, n) }
			changes = true
		}
		if st.PowerState == "suspended" && rng.IntN(2) == 0 {
			op = func(ctx context.Context, id string) (string, error) { return e.c.PowerOn(ctx, id, "") }
		}
		id, err := op(e.ctx, e.ref(vm))
		if err != nil {
			t.Fatalf("step %d, %s: %v", step, vm, err)
		}
		if id != "" {
			if _, err := e.c.Task(e.ctx, id); err != nil {
				t.Fatal(err)
			}
		} else {
			changes = false // the VM had these vGPUs already
		}
		e.sim.ResetCalls()
		compare(step)
		want := 2 + 1 // the scoped read's two calls, and the whole read
		if !changes {
			want = 1 + 1
		} else {
			reconfigured++
		}
		if m.watched {
			want = 1 // the whole read; the scoped one is a poll
			if polls := e.sim.Calls(vgpusim.PollMethod); polls != 1 {
				t.Fatalf("step %d (%s): %d polls, want 1", step, vm, polls)
			}
		}
		if got := reads(); got != want {
			t.Fatalf("step %d (%s, reconfigured %t): %d property reads, want %d", step, vm, changes, got, want)
		}
	}
	if reconfigured < 5 {
		t.Fatalf("the walk reconfigured %d times: it tests too little", reconfigured)
	}
}
