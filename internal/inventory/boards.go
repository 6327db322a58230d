package inventory

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
)

// Boards. A vGPU type runs only on GPUs of its own board: NVIDIA's Virtual GPU Software
// User Guide (vGPU 17, "Virtual GPU Types for Supported GPUs") lists the types per board,
// and its example of a vGPU "A16-4Q" is "on an NVIDIA A16 board"; NVIDIA AI Enterprise
// ("NVIDIA AI Enterprise and NVIDIA vGPU (C-Series)", Multi-vGPU) likewise allows vGPUs
// in one VM only "provided the board type and the series of all the vGPUs are the same".
// vSphere's config.sharedPassthruGpuTypes lists the types of the whole host, so on a host
// whose GPUs are of several boards gpupool decides per GPU which types it runs: the
// board of a type is the word between "grid_" (or "nvidia_") and the dash of its name
// (grid_l4-16c: l4), the board of a GPU is read off its PCI device id
// (hardware.pciDevice[].deviceId) and its name (graphicsInfo[].deviceName).

// Board is an NVIDIA board that gpupool identifies.
type Board struct {
	// Name is the board as NVIDIA's documentation names it, such as "NVIDIA L4".
	Name string
	// Token is the board in vGPU type names: l4 in grid_l4-16c.
	Token string
	// MemGiB is the frame buffer of one of its physical GPUs.
	MemGiB int64
	// Ada tells the GPU architecture Ada Lovelace, whose 48 GB placement table differs.
	Ada bool
	// NoMixedSize: NVIDIA's vGPU user guide says of it "This GPU does not support
	// mixed-size mode" (Tesla T4, A.1.17; Tesla M10, A.1.16). Boards whose tables give
	// "Maximum vGPUs per GPU in Mixed-Size Mode" support it; of the others (Tesla P100,
	// P40, M60, which vGPU 17 does not list) the guide says nothing.
	NoMixedSize bool
	// ids are the PCI device ids (vendor 10de) of the board. 0x25b6 is both the A2 and
	// the A16 (GA107GL, "[A2 / A16]" in the PCI id database): the name decides.
	ids []uint16
	// words must all be words of the GPU's device name; unless must not be one.
	words, unless []string
}

// boards are the boards gpupool identifies. Frame buffers and mixed-size support: the
// vGPU user guide (vGPU 17.0, docs.nvidia.com/grid/17.0/grid-vgpu-user-guide, appendix
// A.1 "Virtual GPU Types for Supported GPUs"); PCI device ids: the PCI id database
// (pci-ids.ucw.cz: 27b8 "AD104GL [L4]", 26b5 "AD102GL [L40]", 26b9 "AD102GL [L40S]",
// 2235 "GA102GL [A40]", 2236 "GA102GL [A10]", 25b6 "GA107GL [A2 / A16]", 1eb8 "TU104GL
// [Tesla T4]", 15f7/15f8/15f9 "GP100GL [Tesla P100 PCIe 12GB / PCIe 16GB / SXM2 16GB]",
// 1b38 Tesla P40, 13bd "GM107GL [Tesla M10]", 13f2 "GM204GL [Tesla M60]").
var boards = []Board{
	{Name: "NVIDIA L4", Token: "l4", MemGiB: 24, Ada: true, ids: []uint16{0x27b8}, words: []string{"L4"}},
	{Name: "NVIDIA L40", Token: "l40", MemGiB: 48, Ada: true, ids: []uint16{0x26b5}, words: []string{"L40"}},
	{Name: "NVIDIA L40S", Token: "l40s", MemGiB: 48, Ada: true, ids: []uint16{0x26b9}, words: []string{"L40S"}},
	{Name: "NVIDIA A40", Token: "a40", MemGiB: 48, ids: []uint16{0x2235}, words: []string{"A40"}},
	{Name: "NVIDIA A10", Token: "a10", MemGiB: 24, ids: []uint16{0x2236}, words: []string{"A10"}},
	{Name: "NVIDIA A16", Token: "a16", MemGiB: 16, ids: []uint16{0x25b6}, words: []string{"A16"}},
	{Name: "NVIDIA A2", Token: "a2", MemGiB: 16, ids: []uint16{0x25b6}, words: []string{"A2"}},
	{Name: "Tesla T4", Token: "t4", MemGiB: 16, NoMixedSize: true, ids: []uint16{0x1eb8}, words: []string{"T4"}},
	{Name: "Tesla P100 PCIe 16GB", Token: "p100", MemGiB: 16, ids: []uint16{0x15f8}, words: []string{"P100"}, unless: []string{"12GB", "SXM2"}},
	{Name: "Tesla P100 PCIe 12GB", Token: "p100c", MemGiB: 12, ids: []uint16{0x15f7}, words: []string{"P100", "12GB"}},
	{Name: "Tesla P100 SXM2 16GB", Token: "p100x", MemGiB: 16, ids: []uint16{0x15f9}, words: []string{"P100", "SXM2"}},
	{Name: "Tesla P40", Token: "p40", MemGiB: 24, ids: []uint16{0x1b38}, words: []string{"P40"}},
	{Name: "Tesla M10", Token: "m10", MemGiB: 8, NoMixedSize: true, ids: []uint16{0x13bd}, words: []string{"M10"}},
	{Name: "Tesla M60", Token: "m60", MemGiB: 8, ids: []uint16{0x13f2}, words: []string{"M60"}},
}

// ProfileBoardToken is the board word of a vGPU type name: l4 in grid_l4-16c, a100 in
// nvidia_a100-3-20c; "" for a name that has none.
func ProfileBoardToken(profile string) string {
	_, rest, ok := strings.Cut(profile, "_")
	if !ok {
		return ""
	}
	token, _, ok := strings.Cut(rest, "-")
	if !ok {
		return ""
	}
	return strings.ToLower(token)
}

// ProfileBoard is the board of a vGPU type, when gpupool knows it.
func ProfileBoard(profile string) (Board, bool) {
	token := ProfileBoardToken(profile)
	for _, b := range boards {
		if b.Token == token {
			return b, true
		}
	}
	return Board{}, false
}

// BoardOf identifies the board of a GPU from its PCI device id and its device name. Both
// must agree where both say something; a name that names several boards ("GA107GL [A2 /
// A16]") or a device id shared by several (0x25b6) needs the other to decide. It returns
// false and why not when the GPU's board is not identified.
func BoardOf(g GPU) (Board, bool, string) {
	key := gpuKindKey{g.Device, g.DeviceID}
	if v, ok := gpuBoards.Load(key); ok {
		r := v.(boardResult)
		return r.board, r.ok, r.why
	}
	b, ok, why := identify(g.Device, g.DeviceID)
	if len(g.Device) <= 128 {
		gpuBoards.Store(key, boardResult{b, ok, why})
	}
	return b, ok, why
}

type gpuKindKey struct {
	device string
	id     uint16
}

type boardResult struct {
	board Board
	ok    bool
	why   string
}

// gpuBoards caches BoardOf: the placement search asks for the same few GPUs many times.
var gpuBoards sync.Map

func identify(device string, id uint16) (Board, bool, string) {
	words := strings.FieldsFunc(strings.ToUpper(device), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	var byID, byName []Board
	for _, b := range boards {
		if id != 0 && slices.Contains(b.ids, id) {
			byID = append(byID, b)
		}
		if nameMatches(b, words) {
			byName = append(byName, b)
		}
	}
	switch {
	case id == 0 && device == "":
		return Board{}, false, "the host reports neither its device name nor its PCI device id"
	case len(byID) > 0 && len(byName) > 0:
		both := slices.DeleteFunc(slices.Clone(byID), func(b Board) bool { return !slices.ContainsFunc(byName, sameBoard(b)) })
		if len(both) == 1 {
			return both[0], true, ""
		}
		if len(both) == 0 {
			return Board{}, false, fmt.Sprintf("its PCI device id says %s, its device name %s", boardNames(byID), boardNames(byName))
		}
		return Board{}, false, "it may be any of " + boardNames(both)
	case len(byID) == 1:
		return byID[0], true, ""
	case len(byName) == 1:
		return byName[0], true, ""
	case len(byID)+len(byName) > 1:
		return Board{}, false, "it may be any of " + boardNames(append(byID, byName...))
	}
	return Board{}, false, "gpupool knows no board of that device name and PCI device id"
}

func nameMatches(b Board, words []string) bool {
	for _, w := range b.words {
		if !slices.Contains(words, w) {
			return false
		}
	}
	for _, w := range b.unless {
		if slices.Contains(words, w) {
			return false
		}
	}
	return true
}

func sameBoard(b Board) func(Board) bool { return func(c Board) bool { return c.Token == b.Token } }

func boardNames(bs []Board) string {
	var names []string
	for _, b := range bs {
		if !slices.Contains(names, b.Name) {
			names = append(names, b.Name)
		}
	}
	return strings.Join(names, " or ")
}

// Verdict is whether a GPU runs a vGPU type.
type Verdict int

const (
	// Runs: the GPU runs the type.
	Runs Verdict = iota
	// OtherBoard: the GPU is of another board than the type.
	OtherBoard
	// Unsure: gpupool cannot tell (the GPU's or the type's board is not identified, and
	// the host has GPUs of several kinds).
	Unsure
)

// RunsOn tells whether the host's i-th GPU runs vGPUs of profile. Where gpupool
// identifies both boards, the type runs on its own board only. Where it does not, a host
// whose GPUs are all of one kind (one board, or one device name and PCI device id) runs
// every type it offers on every GPU: sharedPassthruGpuTypes lists what its GPUs run. On
// a host with GPUs of several kinds the answer is Unsure, which gpupool treats as does
// not run and reports (the planner starts no vGPU of that type on the host).
func (h *Host) RunsOn(i int, profile string) Verdict {
	if k := kindOf(profile); k.known {
		if gb, ok, _ := BoardOf(h.GPUs[i]); ok {
			if gb.Token == k.board {
				return Runs
			}
			return OtherBoard
		}
	}
	if h.OneKind() {
		return Runs
	}
	return Unsure
}

// OneKind tells whether the host's GPUs are all of one kind: the same identified board,
// or, when not identified, the same device name and PCI device id.
func (h *Host) OneKind() bool {
	same := true
	for i := 1; i < len(h.GPUs) && same; i++ {
		same = h.GPUs[i].Device == h.GPUs[0].Device && h.GPUs[i].DeviceID == h.GPUs[0].DeviceID
	}
	if same {
		return true
	}
	for i := 1; i < len(h.GPUs); i++ {
		if kindKey(h.GPUs[i]) != kindKey(h.GPUs[0]) {
			return false
		}
	}
	return true
}

func kindKey(g GPU) string {
	if b, ok, _ := BoardOf(g); ok {
		return b.Token
	}
	return fmt.Sprintf("?%s#%04x", g.Device, g.DeviceID)
}

// Describe writes a GPU's board for messages: "NVIDIA L4", or the device name and PCI
// device id it reports when gpupool does not identify it.
func (g GPU) Describe() string {
	if b, ok, _ := BoardOf(g); ok {
		return b.Name
	}
	switch {
	case g.Device != "" && g.DeviceID != 0:
		return fmt.Sprintf("%q (PCI device id 0x%04x)", g.Device, g.DeviceID)
	case g.Device != "":
		return fmt.Sprintf("%q", g.Device)
	case g.DeviceID != 0:
		return fmt.Sprintf("PCI device id 0x%04x", g.DeviceID)
	}
	return "a GPU of unreported device"
}

// DescribeProfileBoard writes a profile's board for messages: "NVIDIA L4", or the board
// word of its name when gpupool does not know the board.
func DescribeProfileBoard(profile string) string {
	if b, ok := ProfileBoard(profile); ok {
		return b.Name
	}
	if t := ProfileBoardToken(profile); t != "" {
		return fmt.Sprintf("board %q, which gpupool does not know", t)
	}
	return "no board gpupool can read from the name"
}
