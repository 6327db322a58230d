package webhook

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// validateSelection checks a select layout's selector without vCenter or the Cluster
// API objects: at least one source, a profile, a glob that can match a VM name, a folder
// inside the datacenter's vm folder, a MachineDeployment's namespace and name. Which VMs
// it matches is the pass's to find (docs/api.md#selected-workers).
func validateSelection(sp *field.Path, spec *gpupoolv1.GPUPoolProfileSpec, sel *gpupoolv1.Selection) field.ErrorList {
	errs := validateSources(sp, spec, &sel.VMSelector)
	return append(errs, checkProfileAndVGPUs(sp, sel.Profile, sel.VGPUs, "selected VM")...)
}

// validateSources checks a selector's sources (select, convert.candidatesFrom): at
// least one, each as validateSelection says.
func validateSources(sp *field.Path, spec *gpupoolv1.GPUPoolProfileSpec, sel *gpupoolv1.VMSelector) field.ErrorList {
	var errs field.ErrorList
	if sel.NamePattern == "" && sel.Folder == "" && sel.Tag == nil && sel.MachineDeployment == nil {
		errs = append(errs, field.Required(sp, sp.String()+" needs at least one source: namePattern (such as gpu-day-*), folder (a path in the datacenter's vm folder, such as gpu/day), tag (a vSphere tag: category and name) or machineDeployment (namespace, name)"))
	}
	if p := sel.NamePattern; p != "" {
		pp := sp.Child("namePattern")
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, field.Invalid(pp, shown(p), fmt.Sprintf("is not a glob (%v); write one such as gpu-day-* (*, ?, [a-z]; a [ needs its ])", err)))
		} else if strings.Contains(p, "/") {
			errs = append(errs, field.Invalid(pp, shown(p), fmt.Sprintf(
				"matches VM names, which hold no '/'; to select the VMs of a folder write folder: %q, and the name's glob in namePattern: %q",
				strings.Trim(path.Dir(p), "/"), path.Base(p))))
		} else if strings.TrimSpace(p) != p {
			errs = append(errs, field.Invalid(pp, shown(p), fmt.Sprintf("has whitespace around it (such as a pasted newline); write %q", strings.TrimSpace(p))))
		}
	}
	if f := sel.Folder; f != "" {
		errs = append(errs, validateSelectFolder(sp.Child("folder"), f, spec.VCenter.Datacenter)...)
	}
	if t := sel.Tag; t != nil {
		tp := sp.Child("tag")
		errs = append(errs, validateTagName(tp.Child("category"), t.Category, "category")...)
		errs = append(errs, validateTagName(tp.Child("name"), t.Name, "tag")...)
	}
	if md := sel.MachineDeployment; md != nil {
		mp := sp.Child("machineDeployment")
		if msgs := validation.IsDNS1123Label(md.Namespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(mp.Child("namespace"), shown(md.Namespace), "is not a namespace name: "+strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsDNS1123Subdomain(md.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(mp.Child("name"), shown(md.Name), "is not a MachineDeployment name: "+strings.Join(msgs, "; ")))
		}
	}
	return errs
}

// validateTagName checks a tag's or category's name as vCenter takes it: not empty (the
// CRD's minLength says so too, but the webhook also serves a spec the CRD did not see)
// and without whitespace around it, which vCenter would keep and then match nothing.
func validateTagName(fp *field.Path, name, what string) field.ErrorList {
	switch {
	case strings.TrimSpace(name) == "":
		return field.ErrorList{field.Required(fp, fmt.Sprintf("the %s's name is required, as vCenter shows it (Tags & Custom Attributes)", what))}
	case strings.TrimSpace(name) != name:
		return field.ErrorList{field.Invalid(fp, shown(name), fmt.Sprintf("has whitespace around it (such as a pasted newline); write %q", strings.TrimSpace(name)))}
	}
	return nil
}

// validateSelectFolder checks a folder of the datacenter's vm folder: relative to it
// (gpu/day), or its inventory path (/dc1/vm/gpu/day).
func validateSelectFolder(fp *field.Path, f, dc string) field.ErrorList {
	rel := f
	if strings.HasPrefix(f, "/") {
		prefix := "/" + strings.Trim(dc, "/") + "/vm/"
		if !strings.HasPrefix(f, prefix) || len(f) == len(prefix) {
			return field.ErrorList{field.Invalid(fp, shown(f), fmt.Sprintf(
				"is not a folder in datacenter %s's vm folder; write it relative to the vm folder, such as gpu/day, or as %sgpu/day", dc, prefix))}
		}
		rel = strings.TrimPrefix(f, prefix)
	}
	rel = strings.TrimSuffix(rel, "/")
	for _, part := range strings.Split(rel, "/") {
		if part == "" || part == "." || part == ".." || strings.TrimSpace(part) != part {
			return field.ErrorList{field.Invalid(fp, shown(f), fmt.Sprintf(
				"is not a clean folder path (empty, . or .. parts, or whitespace); write it such as %q", strings.Trim(path.Clean("/"+strings.TrimSpace(rel)), "/")))}
		}
	}
	return nil
}
