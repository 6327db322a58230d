package plan

// A VM's vGPU devices may carry different profiles (NVIDIA Multi-vGPU allows sizes of one
// board and series in a VM). No worker asks for that (inventory.VM.Is), but while such a
// VM runs, capacity counts each device at its own size, under every split of its devices
// over its GPUs that is consistent with vSphere's report (splits.go).

// nextDevice is the profile of the VM's next vGPU device not yet counted (devices
// counts them per VM), for a VM whose devices all run on one GPU; splits.go places
// the devices of a VM listed on several GPUs. "" for a VM unknown or without vGPUs.
func (a *analysis) nextDevice(name string, devices map[string]int) string {
	vm, ok := a.vms[name]
	if !ok {
		return ""
	}
	devs := vm.DeviceProfiles()
	k := devices[name]
	devices[name]++
	if k < len(devs) {
		return devs[k]
	}
	return vm.Profile
}
