package vgpusim_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/fault"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"

	"github.com/gpupool/gpupool/test/vgpusim"
)

// watchSpec selects, from the datacenter down, every folder, VM, host and the hosts'
// recent tasks, with the properties a client of a pool reads.
func watchSpec(dc types.ManagedObjectReference) types.PropertyFilterSpec {
	ts := func(name, kind, path string, next ...string) *types.TraversalSpec {
		t := &types.TraversalSpec{SelectionSpec: types.SelectionSpec{Name: name}, Type: kind, Path: path, Skip: types.NewBool(false)}
		for _, n := range next {
			t.SelectSet = append(t.SelectSet, &types.SelectionSpec{Name: n})
		}
		return t
	}
	return types.PropertyFilterSpec{
		ObjectSet: []types.ObjectSpec{{Obj: dc, Skip: types.NewBool(true), SelectSet: []types.BaseSelectionSpec{
			ts("dcToVm", "Datacenter", "vmFolder", "folders"),
			ts("dcToHost", "Datacenter", "hostFolder", "folders"),
			ts("folders", "Folder", "childEntity", "folders", "crToHost"),
			ts("crToHost", "ComputeResource", "host", "hostToTask"),
			ts("hostToTask", "HostSystem", "recentTask"),
		}}},
		PropSet: []types.PropertySpec{
			{Type: "VirtualMachine", PathSet: []string{"name", "parent", "runtime.powerState", "runtime.host", "config.hardware.device", "recentTask"}},
			{Type: "HostSystem", PathSet: []string{"name", "config.graphicsInfo", "runtime.inMaintenanceMode", "runtime.connectionState", "recentTask"}},
			{Type: "Folder", PathSet: []string{"name", "parent"}},
			{Type: "ComputeResource", PathSet: []string{"host"}},
			{Type: "ClusterComputeResource", PathSet: []string{"host"}},
			{Type: "Task", PathSet: []string{"info.state", "info.descriptionId"}},
		},
	}
}

// watched starts twohost.yaml and returns it with a client and the datacenter's watchSpec.
func watched(t *testing.T) (*vgpusim.Sim, *govmomi.Client, types.PropertyFilterSpec) {
	t.Helper()
	sim := startSim(t, "twohost.yaml")
	c := connect(t, sim)
	dc, err := find.NewFinder(c.Client).Datacenter(context.Background(), sim.Datacenter())
	if err != nil {
		t.Fatal(err)
	}
	return sim, c, watchSpec(dc.Reference())
}

type objects map[types.ManagedObjectReference]map[string]types.AnyType

// poller is a client that keeps objects current from polls of its own collector.
type poller struct {
	t       *testing.T
	c       *govmomi.Client
	pc      *property.Collector
	version string
	objs    objects
	// answered counts the object updates of the last poll, over its pages.
	answered int
}

func newPoller(t *testing.T, c *govmomi.Client, specs ...types.PropertyFilterSpec) *poller {
	t.Helper()
	ctx := context.Background()
	pc, err := property.DefaultCollector(c.Client).Create(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Destroy(context.Background()) })
	for _, s := range specs {
		if _, err := pc.CreateFilter(ctx, types.CreateFilter{Spec: s}); err != nil {
			t.Fatal(err)
		}
	}
	return &poller{t: t, c: c, pc: pc, objs: objects{}}
}

// poll applies every page of one answer (pages of size objects).
func (p *poller) poll(size int32) {
	p.t.Helper()
	p.answered = 0
	for {
		res, err := methods.WaitForUpdatesEx(context.Background(), p.c.Client, &types.WaitForUpdatesEx{
			This: p.pc.Reference(), Version: p.version,
			Options: &types.WaitOptions{MaxWaitSeconds: types.NewInt32(0), MaxObjectUpdates: size},
		})
		if err != nil {
			p.t.Fatal(err)
		}
		set := res.Returnval
		if set == nil {
			return
		}
		p.version = set.Version
		for _, fs := range set.FilterSet {
			for _, ou := range fs.ObjectSet {
				p.answered++
				p.apply(ou)
			}
		}
		if set.Truncated == nil || !*set.Truncated {
			return
		}
	}
}

func (p *poller) apply(ou types.ObjectUpdate) {
	switch ou.Kind {
	case types.ObjectUpdateKindLeave:
		delete(p.objs, ou.Obj)
		return
	case types.ObjectUpdateKindEnter:
		if p.objs[ou.Obj] == nil { // an object two filters select enters with each
			p.objs[ou.Obj] = map[string]types.AnyType{}
		}
	}
	props, ok := p.objs[ou.Obj]
	if !ok {
		p.t.Fatalf("%s modified before it entered", ou.Obj)
	}
	for _, c := range ou.ChangeSet {
		switch c.Op {
		case types.PropertyChangeOpAssign:
			props[c.Name] = c.Val
		case types.PropertyChangeOpRemove:
			delete(props, c.Name)
		default:
			p.t.Fatalf("%s: change %s of %s", ou.Obj, c.Op, c.Name)
		}
	}
}

// read is what a full read of the specs returns.
func read(t *testing.T, c *govmomi.Client, specs ...types.PropertyFilterSpec) objects {
	t.Helper()
	out := objects{}
	for _, s := range specs {
		var content []types.ObjectContent
		res, err := property.DefaultCollector(c.Client).RetrieveProperties(context.Background(), types.RetrieveProperties{SpecSet: []types.PropertyFilterSpec{s}})
		if err != nil {
			t.Fatal(err)
		}
		content = res.Returnval
		for _, oc := range content {
			props := map[string]types.AnyType{}
			for _, p := range oc.PropSet {
				props[p.Name] = p.Val
			}
			out[oc.Obj] = props
		}
	}
	return out
}

func sameObjects(t *testing.T, step string, got, want objects) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: the polls hold %d objects, a read %d", step, len(got), len(want))
	}
	for ref, w := range want {
		g, ok := got[ref]
		if !ok {
			t.Fatalf("%s: the polls miss %s", step, ref)
		}
		if !reflect.DeepEqual(g, w) {
			for name := range w {
				if !reflect.DeepEqual(g[name], w[name]) {
					t.Fatalf("%s: %s.%s is %#v after the polls, %#v in a read", step, ref, name, g[name], w[name])
				}
			}
			t.Fatalf("%s: %s has properties %d after the polls, %d in a read", step, ref, len(g), len(w))
		}
	}
}

// TestPollsTellWhatAReadTells: after every kind of change the simulator makes (power
// operations that place and free vGPUs, a reconfigure, a host's maintenance, a VM made
// and destroyed), what the polls of a collector added up to is what a full read returns,
// over pages of any size; and a poll after one VM's power-on carries that VM, its host
// and their tasks, not the whole datacenter.
func TestPollsTellWhatAReadTells(t *testing.T) {
	for _, size := range []int32{0, 1, 3} {
		sim, c, spec := watched(t)
		ctx := context.Background()
		dc := object.NewDatacenter(c.Client, spec.ObjectSet[0].Obj)
		p := newPoller(t, c, spec)
		p.poll(size)
		sameObjects(t, "first poll", p.objs, read(t, c, spec))
		total := len(p.objs)

		p.poll(size)
		if p.answered != 0 {
			t.Fatalf("page size %d: a poll with nothing changed answered %d objects", size, p.answered)
		}

		vms, err := find.NewFinder(c.Client).SetDatacenter(dc).VirtualMachineList(ctx, "*")
		if err != nil {
			t.Fatal(err)
		}
		var on, off *object.VirtualMachine
		for _, vm := range vms {
			st, _ := sim.VM(vm.Name())
			if st.PowerState == "poweredOn" && on == nil {
				on = vm
			}
			if st.PowerState == "poweredOff" && off == nil {
				off = vm
			}
		}
		if on == nil || off == nil {
			t.Fatal("twohost.yaml has no powered-on and powered-off VM")
		}
		waitTask := func(task *object.Task, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			if err := task.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		steps := []struct {
			name string
			do   func()
		}{
			{"suspend", func() { waitTask(on.Suspend(ctx)) }},
			{"power on", func() { waitTask(on.PowerOn(ctx)) }},
			{"power off", func() { waitTask(on.PowerOff(ctx)) }},
			{"remove a vGPU", func() {
				devs, err := off.Device(ctx)
				if err != nil {
					t.Fatal(err)
				}
				pci := devs.SelectByType((*types.VirtualPCIPassthrough)(nil))
				if len(pci) == 0 {
					t.Fatal("no vGPU on the powered-off VM")
				}
				if err := off.RemoveDevice(ctx, false, pci[0]); err != nil {
					t.Fatal(err)
				}
			}},
			{"maintenance", func() {
				st, _ := sim.VM(on.Name())
				if err := sim.SetHostState(st.Host, true, "connected"); err != nil {
					t.Fatal(err)
				}
			}},
			{"out of maintenance", func() {
				st, _ := sim.VM(on.Name())
				if err := sim.SetHostState(st.Host, false, "connected"); err != nil {
					t.Fatal(err)
				}
			}},
			{"a folder and a VM", func() {
				folders, err := dc.Folders(ctx)
				if err != nil {
					t.Fatal(err)
				}
				f, err := folders.VmFolder.CreateFolder(ctx, "polled")
				if err != nil {
					t.Fatal(err)
				}
				pools, err := find.NewFinder(c.Client).SetDatacenter(dc).ResourcePoolList(ctx, "*")
				if err != nil || len(pools) == 0 {
					t.Fatalf("resource pools: %v", err)
				}
				ds, err := find.NewFinder(c.Client).SetDatacenter(dc).DatastoreList(ctx, "*")
				if err != nil || len(ds) == 0 {
					t.Fatalf("datastores: %v", err)
				}
				spec := types.VirtualMachineConfigSpec{Name: "polled-vm", GuestId: "otherGuest",
					Files: &types.VirtualMachineFileInfo{VmPathName: "[" + ds[0].Name() + "] polled-vm"}}
				waitTask(f.CreateVM(ctx, spec, pools[0], nil))
			}},
			{"destroy", func() { waitTask(off.Destroy(ctx)) }},
		}
		for _, step := range steps {
			step.do()
			p.poll(size)
			sameObjects(t, step.name, p.objs, read(t, c, spec))
		}

		// One VM's power-on: the VM, its host, the task, not every object.
		waitTask(on.PowerOn(ctx))
		p.poll(size)
		sameObjects(t, "power on again", p.objs, read(t, c, spec))
		if p.answered == 0 || p.answered > 4 || p.answered >= total {
			t.Fatalf("page size %d: a poll after one power-on answered %d of %d objects", size, p.answered, total)
		}

		// A host task: it enters with the host's recentTask, running as long as the
		// host has VMs powered on.
		st, _ := sim.VM(on.Name())
		if _, err := hostObj(t, c, st.Host).EnterMaintenanceMode(ctx, 0, false, nil); err != nil {
			t.Fatal(err)
		}
		p.poll(size)
		sameObjects(t, "host task", p.objs, read(t, c, spec))
	}
}

// TestPollVersions: a poll with a version this collector did not return last is refused
// (InvalidCollectorVersion), and the initial version starts over with everything; a
// filter made after the first poll comes in whole with the next one.
func TestPollVersions(t *testing.T) {
	sim, c, spec := watched(t)
	ctx := context.Background()
	hostsOnly := spec
	hostsOnly.PropSet = []types.PropertySpec{{Type: "HostSystem", PathSet: []string{"name"}}}
	p := newPoller(t, c, hostsOnly)
	p.poll(0)
	sameObjects(t, "hosts", p.objs, read(t, c, hostsOnly))

	_, err := methods.WaitForUpdatesEx(ctx, c.Client, &types.WaitForUpdatesEx{
		This: p.pc.Reference(), Version: "not-a-version", Options: &types.WaitOptions{MaxWaitSeconds: types.NewInt32(0)},
	})
	if !fault.Is(err, &types.InvalidCollectorVersion{}) {
		t.Fatalf("a poll with a version never returned: %v, want InvalidCollectorVersion", err)
	}

	if _, err := p.pc.CreateFilter(ctx, types.CreateFilter{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	p.poll(0)
	want := read(t, c, spec)
	for ref, props := range read(t, c, hostsOnly) {
		for name, v := range props {
			want[ref][name] = v
		}
	}
	// The hosts' names come from both filters; the objects hold the union.
	sameObjects(t, "second filter", p.objs, want)

	p.version, p.objs = "", objects{}
	p.poll(0)
	sameObjects(t, "initial version again", p.objs, want)

	// A destroyed collector's change tracking stops; so does that of a session's
	// collectors when it ends.
	if n := sim.PollTrackers(); n != 1 {
		t.Fatalf("%d collectors tracked, want 1", n)
	}
	other := newPoller(t, c, hostsOnly)
	other.poll(0)
	if n := sim.PollTrackers(); n != 2 {
		t.Fatalf("%d collectors tracked, want 2", n)
	}
	if err := other.pc.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sim.PollTrackers(); n != 1 {
		t.Fatalf("after a collector was destroyed %d collectors tracked, want 1", n)
	}
	if err := c.Logout(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sim.PollTrackers(); n != 0 {
		t.Fatalf("after the logout %d collectors tracked, want 0", n)
	}
}

// TestExpiredSessionsStopTracking: sessions the simulator expires stop their collectors'
// change tracking.
func TestExpiredSessionsStopTracking(t *testing.T) {
	sim, c, spec := watched(t)
	p := newPoller(t, c, spec)
	p.poll(0)
	if n := sim.PollTrackers(); n != 1 {
		t.Fatalf("%d collectors tracked, want 1", n)
	}
	sim.ExpireSessions()
	if n := sim.PollTrackers(); n != 0 {
		t.Fatalf("after the sessions expired %d collectors tracked, want 0", n)
	}
}
