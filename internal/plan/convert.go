package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// Layouts by count (issue 38, point 2): "night = day with 4 GPUs converted to
// grid_p100-16q, from these VMs". Resolve turns such a layout into an enumerated one,
// choosing the physical GPUs whose change costs least; Check and Build then take it as
// any layout. The choice is made again on every pass from what is observed, like the
// plan: once the chosen GPUs are drained they cost nothing, so the same GPUs stay chosen
// (TestConvertStableOnceStarted).
//
// A converted GPU is one the layout's workers leave (the base layout's VMs on it are
// parked) and the candidates fill with Profile: as many candidate workers per GPU as
// fill it (its vGPUs of Profile per GPU, divided by VGPUs). vSphere, not gpupool, places a
// vGPU when its VM powers on, so the GPU is "chosen" by emptying it; Check then proves
// that vSphere's placement puts the candidates there.

// Conversion is a layout by count: the Go form of the proposed API (spec.layouts[] with
// base, count, profile, vgpus, candidates and disruption in place of workers), field for
// field.
type Conversion struct {
	// Layout is the name of the layout Resolve makes.
	Layout string
	// Base is the layout the conversion starts from (spec.layouts[].name): its workers
	// run, but those the converted GPUs displace.
	Base string
	// Count is how many physical GPUs to convert.
	Count int
	// Profile is the vGPU profile the converted GPUs run.
	Profile string
	// VGPUs is how many vGPUs of Profile each candidate worker carries; 0 means 1.
	VGPUs int
	// Candidates are the VMs that may run Profile on a converted GPU; between equals the
	// earlier is used first.
	Candidates []Candidate
	// Disruption weighs, in GPU pods, what a choice disrupts besides GPU pods.
	Disruption Weights
	// NodeLabels, NodeTaints and GPUReplicas are the resolved layout's (Layout's).
	NodeLabels  map[string]string
	NodeTaints  []corev1.Taint
	GPUReplicas *int32
}

// Candidate is a VM that may run the converted profile: a worker without profile.
type Candidate struct {
	// VM is the VM's name or inventory path (workers[].vm).
	VM string
	// Node and NoNode are the worker's (workers[].node, workers[].noNode).
	Node   string
	NoNode bool
}

// Weights say what disrupting a do-not-disrupt pod or a Job near completion costs, in
// GPU pods. 0, the default, is never: no GPU whose emptying disrupts one is chosen.
type Weights struct {
	DoNotDisrupt      int
	JobNearCompletion int
}

// Costs are what disrupting each running VM costs, by VM name: the controller counts
// them on the VM's node. A running VM without an entry costs nothing.
//
// Note: a suspended VM whose profile must change (its memory state would be discarded)
// is not a cost the controller reports: Resolve reads it off the inventory, and uses
// such a VM only where spec.discardSuspendedState allows, as Build does.
type Costs map[string]VMCost

// VMCost is what draining one VM's node disrupts.
type VMCost struct {
	// GPUPods are the pods on the node that request a GPU: each is evicted.
	GPUPods int
	// DoNotDisrupt are the pods among them that say they must not be disrupted
	// (karpenter.sh/do-not-disrupt: "true" or the like; the controller decides).
	DoNotDisrupt int
	// JobsNearCompletion are the pods among them of Jobs near completion.
	JobsNearCompletion int
}

// Resolution is a layout by count resolved: the enumerated layout and why.
type Resolution struct {
	// Layout is the enumerated layout: the base workers that stay and the candidates
	// that run Profile.
	Layout gpupoolv1.Layout
	// Spec is the spec with Layout in place of (or added as) the layout named
	// Conversion.Layout, for Check and Build.
	Spec *gpupoolv1.GPUPoolProfileSpec
	// Profile is the converted profile, Count the GPUs converted, VGPUs the vGPUs of
	// Profile each candidate carries (at least 1).
	Profile string
	Count   int
	VGPUs   int
	// Cost is the choice's cost (GPU pods evicted plus weighted disruptions);
	// Evicted the GPU pods evicted, on every host.
	Cost    int64
	Evicted int
	// DoNotDisrupt and NearCompletion are, among the pods evicted, the do-not-disrupt
	// pods and those of Jobs near completion (a choice disrupts them only where
	// Disruption weighs them).
	DoNotDisrupt, NearCompletion int
	// Chosen and NotChosen are the GPUs that may be converted, with why; Ineligible the
	// GPUs of the candidates' hosts that may not.
	Chosen, NotChosen, Ineligible []GPUChoice
	// Problems are Check's for Layout: empty when it can be reached.
	Problems []Problem
}

// GPUChoice is one physical GPU considered, and why it was chosen or not.
type GPUChoice struct {
	Host string
	// GPU is the GPU's PCI id.
	GPU string
	// Pods are the GPU pods emptying this GPU alone evicts; Cost weighs them.
	Pods int
	Cost int64
	// Displaced are the running VMs that emptying it parks or reprofiles.
	Displaced []string
	// Workers are the candidates that run Profile on it (chosen GPUs only).
	Workers []string
	// Why says why it was chosen, or not.
	Why string
}

// poolSuffix names the layout Resolve adds to Spec so that candidates no layout names
// are in the pool (parked when not chosen). A layout name is a DNS label, so no user
// layout ends in it.
const poolSuffix = ".candidates"

// Resolve chooses the GPUs a layout by count converts and returns the enumerated
// layout. Input that cannot be resolved (an unknown base layout or profile, a candidate
// the inventory lacks, a count more than the candidates' hosts can convert, no choice
// that spares do-not-disrupt pods) is an error that names what is wrong and what to
// write instead. A choice that Check refuses is never returned when another is
// accepted; when none is, the error carries Check's problem.
//
// spec and inv must not be nil.
func Resolve(spec *gpupoolv1.GPUPoolProfileSpec, conv Conversion, inv *inventory.Inventory, costs Costs) (*Resolution, error) {
	c, err := newConverter(spec, conv, inv, costs)
	if err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	picks, err := c.choose()
	if err != nil {
		return nil, err
	}
	return c.resolution(picks), nil
}

// converter holds what Resolve reads, indexed.
type converter struct {
	spec  *gpupoolv1.GPUPoolProfileSpec
	conv  Conversion
	inv   *inventory.Inventory
	costs Costs
	vms   vmIndex
	base  *gpupoolv1.Layout
	// vgpus is conv.VGPUs, at least 1.
	vgpus int
	// pool is every VM any layout names, and every candidate.
	pool map[*inventory.VM]bool
	// cands are the candidates' VMs in the order given, by host.
	cands  map[string][]*inventory.VM
	candOf map[*inventory.VM]Candidate
	// hosts are the hosts with pool VMs, sorted by name.
	hosts []*hostConv
}

func newConverter(spec *gpupoolv1.GPUPoolProfileSpec, conv Conversion, inv *inventory.Inventory, costs Costs) (*converter, error) {
	c := &converter{spec: spec, conv: conv, inv: inv, costs: costs, vms: newVMIndex(inv), vgpus: max(conv.VGPUs, 1),
		pool: map[*inventory.VM]bool{}, cands: map[string][]*inventory.VM{}, candOf: map[*inventory.VM]Candidate{}}
	field := fmt.Sprintf("layout %s", conv.Layout)
	var names []string
	for i := range spec.Layouts {
		names = append(names, spec.Layouts[i].Name)
		if spec.Layouts[i].Name == conv.Base && conv.Base != conv.Layout {
			c.base = &spec.Layouts[i]
		}
	}
	switch {
	case conv.Layout == "":
		return nil, errors.New("layout by count: no name; name the layout it makes, such as night")
	case conv.VGPUs < 0 || conv.VGPUs > 16:
		return nil, fmt.Errorf("%s: vgpus must be between 1 and 16 vGPUs of %s per candidate, not %d; leave it out for one vGPU", field, conv.Profile, conv.VGPUs)
	case conv.Base == conv.Layout:
		return nil, fmt.Errorf("%s: base %q is the layout itself; name the layout whose workers run outside the converted GPUs, one of %s", field, conv.Base, strings.Join(names, ", "))
	case c.base == nil:
		return nil, fmt.Errorf("%s: base layout %q is not one of spec.layouts (%s); write one of those", field, conv.Base, strings.Join(names, ", "))
	case conv.Count < 1:
		return nil, fmt.Errorf("%s: count must be at least 1 GPU, not %d; to convert none, use layout %s itself", field, conv.Count, conv.Base)
	case len(conv.Candidates) == 0:
		return nil, fmt.Errorf("%s: no candidates: list the VMs that may run %s on a converted GPU", field, conv.Profile)
	}
	if _, err := inventory.ProfileFrameBufferMiB(conv.Profile); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	for _, l := range spec.Layouts {
		for _, w := range l.Workers {
			if vm, ok := c.vms[w.VM]; ok {
				c.pool[vm] = true
			}
		}
	}
	for j, cd := range conv.Candidates {
		vm, ok := c.vms[cd.VM]
		if !ok {
			return nil, fmt.Errorf("%s: candidates[%d]: VM %s is not in the inventory: %s", field, j, cd.VM, c.hint(cd.VM))
		}
		if _, dup := c.candOf[vm]; dup {
			return nil, fmt.Errorf("%s: candidates[%d]: VM %s is listed twice; list each candidate once", field, j, cd.VM)
		}
		c.candOf[vm] = cd
		c.pool[vm] = true
		c.cands[vm.Host] = append(c.cands[vm.Host], vm)
	}
	c.indexHosts()
	return c, nil
}

// hint says how to fix a VM name the inventory lacks, as Check does.
func (c *converter) hint(name string) string {
	a := &analysis{inv: c.inv}
	return a.vmHint(name)
}

// validate refuses counts no choice can meet, naming the limit and the fix.
func (c *converter) validate() error {
	field := fmt.Sprintf("layout %s", c.conv.Layout)
	found := false
	var offered []string
	for _, hc := range c.hosts {
		if len(c.cands[hc.host.Name]) == 0 {
			continue
		}
		if _, ok := hc.host.Profile(c.conv.Profile); ok {
			found = true
		}
		offered = append(offered, fmt.Sprintf("%s offers %s", hc.host.Name, offers(hc.host)))
	}
	if !found {
		return fmt.Errorf("%s: profile %s is not offered by the hosts of the candidates (%s); write a profile they offer, or list candidates on hosts that offer it",
			field, c.conv.Profile, strings.Join(offered, "; "))
	}
	gpus, room := 0, 0
	var perHost []string
	for _, hc := range c.hosts {
		if len(c.cands[hc.host.Name]) == 0 {
			continue
		}
		gpus += len(hc.eligible)
		room += hc.maxGPUs
		perHost = append(perHost, fmt.Sprintf("%s: %d of %d GPUs, %d candidates", hc.host.Name, len(hc.eligible), len(hc.host.GPUs), len(c.cands[hc.host.Name])))
	}
	if c.conv.Count > gpus {
		return fmt.Errorf("%s: count %d is more than the %d GPUs the candidates' hosts can convert to %s (%s%s); lower count to at most %d, or list candidates on more hosts",
			field, c.conv.Count, gpus, c.conv.Profile, strings.Join(perHost, "; "), c.ineligibleNote(), gpus)
	}
	if c.conv.Count > room {
		return fmt.Errorf("%s: count %d needs candidates to fill %d GPUs with %s, but the candidates fill at most %d (%s; each GPU takes %s); lower count to at most %d, or add candidates on those hosts",
			field, c.conv.Count, c.conv.Count, c.conv.Profile, room, strings.Join(perHost, "; "), c.fillNote(), room)
	}
	return nil
}

// ineligibleNote lists why GPUs of the candidates' hosts cannot be converted.
func (c *converter) ineligibleNote() string {
	var out []string
	for _, hc := range c.hosts {
		if len(c.cands[hc.host.Name]) == 0 {
			continue
		}
		for _, i := range hc.ineligible {
			out = append(out, fmt.Sprintf("GPU %s of %s %s", hc.host.GPUs[i].PCIID, hc.host.Name, hc.why[i]))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, "; ")
}

// fillNote says how many candidates one GPU takes, per kind of GPU.
func (c *converter) fillNote() string {
	seen := map[string]bool{}
	var out []string
	for _, hc := range c.hosts {
		for _, i := range hc.eligible {
			s := fmt.Sprintf("%d %s", hc.fill[i], plural(hc.fill[i], "candidate"))
			if c.vgpus > 1 {
				s += fmt.Sprintf(" of %d vGPUs", c.vgpus)
			}
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return strings.Join(out, " or ")
}

// errNoChoice is wrapped by the errors of a count that every choice refuses.
var errNoChoice = errors.New("no choice")

// resolution assembles the result of the chosen picks: the enumerated layout, the spec
// with it, Check's verdict and the explanation.
func (c *converter) resolution(picks []hostPick) *Resolution {
	r := &Resolution{Profile: c.conv.Profile, Count: c.conv.Count, VGPUs: c.vgpus}
	r.Layout = gpupoolv1.Layout{Name: c.conv.Layout, NodeLabels: c.conv.NodeLabels, NodeTaints: c.conv.NodeTaints, GPUReplicas: c.conv.GPUReplicas}
	for _, p := range picks {
		r.Cost += p.cost
		r.Evicted += p.pods
		for _, vm := range p.displaced {
			r.DoNotDisrupt += c.costs[vm].DoNotDisrupt
			r.NearCompletion += c.costs[vm].JobsNearCompletion
		}
	}
	r.Layout.Workers = c.workers(picks)
	r.Spec = c.withLayout(r.Layout)
	r.Problems = Check(r.Spec, r.Layout.Name, c.inv)
	c.explain(r, picks)
	return r
}

// withLayout is the spec with l in place of the layout of its name (or added), and the
// candidates no layout names in a layout of their own, so that they are in the pool.
func (c *converter) withLayout(l gpupoolv1.Layout) *gpupoolv1.GPUPoolProfileSpec {
	s := *c.spec
	s.Layouts = slices.Clone(c.spec.Layouts)
	if i := slices.IndexFunc(s.Layouts, func(x gpupoolv1.Layout) bool { return x.Name == l.Name }); i >= 0 {
		s.Layouts[i] = l
	} else {
		s.Layouts = append(s.Layouts, l)
	}
	named := map[*inventory.VM]bool{}
	for _, x := range s.Layouts {
		for _, w := range x.Workers {
			if vm, ok := c.vms[w.VM]; ok {
				named[vm] = true
			}
		}
	}
	extra := gpupoolv1.Layout{Name: l.Name + poolSuffix}
	for _, cd := range c.conv.Candidates {
		if vm := c.vms[cd.VM]; !named[vm] {
			extra.Workers = append(extra.Workers, c.candidateWorker(vm))
		}
	}
	if len(extra.Workers) > 0 {
		s.Layouts = append(s.Layouts, extra)
	}
	return &s
}

func (c *converter) candidateWorker(vm *inventory.VM) gpupoolv1.Worker {
	return candidateAsWorker(c.candOf[vm], c.conv)
}
