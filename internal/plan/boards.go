package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpupool/gpupool/internal/inventory"
)

// The board rule in the feasibility check: a vGPU type runs only on GPUs of its own
// board (inventory.Host.RunsOn). Packing (packable, packSlots) and the power-on order
// (inventory.Place) give a type only the GPUs of its board; this file says why a layout
// does not fit when boards are the reason, and refuses to start a type on a host where
// gpupool cannot tell which GPUs run it.

// unsureBoards says, for the vGPUs to start on ha's host, which types gpupool cannot
// place because it does not identify the board of a GPU or of the type on a host whose
// GPUs are of several kinds; "" when it can place them all. Such a type is not started
// on the host at all: vSphere might put it on the GPU gpupool cannot judge, or refuse it
// there, and either way the plan's prediction of where vGPUs land would be wrong.
func (a *analysis) unsureBoards(ha *hostAnalysis, starting []*member) string {
	h := ha.host
	var msgs []string
	seen := map[string]bool{}
	for _, m := range starting {
		p := m.offer.Name
		if seen[p] {
			continue
		}
		seen[p] = true
		var gpus []string
		for i, g := range h.GPUs {
			if h.RunsOn(i, p) == inventory.Unsure {
				gpus = append(gpus, unsureGPU(g, p))
			}
		}
		if len(gpus) == 0 {
			continue
		}
		msgs = append(msgs, fmt.Sprintf("cannot tell whether %s (%s) runs on %s",
			p, inventory.DescribeProfileBoard(p), strings.Join(gpus, ", nor on ")))
	}
	if len(msgs) == 0 {
		return ""
	}
	var vms []string
	for _, m := range starting {
		if seen[m.offer.Name] && !slices.Contains(vms, m.vm.Name) {
			vms = append(vms, m.vm.Name)
		}
	}
	return fmt.Sprintf("host %s: a vGPU type runs only on GPUs of its own board, and the host's GPUs are of several kinds (%s), but gpupool %s; it starts no such vGPU on the host (%s of layout %s). Start these VMs on a host whose GPUs gpupool identifies, or report the device name and PCI device id of the GPU so that gpupool learns its board",
		h.Name, hostBoards(h), strings.Join(msgs, "; "), vmList(vms), a.layout.Name)
}

// unsureGPU describes a GPU whose board gpupool cannot match with p's.
func unsureGPU(g inventory.GPU, p string) string {
	if _, ok, why := inventory.BoardOf(g); !ok {
		return fmt.Sprintf("GPU %s, whose board gpupool cannot identify from %s (%s)", g.PCIID, reported(g), why)
	}
	return fmt.Sprintf("GPU %s, %s, as gpupool does not know the board of %s", g.PCIID, withArticle(g.Describe()), p)
}

// reported writes what a GPU reports of its device: `device name "NVIDIA X9" and PCI
// device id 0x2999`.
func reported(g inventory.GPU) string {
	name, id := "no device name", "no PCI device id"
	if g.Device != "" {
		name = fmt.Sprintf("device name %q", g.Device)
	}
	if g.DeviceID != 0 {
		id = fmt.Sprintf("PCI device id 0x%04x", g.DeviceID)
	}
	return name + " and " + id
}

// withArticle writes a board with its article: "an NVIDIA L4", "a Tesla T4".
func withArticle(board string) string {
	if strings.HasPrefix(board, "NVIDIA") || strings.ContainsAny(board[:1], "AEIOU") {
		return "an " + board
	}
	return "a " + board
}

// hostBoards lists a host's GPUs with their boards: "GPU 0000:3b:00.0 is an NVIDIA L4,
// GPU 0000:af:00.0 is an NVIDIA A16".
func hostBoards(h *inventory.Host) string {
	parts := make([]string, len(h.GPUs))
	for i, g := range h.GPUs {
		if _, ok, _ := inventory.BoardOf(g); ok {
			parts[i] = fmt.Sprintf("GPU %s is %s", g.PCIID, withArticle(g.Describe()))
		} else {
			parts[i] = fmt.Sprintf("GPU %s reports %s", g.PCIID, reported(g))
		}
	}
	return strings.Join(parts, ", ")
}

// boardShortage says why the vGPUs of ds do not fit ha's host when the board rule is the
// reason: a host with GPUs of several boards, and a profile whose vGPUs do not fit the
// GPUs of its own board even alone. "" when no profile is short of its board.
func (a *analysis) boardShortage(ha *hostAnalysis, ds []demand) string {
	h := ha.host
	if h.OneKind() {
		return ""
	}
	for _, d := range ds {
		if packable(h, ha.freed, []demand{d}) {
			continue
		}
		var own, other []string
		var limits []string
		ownMixed := false
		for i, g := range h.GPUs {
			switch h.RunsOn(i, d.profile.Name) {
			case inventory.Runs:
				ownMixed = ownMixed || g.Mixed()
				own = append(own, fmt.Sprintf("GPU %s (%s, %s mode, %s)", g.PCIID, gib(g.MemoryMiB), modeName(g), a.runsWhat(ha, i)))
				if l := mixedLimit(g, d.profile); l != "" && !slices.Contains(limits, l) {
					limits = append(limits, l)
				}
			case inventory.OtherBoard:
				other = append(other, fmt.Sprintf("GPU %s is %s and runs only its own types", g.PCIID, withArticle(g.Describe())))
			}
		}
		if len(other) == 0 {
			continue
		}
		if ownMixed {
			limits = append(limits, "in mixed-size mode a vGPU starts only at the placement IDs NVIDIA lists for its size, and vSphere does not report where running vGPUs sit, so gpupool counts only the places free wherever they sit")
		}
		board := inventory.DescribeProfileBoard(d.profile.Name)
		msg := fmt.Sprintf("host %s: layout %s needs %d x %s (%s), but a vGPU type runs only on GPUs of its own board, and ", h.Name, a.layout.Name, d.count, d.profile.Name, board)
		if len(own) == 0 {
			msg += fmt.Sprintf("the host has no %s GPU", board)
		} else {
			msg += fmt.Sprintf("its %s %s cannot take them", strings.Join(own, " and "), map[bool]string{true: "is the only " + board + " GPU, which", false: "are its " + board + " GPUs, which"}[len(own) == 1])
			if len(limits) > 0 {
				msg += " (" + strings.Join(limits, "; ") + ")"
			}
		}
		return msg + fmt.Sprintf("; %s. Give these workers a profile or a vGPU count that the host's %s GPUs can run, or register the VMs on a host with more %s GPUs",
			strings.Join(other, ", "), board, board)
	}
	return ""
}

// runsWhat says what keeps running on the i-th GPU of ha: "free" or "runs 2 vGPUs".
func (a *analysis) runsWhat(ha *hostAnalysis, i int) string {
	o := ha.freed[i]
	if o.Count == 0 {
		return "free"
	}
	return fmt.Sprintf("runs %d %s, %s used", o.Count, plural(o.Count, "vGPU"), gib(o.UsedMiB))
}

func modeName(g inventory.GPU) string {
	if g.Mixed() {
		return "mixed-size"
	}
	return "same-size"
}

// mixedLimit says what NVIDIA's placement table allows of p on GPU g in mixed-size mode,
// "" for a GPU in same-size mode.
func mixedLimit(g inventory.GPU, p inventory.Profile) string {
	if !g.Mixed() {
		return ""
	}
	n, ok := inventory.MixedSizeMax(g, p.FrameBufferMiB)
	switch {
	case !ok:
		return fmt.Sprintf("gpupool has no NVIDIA placement table for a GPU of %s (%s) and counts one vGPU at most, alone, on it in mixed-size mode", gib(g.MemoryMiB), g.Describe())
	case n == 0:
		return fmt.Sprintf("NVIDIA's placement table for GPUs with %d GB of frame buffer lists no vGPU of %s in mixed-size mode", inventory.PlacementRegionGB(g), gib(p.FrameBufferMiB))
	}
	return fmt.Sprintf("NVIDIA's placement table for GPUs with %d GB of frame buffer allows at most %d x %s per GPU in mixed-size mode", inventory.PlacementRegionGB(g), n, p.Name)
}
