package plan

import (
	"fmt"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// vCenter's second opinion. Where vCenter answers DirectPathProfileManager.QueryCapacity
// (vSphere 9.0; inventory.Host.VCenterCapacity), gpupool's own packing is checked
// against it per host and vGPU profile:
//
//   - gpupool finds room for n vGPUs of P on host H but vCenter says fewer remain: the
//     layout is refused (ReasonInsufficientGPU) with a message that reports the
//     disagreement, and gpupool follows vCenter; nothing is drained or parked for it.
//   - gpupool refuses but vCenter would have room: gpupool's refusal stands (it is the
//     conservative answer); the message says what vCenter reported.
//   - vCenter does not offer the query (before 9.0), the query failed, or vCenter could
//     not count the profile: gpupool's own packing decides alone.
//
// vCenter's remaining is counted with what runs now, while gpupool plans the host once
// the pool's leaving and reprofiled VMs are down. The vGPUs of P those VMs free come back
// to P, so remaining plus those is what vCenter will have room for when only vGPUs of P
// are freed. Freeing vGPUs of another profile can make room for P in ways a per-profile
// count cannot tell (a GPU that runs only them becomes free), so then only vCenter's max
// (the host with no VM running) bounds what fits. The plan is made again from every
// inventory read, so once the VMs are down vCenter's remaining is compared as it is.

// checkCapacityWithVCenter is checkCapacity, then vCenter's second opinion on its
// answer.
func (a *analysis) checkCapacityWithVCenter(ha *hostAnalysis) {
	before := len(a.problems)
	a.checkCapacity(ha)
	vc := &ha.host.VCenterCapacity
	if vc.State != inventory.CapacityRead {
		return
	}
	if len(a.problems) > before {
		// gpupool refused: its refusal stands; say when vCenter disagrees.
		if note := a.vcenterWouldFit(ha); note != "" {
			a.problems[before].Message += note
		}
		return
	}
	if len(ha.order) == 0 {
		return
	}
	room := a.vcenterRoom(ha)
	for _, d := range demands(ha.order) {
		said, ok := vc.Said(d.profile.Name)
		if !ok {
			continue
		}
		r, why := room(d.profile.Name, said)
		if d.count <= r {
			continue
		}
		a.problem(ReasonInsufficientGPU,
			"layout %s: gpupool's packing finds room for %d x %s on host %s, vCenter (DirectPathProfileManager.QueryCapacity) says remaining %d%s; gpupool follows vCenter",
			a.layout.Name, d.count, d.profile.Name, ha.host.Name, said.Remaining, why)
		ha.order = nil
		return
	}
}

// vcenterRoom returns how many vGPUs of a profile vCenter's answer leaves room for once
// the pool's departing VMs on the host are down, and how that was counted (see above).
func (a *analysis) vcenterRoom(ha *hostAnalysis) func(profile string, said inventory.ProfileCapacity) (int, string) {
	freed := map[string]int{}
	for _, m := range ha.members {
		if m.vm.Host == ha.host.Name && (m.fate == leaves || m.fate == reprofiles) && !m.away && m.vm.PowerState == inventory.PoweredOn {
			for _, p := range m.vm.DeviceProfiles() {
				freed[p]++
			}
		}
	}
	return func(profile string, said inventory.ProfileCapacity) (int, string) {
		others := false
		for p := range freed {
			others = others || p != profile
		}
		switch {
		case others:
			return said.Max, fmt.Sprintf(" and at most %d with no VM running (the layout also frees vGPUs of other profiles there)", said.Max)
		case freed[profile] > 0:
			return min(said.Max, said.Remaining+freed[profile]),
				fmt.Sprintf(" (%d once the layout's %s are down), max %d", said.Remaining+freed[profile], plural(freed[profile], "vGPU"), said.Max)
		}
		return said.Remaining, fmt.Sprintf(", max %d", said.Max)
	}
}

// vcenterWouldFit is a note for gpupool's refusal on the host when vCenter reports room
// for every profile to start there; "" otherwise.
func (a *analysis) vcenterWouldFit(ha *hostAnalysis) string {
	var starting []*member
	for _, m := range ha.members {
		if (m.fate == arrives || m.fate == reprofiles) && !m.blocked && !m.away && a.startsOn(m) == ha.host {
			starting = append(starting, m)
		}
	}
	if len(starting) == 0 {
		return ""
	}
	room := a.vcenterRoom(ha)
	var said []string
	for _, d := range demands(starting) {
		pc, ok := ha.host.VCenterCapacity.Said(d.profile.Name)
		if !ok {
			return ""
		}
		if r, _ := room(d.profile.Name, pc); d.count > r {
			return ""
		}
		said = append(said, fmt.Sprintf("remaining %d x %s", pc.Remaining, d.profile.Name))
	}
	return fmt.Sprintf(" (vCenter's DirectPathProfileManager.QueryCapacity says %s on host %s; gpupool keeps its own refusal)",
		strings.Join(said, ", "), ha.host.Name)
}
