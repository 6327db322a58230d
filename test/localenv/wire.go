package localenv

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/session"
	"github.com/vmware/govmomi/view"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/test/cluster"
)

// RunWire is the power wire: until ctx ends it copies every VM's power state and vGPU
// count from vgpusim onto its node, where kwok's stages turn them into node readiness, as
// a kubelet that starts with its VM would. It follows vgpusim's property collector
// (WaitForUpdatesEx on every VM), so a node learns of its VM's power-on when vCenter
// says so, at no cost in between; nodes are read from a watch-fed cache.
func RunWire(ctx context.Context, e *Env) error {
	nodes, err := cache.New(e.rest, cache.Options{Scheme: Scheme(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Node{}: {Transform: cache.TransformStripManagedFields()},
	}})
	if err != nil {
		return err
	}
	go func() { _ = nodes.Start(ctx) }()
	if !nodes.WaitForCacheSync(ctx) {
		return ctx.Err()
	}
	c, err := client.New(e.rest, client.Options{Scheme: Scheme(), Cache: &client.CacheOptions{Reader: nodes}})
	if err != nil {
		return err
	}
	for {
		err := e.followPower(ctx, c)
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintln(e.logOut(), "power wire:", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// followPower logs in to vgpusim and applies every change of the VMs' power state and
// devices to the nodes until ctx ends or the connection fails.
func (e *Env) followPower(ctx context.Context, c client.Client) error {
	u := &url.URL{Scheme: "https", Host: e.VCenter.Server, Path: vim25.Path}
	sc := soap.NewClient(u, false)
	sc.SetThumbprint(u.Host, e.VCenter.Thumbprint)
	vc, err := vim25.NewClient(ctx, sc)
	if err != nil {
		return err
	}
	sm := session.NewManager(vc)
	if err := sm.Login(ctx, url.UserPassword(e.VCenter.Username, e.VCenter.Password)); err != nil {
		return err
	}
	defer func() { _ = sm.Logout(context.Background()) }()
	v, err := view.NewManager(vc).CreateContainerView(ctx, vc.ServiceContent.RootFolder, []string{"VirtualMachine"}, true)
	if err != nil {
		return err
	}
	filter := &property.WaitFilter{}
	filter.Spec.ObjectSet = []types.ObjectSpec{{Obj: v.Reference(), Skip: types.NewBool(true),
		SelectSet: []types.BaseSelectionSpec{&types.TraversalSpec{Type: "ContainerView", Path: "view"}}}}
	filter.Spec.PropSet = []types.PropertySpec{{Type: "VirtualMachine", PathSet: []string{"name", "runtime.powerState", "config.hardware.device"}}}
	vms := map[types.ManagedObjectReference]*inventory.VM{}
	var syncErr error
	err = property.WaitForUpdates(ctx, property.DefaultCollector(vc), filter, func(updates []types.ObjectUpdate) bool {
		for _, u := range updates {
			if u.Kind == types.ObjectUpdateKindLeave {
				delete(vms, u.Obj)
				continue
			}
			vm := vms[u.Obj]
			if vm == nil {
				vm = &inventory.VM{}
				vms[u.Obj] = vm
			}
			for _, ch := range u.ChangeSet {
				switch ch.Name {
				case "name":
					vm.Name, _ = ch.Val.(string)
				case "runtime.powerState":
					st, _ := ch.Val.(types.VirtualMachinePowerState)
					vm.PowerState = inventory.PowerState(st)
				case "config.hardware.device":
					devices, _ := ch.Val.(types.ArrayOfVirtualDevice)
					vm.Profile, vm.VGPUs = vgpus(devices.VirtualDevice)
				}
			}
		}
		inv := &inventory.Inventory{}
		for _, vm := range vms {
			inv.VMs = append(inv.VMs, *vm)
		}
		_, syncErr = cluster.SyncPower(ctx, c, inv)
		return syncErr != nil
	})
	if syncErr != nil {
		return syncErr
	}
	return err
}

// vgpus is the profile and number of a VM's vGPU devices.
func vgpus(devices []types.BaseVirtualDevice) (string, int) {
	profile, n := "", 0
	for _, d := range devices {
		pt, ok := d.(*types.VirtualPCIPassthrough)
		if !ok {
			continue
		}
		if b, ok := pt.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); ok {
			profile, n = b.Vgpu, n+1
		}
	}
	return profile, n
}
