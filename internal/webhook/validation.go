// Package webhook serves the GPUPoolProfile validating webhook. It checks what the CRD's
// OpenAPI schema and CEL rules cannot express: cron expressions, IANA time zones, node
// labels and taints as a Node's are checked, the vCenter server, VM paths and names, and
// VMs and Kueue ResourceFlavors claimed by another GPUPoolProfile. Every refusal names the
// field (with its index), quotes the value (cut when long) and says what to write instead.
package webhook

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/vcenter"
)

// ValidateSpec checks a spec on its own, without looking at other objects. It is pure so
// that the planner's assumptions (everything here holds) can be unit-tested.
func ValidateSpec(spec *gpupoolv1.GPUPoolProfileSpec) field.ErrorList {
	specPath := field.NewPath("spec")
	errs := validateVCenter(specPath.Child("vcenter"), &spec.VCenter)

	layouts := map[string]bool{}
	for i := range spec.Layouts {
		l := &spec.Layouts[i]
		lp := specPath.Child("layouts").Index(i)
		if layouts[l.Name] {
			errs = append(errs, field.Duplicate(lp.Child("name"), l.Name))
		}
		layouts[l.Name] = true
		errs = append(errs, validateLayoutShape(lp, spec, l)...)
		errs = append(errs, validateWorkers(lp, l, spec.VCenter.Datacenter)...)
		errs = append(errs, validateGPUReplicas(lp, l)...)
		errs = append(errs, validateNodeLabels(lp.Child("nodeLabels"), l.NodeLabels)...)
		errs = append(errs, validateNodeTaints(lp.Child("nodeTaints"), l.NodeTaints)...)
	}
	errs = append(errs, validateWorkerNodes(specPath, spec)...)

	known := func(p *field.Path, name string) *field.Error {
		if layouts[name] {
			return nil
		}
		return field.Invalid(p, shown(name), fmt.Sprintf("names no layout; the layouts are %s: write one of them, or add a layout named %q to spec.layouts",
			quoteList(names(spec.Layouts)), shown(name)))
	}
	if e := known(specPath.Child("defaultLayout"), spec.DefaultLayout); e != nil {
		errs = append(errs, e)
	}
	if o := spec.Override; o != nil {
		if e := known(specPath.Child("override", "layout"), o.Layout); e != nil {
			errs = append(errs, e)
		}
	}
	if s := spec.Schedule; s != nil {
		errs = append(errs, validateSchedule(specPath.Child("schedule"), s, known)...)
	}
	if d := spec.Demand; d != nil {
		errs = append(errs, validateDemand(specPath.Child("demand"), d, known)...)
		errs = append(errs, validateCountFromDemand(specPath.Child("demand"), spec)...)
	}
	if k := spec.Kueue; k != nil {
		errs = append(errs, validateKueue(specPath.Child("kueue"), k, known)...)
	}
	errs = append(errs, validateReadiness(specPath.Child("readiness"), spec)...)
	errs = append(errs, validateAccounting(specPath.Child("accounting"), spec.Accounting)...)
	if d := spec.Drain.Timeout; d != nil && d.Duration <= 0 {
		errs = append(errs, field.Invalid(specPath.Child("drain", "timeout"), d.Duration.String(), "must be a positive duration such as 10m"))
	}
	errs = append(errs, validateMaxHold(specPath.Child("drain"), spec.Drain)...)
	if d := spec.NodeReadyTimeout; d != nil && d.Duration <= 0 {
		errs = append(errs, field.Invalid(specPath.Child("nodeReadyTimeout"), d.Duration.String(), "must be a positive duration such as 10m"))
	}
	return errs
}

// validateMaxHold checks drain.maxHold against drain.timeout, as the CRD's CEL rule
// does, for clients that reach the webhook with an older CRD: held pods are evicted at
// maxHold, and must then leave within the timeout that bounds the whole drain.
func validateMaxHold(path *field.Path, d gpupoolv1.DrainSpec) field.ErrorList {
	if d.MaxHold == nil {
		return nil
	}
	hold := d.MaxHold.Duration
	if hold < 0 {
		return field.ErrorList{field.Invalid(path.Child("maxHold"), hold.String(), "must be zero (holds never honoured) or positive, such as 5m: remove the minus sign")}
	}
	timeout := 10 * time.Minute
	if d.Timeout != nil {
		timeout = d.Timeout.Duration
	}
	if hold >= timeout {
		return field.ErrorList{field.Invalid(path.Child("maxHold"), hold.String(), fmt.Sprintf(
			"must be shorter than drain.timeout (%s), which bounds the whole drain: write a maxHold below %s (such as %s, leaving the evicted pods their grace period), or raise drain.timeout above %s",
			timeout, timeout, timeout/2, hold))}
	}
	return nil
}

// ValidateName checks what gpupool writes of the object's name: the pool name is the
// value of the gpupool.dev/pool label on every node of the pool, so it must be a valid
// label value (at most 63 characters). The CRD's CEL rule says the same; this is for
// clients that reach the webhook with an older CRD.
func ValidateName(name string) field.ErrorList {
	if msgs := validation.IsValidLabelValue(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), shown(name), fmt.Sprintf(
			"is written into the node label gpupool.dev/pool, whose value must be at most 63 characters (this name has %d); choose a shorter name", len(name)))}
	}
	return nil
}

// ValidateClaims rejects VMs of spec that another GPUPoolProfile on the same vCenter and
// datacenter already lists: two pools driving one VM would fight over it. Servers are
// compared normalized (vcenter.NormalizeServer), so "https://VC01.example:443/sdk/" and
// "vc01.example" are one vCenter.
func ValidateClaims(name string, spec *gpupoolv1.GPUPoolProfileSpec, others []gpupoolv1.GPUPoolProfile) field.ErrorList {
	return validateClaims(name, spec, others, nil)
}

// validateClaims is ValidateClaims without the VMs in skip (by vmKey).
func validateClaims(name string, spec *gpupoolv1.GPUPoolProfileSpec, others []gpupoolv1.GPUPoolProfile, skip map[string]bool) field.ErrorList {
	claimed := map[string]string{}
	for i := range others {
		o := &others[i]
		if o.Name == name || !sameDatacenter(&o.Spec.VCenter, &spec.VCenter) {
			continue
		}
		for _, l := range o.Spec.Layouts {
			for _, w := range l.Workers {
				claimed[vmKey(w.VM)] = o.Name
			}
			if l.Convert != nil {
				for _, cd := range l.Convert.Candidates {
					claimed[vmKey(cd.VM)] = o.Name
				}
			}
		}
	}
	var errs field.ErrorList
	reported := map[string]bool{}
	for i, l := range spec.Layouts {
		for j, w := range l.Workers {
			key := vmKey(w.VM)
			owner, taken := claimed[key]
			if !taken || reported[key] || skip[key] {
				continue
			}
			reported[key] = true
			p := field.NewPath("spec", "layouts").Index(i).Child("workers").Index(j).Child("vm")
			errs = append(errs, field.Invalid(p, shown(w.VM), fmt.Sprintf(
				"VM is already claimed by GPUPoolProfile %q on the same vCenter and datacenter; a VM can belong to one pool only: remove it from one of them", owner)))
		}
		if l.Convert == nil {
			continue
		}
		for j, cd := range l.Convert.Candidates {
			key := vmKey(cd.VM)
			owner, taken := claimed[key]
			if !taken || reported[key] || skip[key] {
				continue
			}
			reported[key] = true
			p := field.NewPath("spec", "layouts").Index(i).Child("convert", "candidates").Index(j).Child("vm")
			errs = append(errs, field.Invalid(p, shown(cd.VM), fmt.Sprintf(
				"VM is already claimed by GPUPoolProfile %q on the same vCenter and datacenter; a VM can belong to one pool only: remove it from one of them", owner)))
		}
	}
	return errs
}

func sameDatacenter(a, b *gpupoolv1.VCenterSpec) bool {
	return vcenter.SameServer(a.Server, b.Server) && dcPath(a.Datacenter) == dcPath(b.Datacenter)
}

// checkPEM makes sure a CA bundle holds at least one certificate, so that a pasted key or
// a truncated file is caught at admission rather than at the first TLS handshake.
func checkPEM(b []byte) error {
	found := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return fmt.Errorf("holds a PEM block of type %q; put only CA certificates (BEGIN CERTIFICATE) here", shown(blk.Type))
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			return fmt.Errorf("holds a certificate that does not parse (%w); paste the PEM of the CA that signed the vCenter certificate", err)
		}
		found++
	}
	if found == 0 {
		return fmt.Errorf("holds no PEM certificate; paste the PEM of the CA that signed the vCenter certificate")
	}
	return nil
}

func names(ls []gpupoolv1.Layout) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}
