// Package webhook serves the GPUPoolProfile validating webhook. It checks what the CRD's
// OpenAPI schema and CEL rules cannot express: cron expressions, IANA time zones, and
// VMs claimed by another GPUPoolProfile.
package webhook

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/cronspec"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/vsphere"
)

// ValidateSpec checks a spec on its own, without looking at other objects. It is pure so
// that the planner's assumptions (everything here holds) can be unit-tested.
func ValidateSpec(spec *gpupoolv1.GPUPoolProfileSpec) field.ErrorList {
	var errs field.ErrorList
	specPath := field.NewPath("spec")

	layouts := map[string]bool{}
	for i, l := range spec.Layouts {
		lp := specPath.Child("layouts").Index(i)
		if layouts[l.Name] {
			errs = append(errs, field.Duplicate(lp.Child("name"), l.Name))
		}
		layouts[l.Name] = true
		seen := map[string]int{}
		for j, w := range l.Workers {
			wp := lp.Child("workers").Index(j)
			key := vmKey(w.VM)
			if k, dup := seen[key]; dup {
				errs = append(errs, field.Invalid(wp.Child("vm"), w.VM,
					fmt.Sprintf("VM is already listed in layout %q as workers[%d]; list each VM once per layout", l.Name, k)))
				continue
			}
			seen[key] = j
			if _, err := inventory.ProfileFrameBufferMiB(w.Profile); err != nil {
				errs = append(errs, field.Invalid(wp.Child("profile"), w.Profile, err.Error()))
			}
		}
	}

	if b := spec.VCenter.CABundle; len(b) > 0 {
		if err := checkPEM(b); err != nil {
			errs = append(errs, field.Invalid(specPath.Child("vcenter", "caBundle"), "<PEM data>", err.Error()))
		}
	}

	known := func(p *field.Path, name string) {
		if !layouts[name] {
			errs = append(errs, field.NotFound(p, fmt.Sprintf("%s (layouts are: %s; add the layout or fix the name)", name, strings.Join(names(spec.Layouts), ", "))))
		}
	}
	known(specPath.Child("defaultLayout"), spec.DefaultLayout)
	if o := spec.Override; o != nil {
		known(specPath.Child("override", "layout"), o.Layout)
	}

	if s := spec.Schedule; s != nil {
		sp := specPath.Child("schedule")
		if s.TimeZone != "" {
			if _, err := time.LoadLocation(s.TimeZone); err != nil || s.TimeZone == "Local" {
				errs = append(errs, field.Invalid(sp.Child("timeZone"), s.TimeZone,
					"not a known IANA time zone; use a name such as UTC, Europe/Berlin or America/New_York"))
			}
		}
		if s.LeadTime != nil && s.LeadTime.Duration < 0 {
			errs = append(errs, field.Invalid(sp.Child("leadTime"), s.LeadTime.Duration.String(), "must not be negative"))
		}
		for i, w := range s.Windows {
			wp := sp.Child("windows").Index(i)
			known(wp.Child("layout"), w.Layout)
			if _, err := cronspec.Parse(w.Start); err != nil {
				errs = append(errs, field.Invalid(wp.Child("start"), w.Start, err.Error()))
			}
			if w.Duration.Duration <= 0 {
				errs = append(errs, field.Invalid(wp.Child("duration"), w.Duration.Duration.String(), "must be positive, such as 12h"))
			}
		}
	}
	if d := spec.Drain.Timeout; d != nil && d.Duration <= 0 {
		errs = append(errs, field.Invalid(specPath.Child("drain", "timeout"), d.Duration.String(), "must be a positive duration such as 10m"))
	}
	if d := spec.NodeReadyTimeout; d != nil && d.Duration <= 0 {
		errs = append(errs, field.Invalid(specPath.Child("nodeReadyTimeout"), d.Duration.String(), "must be a positive duration such as 10m"))
	}
	return errs
}

// ValidateClaims rejects VMs of spec that another GPUPoolProfile on the same vCenter and
// datacenter already lists: two pools driving one VM would fight over it.
func ValidateClaims(name string, spec *gpupoolv1.GPUPoolProfileSpec, others []gpupoolv1.GPUPoolProfile) field.ErrorList {
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
		}
	}
	var errs field.ErrorList
	reported := map[string]bool{}
	for i, l := range spec.Layouts {
		for j, w := range l.Workers {
			key := vmKey(w.VM)
			owner, taken := claimed[key]
			if !taken || reported[key] {
				continue
			}
			reported[key] = true
			p := field.NewPath("spec", "layouts").Index(i).Child("workers").Index(j).Child("vm")
			errs = append(errs, field.Invalid(p, w.VM, fmt.Sprintf(
				"VM is already claimed by GPUPoolProfile %q on the same vCenter; a VM can belong to one pool only: remove it from one of them", owner)))
		}
	}
	return errs
}

// vmKey identifies a VM given by name or inventory path. vCenter keeps VM names unique
// within a folder, and gpupool requires them unique within a datacenter, so the last
// path element identifies the VM.
func vmKey(vm string) string {
	return path.Base(strings.TrimSuffix(vm, "/"))
}

func sameDatacenter(a, b *gpupoolv1.VCenterSpec) bool {
	return vsphere.CanonicalServer(a.Server) == vsphere.CanonicalServer(b.Server) && a.Datacenter == b.Datacenter
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
			return fmt.Errorf("holds a PEM block of type %q; put only CA certificates (BEGIN CERTIFICATE) here", blk.Type)
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
