package accounting

import (
	"github.com/gpupool/gpupool/internal/inventory"
)

// VGPUShare is the GPU-equivalent of one vGPU of profile on a GPU of memMiB: its frame
// buffer over the GPU's (a grid_p100-4q on a 16 GB P100 is 0.25), at most 1. A profile
// whose size cannot be read, or a GPU of unknown memory, is worth 0: such capacity is
// not counted rather than guessed.
func VGPUShare(profile string, memMiB int64) float64 {
	fb, err := inventory.ProfileFrameBufferMiB(profile)
	if err != nil || memMiB <= 0 || fb <= 0 {
		return 0
	}
	return min(float64(fb)/float64(memMiB), 1)
}

// VMShares are the GPU-equivalents of each of a running VM's vGPUs. The GPU's memory is
// that of the GPU the VM's vGPUs run on (its first; a VM's vGPUs are of one series), or
// else of the board its profile names.
func VMShares(vm *inventory.VM, host *inventory.Host) []float64 {
	mem := int64(0)
	if host != nil && len(vm.GPUs) > 0 {
		for _, g := range host.GPUs {
			if g.PCIID == vm.GPUs[0] {
				mem = g.MemoryMiB
				break
			}
		}
	}
	profiles := vm.DeviceProfiles()
	out := make([]float64, len(profiles))
	for i, p := range profiles {
		m := mem
		if m == 0 {
			if b, ok := inventory.ProfileBoard(p); ok {
				m = b.MemGiB * 1024
			}
		}
		out[i] = VGPUShare(p, m)
	}
	return out
}
