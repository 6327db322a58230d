package webhook

import (
	"fmt"
	"path"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
)

// MaxVGPUs is the most vGPUs a worker may ask for (workers[].vgpus); the CRD's CEL
// rule says the same. vSphere allows at most 16 PCI passthrough devices per VM.
const MaxVGPUs = 16

// MaxGPUReplicas is the most replicas of the GPU resource per vGPU a layout may name
// (layouts[].gpuReplicas); the CRD's CEL rule says the same.
const MaxGPUReplicas = 256

// validateGPUReplicas checks a layout's gpuReplicas, as the CRD's CEL rule does.
func validateGPUReplicas(lp *field.Path, l *gpupoolv1.Layout) field.ErrorList {
	if r := l.GPUReplicas; r != nil && (*r < 1 || *r > MaxGPUReplicas) {
		return field.ErrorList{field.Invalid(lp.Child("gpuReplicas"), *r, fmt.Sprintf(
			"must be between 1 and %d replicas of the GPU resource per vGPU, as the device plugin's time-slicing or MPS configuration sets them; leave it out to wait for at least one per vGPU", MaxGPUReplicas))}
	}
	return nil
}

// validateWorkers checks a layout's VMs and profiles: each VM a clean name or an inventory
// path inside the pool's datacenter, listed once, with an NVIDIA vGPU type name.
func validateWorkers(lp *field.Path, l *gpupoolv1.Layout, datacenter string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]int{}
	for j, w := range l.Workers {
		wp := lp.Child("workers").Index(j)
		if msg := checkVM(w.VM, datacenter); msg != "" {
			errs = append(errs, field.Invalid(wp.Child("vm"), shown(w.VM), msg))
		} else {
			key := vmKey(w.VM)
			if k, dup := seen[key]; dup {
				errs = append(errs, field.Invalid(wp.Child("vm"), shown(w.VM),
					fmt.Sprintf("is the VM of workers[%d] of layout %q again (by name or path); list each VM once per layout", k, l.Name)))
			} else {
				seen[key] = j
			}
		}
		errs = append(errs, checkProfileAndVGPUs(wp, w.Profile, w.VGPUs, "VM")...)
	}
	return errs
}

// checkProfileAndVGPUs checks a vGPU profile and how many vGPUs of it one VM carries, at
// p.profile and p.vgpus: for workers, a layout by count's candidates and a selection's
// VMs (per names them in the message).
func checkProfileAndVGPUs(p *field.Path, profile string, vgpus int32, per string) field.ErrorList {
	var errs field.ErrorList
	if _, err := inventory.ProfileFrameBufferMiB(profile); err != nil {
		errs = append(errs, field.Invalid(p.Child("profile"), shown(profile),
			"is not an NVIDIA vGPU type name; write it as govc gpu.host.profile.ls lists it: grid_p100-4q (board, GiB, series A/B/C/Q), nvidia_a100-3-20c (MIG-backed: slices-GiB-c) or nvidia_h100xm-1-10cme (MIG with media extensions)"))
	}
	if vgpus < 0 || vgpus > MaxVGPUs {
		errs = append(errs, field.Invalid(p.Child("vgpus"), vgpus, fmt.Sprintf(
			"must be between 1 and %d vGPUs of the profile per %s; leave it out for one vGPU", MaxVGPUs, per)))
	}
	return errs
}

// checkVM says what is wrong with a worker's vm, or "". A name is the VM's name; a value
// with a slash is an inventory path, which must be absolute and inside the pool's
// datacenter's vm folder, because the operator looks VMs up in that datacenter only.
func checkVM(vm, datacenter string) string {
	if vm != strings.TrimFunc(vm, unicode.IsSpace) {
		return "has leading or trailing whitespace, which vCenter keeps as part of the name; remove it"
	}
	if strings.IndexFunc(vm, unicode.IsControl) >= 0 {
		return "contains a control character; write the VM's name as vCenter shows it"
	}
	if !strings.Contains(vm, "/") {
		return ""
	}
	if !strings.HasPrefix(vm, "/") {
		return "is a relative path; write the VM's name alone, or its absolute inventory path such as /" + dcPath(datacenter) + "/vm/gpu/worker-1 (a '/' inside a name is %2f)"
	}
	elems := strings.Split(vm[1:], "/")
	for _, e := range elems {
		if e == "" || e == "." || e == ".." {
			return "has an empty, '.' or '..' path element; write the absolute inventory path such as /" + dcPath(datacenter) + "/vm/gpu/worker-1"
		}
		if e != strings.TrimFunc(e, unicode.IsSpace) {
			return "has a path element with leading or trailing whitespace; remove it"
		}
	}
	prefix := "/" + dcPath(datacenter) + "/vm/"
	if !inVMFolder(elems, datacenter) {
		return fmt.Sprintf("is not inside the vm folder of datacenter %q; the operator finds VMs in spec.vcenter.datacenter only: write a path that starts with %s, or the VM's name alone", shown(datacenter), prefix)
	}
	return ""
}

// inVMFolder tells whether path elements name something below the datacenter's vm
// folder. A datacenter given by name may sit in folders (/Lab/DC0/vm/...); one given as
// a path must be the path's start.
func inVMFolder(elems []string, datacenter string) bool {
	dc := strings.Split(dcPath(datacenter), "/")
	if strings.Contains(dcPath(datacenter), "/") {
		return len(elems) > len(dc)+1 && strings.Join(elems[:len(dc)], "/") == strings.Join(dc, "/") && elems[len(dc)] == "vm"
	}
	for k := 0; k+2 < len(elems); k++ {
		if elems[k] == dc[0] && elems[k+1] == "vm" {
			return true
		}
	}
	return false
}

// dcPath is the datacenter's inventory path without the leading slash: its name, or the
// path when it is given as one (a datacenter in a folder).
func dcPath(datacenter string) string {
	return strings.Trim(datacenter, "/")
}

// vmKey identifies a VM given by name or inventory path. vCenter keeps VM names unique
// within a folder, and gpupool requires them unique within a datacenter, so the last
// path element identifies the VM.
func vmKey(vm string) string {
	return path.Base(strings.TrimSuffix(vm, "/"))
}
