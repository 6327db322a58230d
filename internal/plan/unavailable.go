package plan

import (
	"fmt"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// avoidUnavailable keeps new work off hosts that are in maintenance mode, entering it,
// disconnected or not responding (inventory.Host.Unavailable). For each VM of the pool
// on such a host that the layout must change:
//
//   - A running VM (to park or to reconfigure) is held (Plan.Held, HostUnavailable):
//     gpupool issues no operation on it, its vGPUs keep their GPUs, and the other
//     hosts go on. This is also what happens to a VM whose host becomes unavailable
//     mid-transition: its next step is not issued, whatever it is, until the host is
//     back; a task vSphere already runs is left to vSphere.
//   - A powered-off VM to start (or to reconfigure and start) on a host that vCenter
//     still reaches (maintenance mode, entering it) is powered on on another available
//     host of its compute resource that offers its profile and has room
//     and mounts all its datastores (PowerOnVM_Task's host argument); the reconfigure, a change of the VM's
//     configuration only, still runs where the VM is registered. When no host has
//     room, or the host is disconnected, the layout cannot be made: a Problem that
//     names the host and why, and the pool stalls.
//   - A suspended VM is held (HostUnavailable), whatever the layout wants of it: its
//     suspended state resumes only on its own host, and discarding it is the user's
//     call to make where the host is unavailable (see holdSuspended). Only that VM
//     waits; the other hosts go on.
func (a *analysis) avoidUnavailable() {
	var moving []*member
	for _, m := range a.members {
		if m.fate == stays || m.fate == parked || m.blocked {
			continue
		}
		h, ok := a.findHost(m.vm.Host)
		if !ok {
			continue
		}
		why := h.Unavailable()
		if why == "" {
			continue
		}
		switch {
		case m.held:
			m.away = true // held already (no node, suspended state at risk): one reason is enough
		case m.vm.PowerState == inventory.PoweredOn:
			m.away, m.held = true, true
			verb := map[fate]string{leaves: "parked", reprofiles: "reconfigured to " + vgpus(m.count, m.want)}[m.fate]
			a.held = append(a.held, Problem{Reason: ReasonHostUnavailable, VM: m.vm.Name, Message: fmt.Sprintf(
				"VM %s must be %s, but its host %s %s: gpupool issues no operation on it until the host is available again; the other hosts go on",
				m.vm.Name, verb, h.Name, why)})
		case m.fate == leaves:
			// Note: a VM that leaves and does not run has nothing to do.
		case m.vm.PowerState == inventory.Suspended:
			a.holdSuspended(m, h, why)
		case !h.Reachable():
			m.away, m.blocked = true, true
			a.problem(ReasonHostUnavailable, "VM %s is registered on host %s, which %s: vCenter can neither reconfigure nor power it on; reconnect the host or remove VM %s from layout %s",
				m.vm.Name, h.Name, why, m.vm.Name, a.layout.Name)
		default:
			moving = append(moving, m)
		}
	}
	for _, m := range moving {
		a.relocate(m)
	}
}

// holdSuspended holds a suspended VM of an unavailable host. A VM to resume (or to
// reconfigure while its state must be kept) waits for its host. With
// spec.discardSuspendedState a VM to reconfigure would be powered off, and a powered-off
// VM of a host in maintenance mode is started on another host (relocate); but gpupool
// does not power a VM off on a host that is unavailable: a host entering maintenance
// mode is being evacuated, and vCenter reaches no VM of a disconnected host. The message
// says what the user can do instead.
func (a *analysis) holdSuspended(m *member, h *inventory.Host, why string) {
	m.away, m.held, m.blocked = true, true, true
	var msg string
	switch {
	case m.fate == reprofiles && a.spec.DiscardSuspendedState && h.Reachable():
		msg = fmt.Sprintf("VM %s is suspended on host %s, which %s, and must be reconfigured to %s: gpupool does not power it off there; bring the host back, or power the VM off (discarding its suspended state) so that gpupool starts it on another host of its cluster; the other hosts go on",
			m.vm.Name, h.Name, why, vgpus(m.count, m.want))
	case !h.Reachable():
		msg = fmt.Sprintf("VM %s is suspended on host %s, which %s: vCenter can neither resume, power off nor reconfigure it until the host is reconnected; the other hosts go on",
			m.vm.Name, h.Name, why)
	default:
		msg = fmt.Sprintf("VM %s is suspended on host %s, which %s, and can resume only there: gpupool issues no operation on it until the host is available again (or power the VM off, discarding its suspended state, so that gpupool may start it on another host of its cluster); the other hosts go on",
			m.vm.Name, h.Name, why)
	}
	a.held = append(a.held, Problem{Reason: ReasonHostUnavailable, VM: m.vm.Name, Message: msg})
}

// relocate finds another host of m's compute resource for m's power-on: available,
// offering m's profile, and with room for m next to what it runs and starts already.
// Hosts are tried by name, so the choice is the same on every reconcile.
func (a *analysis) relocate(m *member) {
	home, _ := a.findHost(m.vm.Host)
	var tried, unmounted []string
	for i := range a.inv.Hosts {
		h := &a.inv.Hosts[i]
		if h == home || h.ComputeResource == "" || h.ComputeResource != home.ComputeResource || h.Unavailable() != "" {
			continue
		}
		offer, ok := offerOf(h, m.want)
		if !ok {
			continue
		}
		// PowerOnVM_Task's host "must specify a host that is part of the same compute
		// resource ... If this host is not compatible, the current host association is
		// used" (vSphere API, PowerOnVMRequestType): on a host that does not mount the
		// VM's datastores, vCenter would power it on on its unavailable host instead.
		if !h.Mounts(m.vm.Datastores) {
			unmounted = append(unmounted, h.Name)
			continue
		}
		tried = append(tried, h.Name)
		ha := a.hostAnalysis(h)
		m.target, m.offer = h, offer
		ha.members = append(ha.members, m)
		if a.capacity(ha) == "" {
			return
		}
		ha.members = ha.members[:len(ha.members)-1]
		m.target = nil
	}
	m.away, m.blocked = true, true
	others := "no other host of its compute resource offers " + m.want
	if len(tried) > 0 {
		others = "no other available host of its compute resource has room for " + vgpus(m.count, m.want) + " (tried " + strings.Join(tried, ", ") + ")"
	}
	if len(unmounted) > 0 {
		verb := map[bool]string{true: " offers " + m.want + " but does not", false: " offer " + m.want + " but do not"}[len(unmounted) == 1]
		lack := plural(len(unmounted), "host") + " " + strings.Join(unmounted, ", ") + " of its compute resource" + verb +
			" mount all of its datastores (" + strings.Join(m.vm.Datastores, ", ") + ")"
		if len(tried) == 0 {
			others = lack
		} else {
			others += ", and " + lack
		}
	}
	a.problem(ReasonHostUnavailable, "VM %s is registered on host %s, which %s, and %s; bring host %s back or free GPUs on another host of its cluster",
		m.vm.Name, home.Name, home.Unavailable(), others, home.Name)
}

// hostAnalysis returns the analysis of h, made empty if there is none yet.
func (a *analysis) hostAnalysis(h *inventory.Host) *hostAnalysis {
	ha, ok := a.byHost[h.Name]
	if !ok {
		ha = &hostAnalysis{host: h}
		a.byHost[h.Name] = ha
	}
	return ha
}

// vgpus writes n vGPUs of a profile: "grid_a100-40c", or "2 x grid_a100-40c".
func vgpus(n int, profile string) string {
	if n <= 1 {
		return profile
	}
	return fmt.Sprintf("%d x %s", n, profile)
}
