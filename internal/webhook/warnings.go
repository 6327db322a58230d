package webhook

import (
	"fmt"
	"strings"
	"time"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/drain"
)

// Warnings are what admission lets through but tells the user about (kubectl prints
// them). They describe what the operator will actually do.
func Warnings(spec *gpupoolv1.GPUPoolProfileSpec, now time.Time) []string {
	warns := tlsWarnings(&spec.VCenter)
	warns = append(warns, caseDuplicateWarnings(spec)...)
	warns = append(warns, demandWarnings(spec)...)
	warns = append(warns, gpuReplicasWarnings(spec)...)
	warns = append(warns, maxHoldWarnings(spec.Drain)...)
	return append(warns, scheduleWarnings(spec, now)...)
}

// maxHoldWarnings: a pod evicted at drain.maxHold is then waited for its grace period
// plus a minute; when drain.gracePeriodSeconds makes that run past drain.timeout, the
// hold that maxHold bounds still ends in onTimeout.
func maxHoldWarnings(d gpupoolv1.DrainSpec) []string {
	if d.MaxHold == nil || d.GracePeriodSeconds == nil {
		return nil
	}
	timeout := 10 * time.Minute
	if d.Timeout != nil {
		timeout = d.Timeout.Duration
	}
	grace := time.Duration(*d.GracePeriodSeconds) * time.Second
	left := timeout - d.MaxHold.Duration
	if d.MaxHold.Duration >= timeout || left >= grace+drain.TerminatingMargin {
		return nil // the first is refused; the second is fine
	}
	return []string{fmt.Sprintf("spec.drain.maxHold (%s) leaves %s of drain.timeout (%s) to the pods it evicts, less than their grace period (drain.gracePeriodSeconds: %d) plus the minute a terminating pod is waited for: a held pod still runs the drain into its timeout; write a maxHold of at most %s",
		d.MaxHold.Duration, left, timeout, *d.GracePeriodSeconds, timeout-grace-drain.TerminatingMargin)}
}

// tlsWarnings follow vsphere's tlsConfig: a thumbprint pins the certificate and wins over
// everything, then a CA bundle, then insecure; so insecure next to either has no effect.
func tlsWarnings(vc *gpupoolv1.VCenterSpec) []string {
	var warns []string
	switch {
	case vc.Insecure && vc.Thumbprint != "":
		warns = append(warns, "spec.vcenter.insecure is true but has no effect: spec.vcenter.thumbprint is set, and gpupool pins the vCenter certificate to it (a certificate with another thumbprint is refused); remove insecure")
	case vc.Insecure && len(vc.CABundle) > 0:
		warns = append(warns, "spec.vcenter.insecure is true but has no effect: spec.vcenter.caBundle is set, and gpupool verifies the vCenter certificate against it; remove insecure")
	case vc.Insecure:
		warns = append(warns, "spec.vcenter.insecure is true: the vCenter certificate is not verified at all, so whoever is on the network path can read the vCenter password; set thumbprint (govc about.cert -thumbprint) or caBundle and remove insecure")
	}
	if vc.Thumbprint != "" && len(vc.CABundle) > 0 {
		warns = append(warns, "spec.vcenter.caBundle is not used: spec.vcenter.thumbprint is set and takes precedence (the certificate is pinned, not verified against the CA); remove one of them")
	}
	return warns
}

// caseDuplicateWarnings name VMs of one layout whose names differ only in case. gpupool
// compares VM names exactly, as the vSphere API does, so they are two VMs; in one layout
// that is most likely a typo, but two such VMs can exist, so it is a warning.
func caseDuplicateWarnings(spec *gpupoolv1.GPUPoolProfileSpec) []string {
	var warns []string
	for i, l := range spec.Layouts {
		seen := map[string]int{}
		for j, w := range l.Workers {
			key := strings.ToLower(vmKey(w.VM))
			if k, dup := seen[key]; dup && vmKey(l.Workers[k].VM) != vmKey(w.VM) {
				warns = append(warns, fmt.Sprintf("spec.layouts[%d].workers[%d].vm %q differs from workers[%d].vm %q only in case: gpupool compares names exactly and treats them as two VMs; if you meant one VM, remove one", i, j, shown(w.VM), k, shown(l.Workers[k].VM)))
				continue
			}
			seen[key] = j
		}
	}
	return warns
}

// gpuReplicasWarnings name the layouts whose gpuReplicas nothing waits for: with
// readiness.gpuResource "" gpupool does not look at the GPUs a node advertises.
func gpuReplicasWarnings(spec *gpupoolv1.GPUPoolProfileSpec) []string {
	if r := spec.Readiness.GPUResource; r == nil || *r != "" {
		return nil
	}
	var warns []string
	for i, l := range spec.Layouts {
		if l.GPUReplicas != nil {
			warns = append(warns, fmt.Sprintf("spec.layouts[%d].gpuReplicas has no effect: spec.readiness.gpuResource is \"\", so gpupool does not wait for the GPUs a node advertises; set gpuResource to what the device plugin advertises (such as nvidia.com/gpu) or remove gpuReplicas", i))
		}
	}
	return warns
}
