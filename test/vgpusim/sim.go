// Package vgpusim is vcsim (govmomi's vCenter simulator) with a vGPU model on top: hosts
// with NVIDIA GPUs and vGPU profiles, VMs with vGPU devices, and the placement rules that
// vCenter enforces when a vGPU VM powers on. It serves the real vSphere SOAP API on
// loopback so that gpupool's vsphere package and govc can be tested against it, and it
// injects the faults gpupool must survive: failing tasks, slow methods, expired sessions
// and refused connections.
//
// Power operations complete synchronously by default: when PowerOnVM_Task returns, the
// task is already in its final state, so tests need neither sleeps nor polling. Use
// HoldTasks or SetTaskDelay to observe running tasks.
package vgpusim

import (
	"context"
	"crypto/sha1" //nolint:gosec // vSphere thumbprints are SHA-1 or SHA-256.
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/types"
)

// Options tune a simulator. The zero value is usable.
type Options struct {
	// Username and Password are the only credentials the simulator accepts;
	// "gpupool" and a fixed test password when empty.
	Username string
	Password string
	// Listen is the loopback address to serve on, such as 127.0.0.1:8989;
	// a random port on 127.0.0.1 when empty.
	Listen string
	// Delays slow down SOAP methods by name (PowerOnVM_Task, RetrieveProperties, ...).
	Delays map[string]time.Duration
	// TaskDelays keep tasks of a method running for a while before they complete.
	TaskDelays map[string]time.Duration
	// FailTasks makes the first N tasks of a method fail (see Sim.FailTasks).
	FailTasks map[string]int
	// Logger receives the simulator's structured logs; discarded when nil.
	Logger *slog.Logger
	// NoDirectPathProfileManager serves a vCenter before 9.0: the ServiceContent has no
	// directPathProfileManager, so DirectPathProfileManagerQueryCapacity is not offered
	// (see directpath.go).
	NoDirectPathProfileManager bool
}

// Default credentials, for tests and local runs only.
const (
	DefaultUsername = "gpupool"
	DefaultPassword = "vgpusim-pass"
)

// Sim is a running simulator. Its methods are safe for concurrent use.
type Sim struct {
	// URL is the SDK endpoint, such as https://127.0.0.1:40123/sdk, without credentials.
	URL *url.URL
	// Username and Password are the accepted credentials.
	Username string
	Password string

	inv    *Inventory
	log    *slog.Logger
	model  *simulator.Model
	server *simulator.Server
	gate   *gate
	dsDir  string

	// mu guards the vGPU model (which vGPU runs on which physical GPU), the hosts'
	// availability and which VMs run where. The hosts map is fixed once Start returns.
	mu     sync.Mutex
	hosts  map[types.ManagedObjectReference]*hostState
	vmRefs map[string]types.ManagedObjectReference
	// placements are the VMs' placement hints (VM.Placements), by VM.
	placements map[types.ManagedObjectReference][]int
	// poweredOn maps each powered-on VM to its host.
	poweredOn map[types.ManagedObjectReference]types.ManagedObjectReference

	ctl control
	// trackers are the change trackers of the collectors polled (poll.go), by session.
	trackers trackers
	// dp is what tests set on the DirectPathProfileManager; guarded by mu.
	dp directPathState
}

// hostState is the simulator's truth about one host: its GPUs and what runs on them
// (config.graphicsInfo mirrors it) and its availability (runtime mirrors it).
type hostState struct {
	obj  *simulator.HostSystem
	cfg  *Host
	gpus []*gpuState
	// inMaintenance and connection are runtime.inMaintenanceMode and connectionState.
	inMaintenance bool
	connection    string
	// entering is the EnterMaintenanceMode task waiting for VMs to stop, if any.
	entering *simulator.Task
}

// Start builds the inventory in a fresh simulator and serves it on loopback.
func Start(inv *Inventory, opts Options) (_ *Sim, err error) {
	if inv == nil {
		return nil, errors.New("vgpusim: no inventory")
	}
	if err := inv.normalize(); err != nil {
		return nil, fmt.Errorf("vgpusim: %w", err)
	}
	opts = opts.withDefaults()
	if err := checkLoopback(opts.Listen); err != nil {
		return nil, err
	}

	s := &Sim{
		Username:   opts.Username,
		Password:   opts.Password,
		inv:        inv,
		log:        opts.Logger,
		hosts:      map[types.ManagedObjectReference]*hostState{},
		vmRefs:     map[string]types.ManagedObjectReference{},
		placements: map[types.ManagedObjectReference][]int{},
		poweredOn:  map[types.ManagedObjectReference]types.ManagedObjectReference{},
		ctl:        newControl(),
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()

	if s.model, err = newModel(opts.NoDirectPathProfileManager); err != nil {
		return nil, err
	}
	if err := s.build(); err != nil {
		return nil, fmt.Errorf("vgpusim: build inventory: %w", err)
	}
	if !opts.NoDirectPathProfileManager {
		s.installDirectPathManager()
	}
	s.injectFaults(opts)
	if err := s.serve(opts.Listen); err != nil {
		return nil, err
	}
	if err := s.attachInventoryTags(); err != nil {
		return nil, fmt.Errorf("vgpusim: tags: %w", err)
	}
	s.log.Info("Serving simulated vCenter", "url", s.URL.String(), "datacenter", inv.Datacenter,
		"hosts", len(inv.Hosts), "vms", len(inv.VMs))
	return s, nil
}

// withDefaults fills in what the zero Options leave out: the default credentials, a
// random port on 127.0.0.1 and a logger that discards.
func (o Options) withDefaults() Options {
	if o.Username == "" {
		o.Username = DefaultUsername
	}
	if o.Password == "" {
		o.Password = DefaultPassword
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// newModel creates an empty simulated vCenter that reports itself as 8.0.3, or 9.0.0
// when it serves the DirectPathProfileManager.
func newModel(noDirectPathProfileManager bool) (*simulator.Model, error) {
	// An empty vCenter: the inventory is built below through the API, as an admin would.
	m := simulator.VPX()
	m.Datacenter, m.Host, m.Cluster, m.ClusterHost = 0, 0, 0, 0
	m.Machine, m.Datastore, m.Portgroup, m.Autostart = 0, 0, 0, false
	// Report a vCenter recent enough for the vGPU API used here (vgpuProfileInfo: 7.0.3).
	about := &m.ServiceContent.About
	about.Version, about.Build, about.ApiVersion = "8.0.3", "24022515", "8.0.3.0"
	// vcsim derives the instance UUID from the host: every simulator would look like the
	// same vCenter. Each gets its own, as real vCenters do.
	about.InstanceUuid = uuid.NewString()
	about.FullName = "VMware vCenter Server 8.0.3 build-24022515 (vgpusim)"
	if !noDirectPathProfileManager {
		// DirectPathProfileManager came with vSphere API 9.0.0.0.
		about.Version, about.ApiVersion = "9.0.0", "9.0.0.0"
		about.FullName = "VMware vCenter Server 9.0.0 build-24022515 (vgpusim)"
	}
	if err := m.Create(); err != nil {
		return nil, fmt.Errorf("vgpusim: create model: %w", err)
	}
	return m, nil
}

// injectFaults applies the delays and task failures the options ask for from the start.
func (s *Sim) injectFaults(opts Options) {
	for method, d := range opts.Delays {
		s.SetDelay(method, d)
	}
	for method, d := range opts.TaskDelays {
		s.SetTaskDelay(method, d)
	}
	for method, n := range opts.FailTasks {
		s.FailTasks(method, n, nil)
	}
}

// serve starts the SOAP server on a random loopback port behind the gate that listens
// on listen (the gate is what refuses connections on demand), and sets s.URL to the gate.
func (s *Sim) serve(listen string) (err error) {
	m := s.model
	m.Map().Handler = s.handle
	m.Map().SessionManager().ValidLogin = s.checkLogin
	m.Service.TLS = new(tls.Config)
	m.Service.Listen = &url.URL{Host: "127.0.0.1:0", User: url.UserPassword(s.Username, s.Password)}
	// The REST API's endpoints (vAPI: tags, tags.go) beside the SOAP API.
	m.Service.RegisterEndpoints = true
	s.server = m.Service.NewServer()

	s.gate, err = openGate(listen, s.server.Listener.Addr().String(), s.log)
	if err != nil {
		return fmt.Errorf("vgpusim: %w", err)
	}
	s.URL = &url.URL{Scheme: "https", Host: s.gate.addr, Path: vim25.Path}
	return nil
}

// checkLoopback refuses to serve anywhere but loopback: the simulator is a test double.
func checkLoopback(addr string) error {
	host := addr
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		host = addr[:i]
	}
	host = strings.Trim(host, "[]")
	switch {
	case host == "localhost", strings.HasPrefix(host, "127."), host == "::1":
		return nil
	}
	return fmt.Errorf("vgpusim: listen address %q is not on loopback", addr)
}

// Close stops serving and removes the simulator's temporary files. It is idempotent.
func (s *Sim) Close() {
	s.ctl.stop()
	if s.gate != nil {
		s.gate.close()
	}
	if s.server != nil {
		s.server.Close()
		s.server = nil
	}
	if s.model != nil {
		s.model.Remove()
		s.model = nil
	}
	if s.dsDir != "" {
		_ = os.RemoveAll(s.dsDir)
		s.dsDir = ""
	}
}

// Datacenter is the simulated datacenter's name.
func (s *Sim) Datacenter() string { return s.inv.Datacenter }

// Service exposes the underlying vcsim service, for its own fault injection rules
// (Service().AddFaultRule), which fail SOAP calls rather than tasks.
func (s *Sim) Service() *simulator.Service { return s.model.Service }

// Certificate is the certificate the simulator serves.
func (s *Sim) Certificate() *x509.Certificate { return s.server.Certificate() }

// CertificatePEM is the served certificate in PEM, usable as a CA bundle.
func (s *Sim) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// ThumbprintSHA1 is the served certificate's SHA-1 thumbprint in vSphere's colon hex.
func (s *Sim) ThumbprintSHA1() string {
	sum := sha1.Sum(s.Certificate().Raw) //nolint:gosec // thumbprint, not a signature.
	return colonHex(sum[:])
}

// ThumbprintSHA256 is the served certificate's SHA-256 thumbprint in colon hex.
func (s *Sim) ThumbprintSHA256() string {
	sum := sha256.Sum256(s.Certificate().Raw)
	return colonHex(sum[:])
}

func colonHex(b []byte) string {
	parts := make([]string, len(b))
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02X", x)
	}
	return strings.Join(parts, ":")
}

// GovcEnv is the environment that points govc at the simulator, one KEY=value per entry.
func (s *Sim) GovcEnv() []string {
	return []string{
		"GOVC_URL=" + s.URL.String(),
		"GOVC_USERNAME=" + s.Username,
		"GOVC_PASSWORD=" + s.Password,
		"GOVC_INSECURE=1",
		"GOVC_DATACENTER=" + s.inv.Datacenter,
	}
}

// VMRef is the managed object id (such as vm-42) of the named VM.
func (s *Sim) VMRef(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, ok := s.vmRefs[name]
	return ref.Value, ok
}

// SetPlacements sets the placement IDs at which the named VM's vGPU devices start at its
// next power-on (VM.Placements): a test draws the history of a GPU this way.
func (s *Sim) SetPlacements(name string, ids []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, ok := s.vmRefs[name]
	if !ok {
		return fmt.Errorf("no VM %s", name)
	}
	s.placements[ref] = slices.Clone(ids)
	return nil
}

// VMState is what the simulator knows about one VM.
type VMState struct {
	Ref        string
	Host       string
	PowerState string
	// Profile is the profile of the VM's first vGPU device.
	Profile string
	// VGPUs is how many vGPU devices the VM has.
	VGPUs int
	// Profiles are the profiles of all its vGPU devices, in device order.
	Profiles []string
	// GPU is the PCI id of the GPU the VM's first vGPU runs on; empty unless it runs.
	GPU string
	// GPUs are the PCI ids of the GPUs each of its vGPUs runs on, in device order.
	GPUs []string
}

// VM reports the named VM's state, read under the VM's lock like a SOAP call would.
func (s *Sim) VM(name string) (VMState, bool) {
	s.mu.Lock()
	ref, ok := s.vmRefs[name]
	s.mu.Unlock()
	if !ok {
		return VMState{}, false
	}
	ctx := s.newContext()
	var st VMState
	var keys []int32
	ctx.WithLock(ref, func() {
		vm := s.vm(ref)
		devs := vgpuDevices(vm.Config.Hardware.Device)
		st = VMState{
			Ref:        ref.Value,
			PowerState: string(vm.Runtime.PowerState),
			Profile:    vgpuProfile(vm.Config.Hardware.Device),
			VGPUs:      len(devs),
		}
		for _, d := range devs {
			keys = append(keys, d.key)
			st.Profiles = append(st.Profiles, d.profile)
		}
		if h := s.hosts[*vm.Runtime.Host]; h != nil {
			st.Host = h.cfg.Name
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, key := range keys {
		for _, h := range s.hosts {
			for _, g := range h.gpus {
				for _, v := range g.vgpus {
					if v.vm == ref && v.key == key {
						st.GPUs = append(st.GPUs, g.pciID)
					}
				}
			}
		}
	}
	if len(st.GPUs) > 0 {
		st.GPU = st.GPUs[0]
	}
	return st, true
}

// GPUs reports, per physical GPU of the named host, the VMs of the vGPUs running there,
// one entry per vGPU, in the order they started.
func (s *Sim) GPUs(host string) map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := map[types.ManagedObjectReference]string{}
	for name, ref := range s.vmRefs {
		names[ref] = name
	}
	out := map[string][]string{}
	for _, h := range s.hosts {
		if h.cfg.Name != host {
			continue
		}
		for _, g := range h.gpus {
			vms := []string{}
			for _, v := range g.vgpus {
				vms = append(vms, names[v.vm])
			}
			out[g.pciID] = vms
		}
	}
	return out
}

// Placement is where one running vGPU sits: its VM and its first placement slot in GB
// (NVIDIA's placement ID on a GPU in mixed-size mode).
type Placement struct {
	VM string
	ID int
	// Mixed tells whether the GPU is in mixed-size mode (placement IDs matter there).
	Mixed bool
}

// Placements reports, per PCI id of the named host's GPUs, where each running vGPU
// sits: what vSphere does not report and a history decides (VM.Placements).
func (s *Sim) Placements(host string) map[string][]Placement {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := map[types.ManagedObjectReference]string{}
	for name, ref := range s.vmRefs {
		names[ref] = name
	}
	out := map[string][]Placement{}
	for _, h := range s.hosts {
		if h.cfg.Name != host {
			continue
		}
		for _, g := range h.gpus {
			ps := []Placement{}
			for _, v := range g.vgpus {
				ps = append(ps, Placement{VM: names[v.vm], ID: v.start * slotMiB / 1024, Mixed: g.mode == modeMixedSize})
			}
			out[g.pciID] = ps
		}
	}
	return out
}

// newContext is a locking context for work outside a SOAP call. Each call gets its own:
// vcsim's object locks are shared by everything that holds the same context.
func (s *Sim) newContext() *simulator.Context {
	ctx := *s.model.Service.Context
	ctx.Context = context.Background()
	return &ctx
}

func (s *Sim) vm(ref types.ManagedObjectReference) *simulator.VirtualMachine {
	switch obj := s.model.Map().Get(ref).(type) {
	case *vgpuVM:
		return obj.VirtualMachine
	case *simulator.VirtualMachine:
		return obj
	}
	return nil
}
