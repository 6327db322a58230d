package vgpusim_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/plan"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// The differential test: the planner (internal/plan) and the simulator model vSphere's
// vGPU placement independently. Random worlds are planned with plan.Check and plan.Build
// and the plans are executed against vgpusim through gpupool's own vSphere client, as the
// controller would. Disagreements are classified:
//
//   - refusedPowerOn: the planner ordered a power-on the simulator refused. A bug in one
//     of the two models; the test fails.
//   - notConverged: a layout Check called feasible did not converge, or a later plan
//     found problems. The test fails.
//   - plannerTooStrict: Check called the layout infeasible (InsufficientGPU) but the
//     simulator reached it by trying power-ons greedily in a few orders. Counted per
//     class of the planner's documented conservatism (knownTooStrict); a refusal no
//     class explains fails the test.
//   - agreedInfeasible: both refuse.

// TestDifferentialPlannerAgainstSimulator runs every feature both models have (boards
// mixed in one host, mixed-size GPUs, A/B/Q/C profiles, two-vGPU workers, clusters and
// unavailable hosts) and
// fails on any disagreement. The features reached are counted and asserted, so the
// generator cannot silently stop exercising one.
func TestDifferentialPlannerAgainstSimulator(t *testing.T) {
	seeds := uint64(100)
	if testing.Short() {
		seeds = 20
	}
	stats := map[string]int{}
	start := time.Now()
	for seed := uint64(1); seed <= seeds; seed++ {
		runSeed(t, seed, fullOptions, stats, false)
	}
	t.Logf("%d seeds in %s: %v", seeds, time.Since(start).Round(time.Millisecond), stats)
	n := int(seeds)
	// Rare corners (a power-on elsewhere, a held VM, ...) come a few times per hundred
	// seeds: asserted in the full run only.
	rare := max(1, n/50)
	if testing.Short() {
		rare = 0
	}
	for _, c := range []struct {
		stat string
		min  int
	}{
		{"converged", n}, {"powerOns", 2 * n}, {"mixedSizePowerOns", n / 2}, {"multiVGPUPowerOns", n / 4},
		{"gpuMixedSize", n / 2}, {"gpuModeOverride", n / 10}, {"hostInMaintenance", n / 10},
		{"hostdisconnected", rare}, {"hostnotResponding", rare}, {"hostEntering", n / 20},
		{"powerOnElsewhere", rare}, {"held", rare}, {"hostUnavailableProblem", rare}, {"agreedInfeasible", rare},
		{"mixedDevicesVM", n / 10}, {"mixedDevicesStarted", rare}, {"mixedDevicesSpread", n / 10}, {"vmOnLocalDatastore", n / 10},
		{"mixedBoardHost", n / 5}, {"powerOnMixedBoardHost", n / 10}, {"gpuUnknownBoard", rare}, {"historyPlaced", n / 5},
	} {
		if stats[c.stat] < c.min {
			t.Errorf("%s reached %d times in %d seeds, want at least %d: the generator stopped exercising it", c.stat, stats[c.stat], n, c.min)
		}
	}
	// The known strictness is the exception: a planner refusing much of what the
	// simulator reaches would make the test pass without testing the power-ons.
	if stats["plannerTooStrict"] > 1+n/20 {
		t.Errorf("the planner refused %d layouts the simulator reached (known classes), want at most %d", stats["plannerTooStrict"], 1+n/20)
	}
}

// TestDifferentialSameSize is the same-size subset (one vGPU per VM, hosts available),
// where the planner's and the simulator's rules must agree exactly.
func TestDifferentialSameSize(t *testing.T) {
	seeds := uint64(40)
	if testing.Short() {
		seeds = 10
	}
	stats := map[string]int{}
	for seed := uint64(1); seed <= seeds; seed++ {
		runSeed(t, seed, sameSizeOptions, stats, false)
	}
	t.Logf("%d seeds: %v", seeds, stats)
	if stats["converged"] < int(seeds) || stats["plannerTooStrict"] > 0 {
		t.Errorf("converged %d, plannerTooStrict %d", stats["converged"], stats["plannerTooStrict"])
	}
}

// TestDifferentialSweep is the larger sweep (VGPUSIM_DIFF_SWEEP=N seeds from 1000),
// tolerant: it counts the disagreement classes and logs a first example of each.
func TestDifferentialSweep(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("VGPUSIM_DIFF_SWEEP"))
	var seeds []uint64
	for seed := uint64(1000); seed < 1000+uint64(max(n, 0)); seed++ {
		seeds = append(seeds, seed)
	}
	// VGPUSIM_DIFF_SEEDS=1468,1632 runs those seeds only, to replay what a sweep found.
	for _, f := range strings.FieldsFunc(os.Getenv("VGPUSIM_DIFF_SEEDS"), func(r rune) bool { return r == ',' }) {
		seed, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("VGPUSIM_DIFF_SEEDS: %v", err)
		}
		seeds = append(seeds, seed)
	}
	if len(seeds) == 0 {
		t.Skip("set VGPUSIM_DIFF_SWEEP=N to run N more seeds (or VGPUSIM_DIFF_SEEDS=a,b), counting disagreements")
	}
	stats := map[string]int{}
	for _, seed := range seeds {
		runSeed(t, seed, fullOptions, stats, true)
	}
	t.Logf("%d seeds: %v", len(seeds), stats)
}

// diff is one seed's run: a simulator, a client to it and the world.
type diff struct {
	t     *testing.T
	seed  uint64
	r     *rand.Rand
	w     *world
	sim   *vgpusim.Sim
	c     vsphere.Client
	ctx   context.Context
	log   []string
	stats map[string]int
	// tolerant runs count disagreements instead of failing (TestDifferentialFuture).
	tolerant bool
}

func runSeed(t *testing.T, seed uint64, o genOptions, stats map[string]int, tolerant bool) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 2026))
	runWorld(t, seed, r, genWorld(r, o), stats, tolerant, "")
}

// runWorld starts the simulator on w, powers on w.startOn, puts w.entering hosts into
// maintenance mode and runs three transitions to random layouts of w.
// The transitions go to layout only, when it is not "".
func runWorld(t *testing.T, seed uint64, r *rand.Rand, w *world, stats map[string]int, tolerant bool, only string) {
	t.Helper()
	// Odd seeds serve a vCenter before 9.0: vgpusim's DirectPathProfileManager counts
	// from its own placements, the truth the planner cannot read, and gpupool follows
	// it where it says less, which would hide the planner's own errors.
	sim, err := vgpusim.Start(w.inv, vgpusim.Options{NoDirectPathProfileManager: seed%2 == 1})
	if err != nil {
		t.Fatalf("seed %d: start: %v", seed, err)
	}
	defer sim.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	c, err := conn.Connect(ctx, vsphere.Config{Server: sim.URL.Host, Datacenter: sim.Datacenter(),
		Username: sim.Username, Password: sim.Password, Thumbprint: sim.ThumbprintSHA256()})
	if err != nil {
		t.Fatalf("seed %d: connect: %v", seed, err)
	}
	d := &diff{t: t, seed: seed, r: r, w: w, sim: sim, c: c, ctx: ctx, stats: stats, tolerant: tolerant}
	d.countWorld()
	if tolerant {
		defer func() {
			if v := recover(); v != nil {
				dis, ok := v.(disagreement)
				if !ok {
					panic(v)
				}
				if stats[dis.class] == 0 {
					t.Log(dis.msg)
				} else {
					t.Log(strings.SplitN(dis.msg, "\n", 2)[0])
				}
				stats[dis.class]++
			}
		}()
	}
	for _, name := range w.startOn {
		d.op(powerOnOn(""), name) // refused when it does not fit: vSphere's call
	}
	d.countSpread()
	d.enterMaintenance()
	for _, name := range slices.Sorted(maps.Keys(w.down)) {
		state := w.down[name]
		if err := sim.SetHostState(name, false, state); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		d.stats["host"+state]++
	}
	// Transitions in a row, each from where the last ended.
	for range 3 {
		target := w.spec.Layouts[r.IntN(len(w.spec.Layouts))].Name
		if only != "" {
			target = only
		}
		d.transition(target)
	}
}

// disagreement ends a seed that found one, in tolerant runs (see runSeed).
type disagreement struct{ class, msg string }

// fatalf fails the test, or in a tolerant run ends the seed and counts the class: the
// first word of the message ("refusedPowerOn: ...").
func (d *diff) fatalf(format string, args ...any) {
	d.t.Helper()
	msg := fmt.Sprintf("seed %d: %s\nsteps so far:\n  %s", d.seed, fmt.Sprintf(format, args...), strings.Join(d.log, "\n  "))
	if d.tolerant {
		class, _, _ := strings.Cut(fmt.Sprintf(format, args...), ":")
		panic(disagreement{class: class, msg: msg})
	}
	d.t.Fatal(msg)
}

func (d *diff) inventory() *inventory.Inventory {
	d.t.Helper()
	inv, err := d.c.Inventory(d.ctx)
	if err != nil {
		d.fatalf("inventory: %v", err)
	}
	return inv
}

// op runs one operation on the named VM and returns the task's fault, "" on success or
// when nothing had to be done.
func (d *diff) op(f func(vsphere.Client, context.Context, string) (string, error), name string) string {
	d.t.Helper()
	ref, _ := d.sim.VMRef(name)
	id, err := f(d.c, d.ctx, ref)
	if err != nil {
		d.fatalf("%s: %v", name, err)
	}
	if id == "" {
		return ""
	}
	info, err := d.c.Task(d.ctx, id)
	if err != nil {
		d.fatalf("task of %s: %v", name, err)
	}
	if info.State != vsphere.TaskSuccess {
		return info.Fault + ": " + info.Error
	}
	return ""
}

// transition plans and executes one layout change the way the controller does.
func (d *diff) transition(target string) {
	d.t.Helper()
	d.log = append(d.log, "-> "+target)
	problems := plan.Check(d.w.spec, target, d.inventory())
	if len(problems) > 0 {
		d.infeasible(target, problems)
		return
	}
	maxParallel := 1 + d.r.IntN(3)
	for batch := 0; ; batch++ {
		if batch > 4*len(d.w.inv.VMs)+10 {
			d.fatalf("notConverged: layout %s, feasible per Check, not reached after %d batches", target, batch)
		}
		inv := d.inventory()
		p, err := plan.Build(plan.Input{Spec: d.w.spec, Layout: target, Inventory: inv})
		if err != nil {
			d.fatalf("Build: %v", err)
		}
		if len(p.Problems) > 0 {
			d.fatalf("notConverged: layout %s was feasible, now: %v\nplan:\n%s", target, p.Problems, p)
		}
		if p.Done() {
			d.checkConverged(target)
			d.stats["converged"]++
			return
		}
		due := p.Due(maxParallel)
		if len(due) == 0 && len(p.Held) > 0 {
			d.checkHeld(p)
			return
		}
		if len(due) == 0 {
			d.fatalf("notConverged: nothing due and not done:\n%s", p)
		}
		// Due steps run concurrently in the controller: vCenter may see them in any order.
		d.r.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
		for _, st := range due {
			d.step(st, p)
		}
	}
}

func (d *diff) step(st plan.Step, p *plan.Plan) {
	d.t.Helper()
	d.log = append(d.log, fmt.Sprintf("%s %s %s on %s", st.Action, st.VM, st.Profile, st.Host))
	var fault string
	switch st.Action {
	case plan.Suspend:
		fault = d.op(vsphere.Client.Suspend, st.VM)
	case plan.PowerOff:
		fault = d.op(vsphere.Client.PowerOff, st.VM)
	case plan.Reconfigure:
		fault = d.op(func(c vsphere.Client, ctx context.Context, ref string) (string, error) {
			return c.SetProfile(ctx, ref, st.Profile, max(st.VGPUs, 1))
		}, st.VM)
	case plan.PowerOn:
		d.countPowerOn(st)
		if fault = d.op(powerOnOn(d.hostRef(st)), st.VM); fault != "" {
			d.fatalf("refusedPowerOn: the planner powers on %s (%s) on %s, the simulator refuses: %s\nGPUs: %v\nplan:\n%s",
				st.VM, st.Profile, st.Host, fault, d.sim.GPUs(st.Host), p)
		}
	default:
		d.fatalf("unexpected step %s for a noNode worker", st.Action)
	}
	if fault != "" {
		d.fatalf("%s of %s failed: %s\nplan:\n%s", st.Action, st.VM, fault, p)
	}
}

// wanted is what a layout gives a VM: n vGPUs of a profile.
type wanted struct {
	profile string
	vgpus   int
}

func (d *diff) layout(name string) map[string]wanted {
	want := map[string]wanted{}
	for _, l := range d.w.spec.Layouts {
		if l.Name == name {
			for _, wk := range l.Workers {
				want[wk.VM] = wanted{profile: wk.Profile, vgpus: max(int(wk.VGPUs), 1)}
			}
		}
	}
	return want
}

// powerOnOn is Client.PowerOn on the given host ref ("" for the VM's own), for d.op.
func powerOnOn(hostRef string) func(vsphere.Client, context.Context, string) (string, error) {
	return func(c vsphere.Client, ctx context.Context, ref string) (string, error) {
		return c.PowerOn(ctx, ref, hostRef)
	}
}

// hostRef is the host argument the controller passes for a power-on step
// (controllers.powerOnHost): the step's host when the VM is registered elsewhere.
func (d *diff) hostRef(st plan.Step) string {
	inv := d.inventory()
	vm, ok := inv.FindVM(st.VM)
	if !ok || st.Host == "" || st.Host == vm.Host {
		return ""
	}
	d.stats["powerOnElsewhere"]++
	h, ok := inv.FindHost(st.Host)
	if !ok {
		d.fatalf("power-on step of %s names unknown host %s", st.VM, st.Host)
	}
	return h.Ref
}

// inPool tells whether a layout names the VM: only those the planner acts on.
func (d *diff) inPool(name string) bool {
	for _, l := range d.w.spec.Layouts {
		for _, wk := range l.Workers {
			if wk.VM == name {
				return true
			}
		}
	}
	return false
}

// checkConverged checks the simulator's own state: the layout's VMs run with their
// profiles, the other pool VMs do not run.
func (d *diff) checkConverged(target string) {
	d.t.Helper()
	want := d.layout(target)
	for _, vm := range d.w.inv.VMs {
		if !d.inPool(vm.Name) {
			continue
		}
		st, _ := d.sim.VM(vm.Name)
		wk, in := want[vm.Name]
		switch {
		case in && (st.PowerState != string(inventory.PoweredOn) || st.Profile != wk.profile || st.VGPUs != wk.vgpus || len(st.GPUs) != wk.vgpus):
			d.fatalf("done, but %s is %s with %d x %s on GPUs %v, want running %d x %s", vm.Name, st.PowerState, st.VGPUs, st.Profile, st.GPUs, wk.vgpus, wk.profile)
		case !in && st.PowerState == string(inventory.PoweredOn):
			d.fatalf("done, but %s runs outside layout %s", vm.Name, target)
		}
	}
}

// reachable tries to power on every named VM, greedily (passes over the VMs until one
// starts nothing) in a few orders, the first sorted, the others random; vSphere's
// placement depends on the order. An attempt that fails powers off what it started.
func (d *diff) reachable(vms []string) bool {
	for attempt := range 4 {
		order := slices.Clone(vms)
		if attempt > 0 {
			d.r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		var started []string
		for progress := true; progress && len(order) > 0; {
			progress = false
			for _, name := range slices.Clone(order) {
				if d.op(powerOnOn(""), name) == "" {
					order = slices.DeleteFunc(order, func(n string) bool { return n == name })
					started = append(started, name)
					progress = true
				}
			}
		}
		if len(order) == 0 {
			return true
		}
		for _, name := range started {
			d.op(vsphere.Client.PowerOff, name)
		}
	}
	return false
}

// infeasible checks a layout Check refused for lack of GPU: the simulator is asked to
// reach it anyway (park what leaves, reconfigure, then power on greedily in a few
// orders). Reaching it means the planner was too strict.
func (d *diff) infeasible(target string, problems []plan.Problem) {
	d.t.Helper()
	reasons := map[string]bool{}
	for _, p := range problems {
		reasons[p.Reason] = true
	}
	if reasons[plan.ReasonHostUnavailable] {
		d.stats["hostUnavailableProblem"]++
	}
	for r := range reasons {
		d.stats["problem:"+r]++
	}
	if os.Getenv("VGPUSIM_DIFF_DEBUG") != "" {
		for _, p := range problems {
			d.t.Logf("seed %d: %s", d.seed, p.Message)
		}
	}
	if len(reasons) != 1 || !reasons[plan.ReasonInsufficientGPU] {
		d.stats["infeasible:other"]++
		return
	}
	want := d.layout(target)
	var arriving []string
	for _, vm := range d.inventory().VMs {
		profile, in := want[vm.Name]
		running := vm.PowerState == inventory.PoweredOn
		switch {
		case !d.inPool(vm.Name):
		case !in && running:
			d.op(vsphere.Client.PowerOff, vm.Name)
		case in && (vm.Profile != profile.profile || vm.VGPUs != profile.vgpus || !running):
			if vm.Profile != profile.profile || vm.VGPUs != profile.vgpus {
				d.op(vsphere.Client.PowerOff, vm.Name)
				d.op(func(c vsphere.Client, ctx context.Context, ref string) (string, error) {
					return c.SetProfile(ctx, ref, profile.profile, profile.vgpus)
				}, vm.Name)
			}
			arriving = append(arriving, vm.Name)
		}
	}
	sort.Strings(arriving)
	if !d.reachable(arriving) {
		d.stats["agreedInfeasible"]++
		return
	}
	d.stats["plannerTooStrict"]++
	if os.Getenv("VGPUSIM_DIFF_DEBUG") != "" {
		for _, h := range d.w.inv.Hosts {
			d.t.Logf("seed %d: reached; %s GPUs %v", d.seed, h.Name, d.sim.GPUs(h.Name))
		}
	}
	if class := knownTooStrict(problems); class != "" {
		d.stats["tooStrict:"+class]++
		return
	}
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.Message)
	}
	d.fatalf("plannerTooStrict: Check calls layout %s infeasible (%s), the simulator reached it", target, strings.Join(msgs, "; "))
}
