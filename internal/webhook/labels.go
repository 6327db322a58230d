package webhook

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Node labels and taints are checked with apimachinery's own functions, the ones the API
// server applies to a Node, so that a layout that passes admission cannot fail at the
// relabel step in the middle of a transition. The property test dry-run-creates a Node
// with them on a real API server, so drift in these rules is caught.

// reservedKey says why a label or taint key must not be set by a layout, or "" when it
// may be. gpupool's own keys would be overwritten by gpupool (or fight with it); keys in
// the kubernetes.io and k8s.io namespaces belong to the kubelet, the node lifecycle
// controller and the cloud provider, which set and remove them on their own.
func reservedKey(key string) string {
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return ""
	}
	prefix = strings.ToLower(prefix)
	switch {
	case prefix == gpupoolv1.KeyPrefix:
		return fmt.Sprintf("is managed by gpupool itself (%s/pool, layout, vgpu-profile, vgpu-memory-mib and the parked label and taint); use a prefix of your own, such as example.com/%s", gpupoolv1.KeyPrefix, shown(key[strings.Index(key, "/")+1:]))
	case isInDomain(prefix, "kubernetes.io"), isInDomain(prefix, "k8s.io"):
		return "belongs to Kubernetes (the kubelet, the node lifecycle controller or the cloud provider set and remove it, for example kubernetes.io/hostname, node-role.kubernetes.io/*, node.kubernetes.io/*); use a prefix of your own, such as example.com/role"
	}
	return ""
}

func isInDomain(prefix, domain string) bool {
	return prefix == domain || strings.HasSuffix(prefix, "."+domain)
}

// validateNodeLabels checks a layout's nodeLabels as a Node's labels are checked.
func validateNodeLabels(p *field.Path, labels map[string]string) field.ErrorList {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs field.ErrorList
	for _, k := range keys {
		kp := p.Key(shown(k))
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, field.Invalid(kp, shown(k), "is not a valid label key: "+strings.Join(msgs, "; ")+
				"; write an optional DNS prefix and a name of at most 63 letters, digits, '-', '_' or '.', such as example.com/workload"))
		} else if why := reservedKey(k); why != "" {
			errs = append(errs, field.Invalid(kp, shown(k), "label key "+why))
		}
		v := labels[k]
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, field.Invalid(kp, shown(v), "is not a valid label value: "+strings.Join(msgs, "; ")+
				"; write at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, such as inference"))
		}
	}
	return errs
}

// taintEffects are the effects a Node's taint may have (core/v1 validation refuses an
// empty effect on a Node).
var taintEffects = []string{string(corev1.TaintEffectNoSchedule), string(corev1.TaintEffectPreferNoSchedule), string(corev1.TaintEffectNoExecute)}

// validateNodeTaints checks a layout's nodeTaints as a Node's taints are checked: a
// qualified key, a label-value value, a known effect, and one taint per key and effect.
func validateNodeTaints(p *field.Path, taints []corev1.Taint) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]int{}
	for i, t := range taints {
		tp := p.Index(i)
		switch {
		case t.Key == "":
			errs = append(errs, field.Required(tp.Child("key"), "a taint needs a key, such as example.com/training"))
		case len(validation.IsQualifiedName(t.Key)) > 0:
			errs = append(errs, field.Invalid(tp.Child("key"), shown(t.Key), "is not a valid taint key: "+strings.Join(validation.IsQualifiedName(t.Key), "; ")+
				"; write an optional DNS prefix and a name of at most 63 letters, digits, '-', '_' or '.', such as example.com/training"))
		default:
			if why := reservedKey(t.Key); why != "" {
				errs = append(errs, field.Invalid(tp.Child("key"), shown(t.Key), "taint key "+why))
			}
		}
		if t.Value != "" {
			if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
				errs = append(errs, field.Invalid(tp.Child("value"), shown(t.Value), "is not a valid taint value: "+strings.Join(msgs, "; ")+
					"; write at most 63 letters, digits, '-', '_' or '.', such as true"))
			}
		}
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		case "":
			errs = append(errs, field.Required(tp.Child("effect"), "a node taint needs an effect: NoSchedule, PreferNoSchedule or NoExecute"))
		default:
			errs = append(errs, field.NotSupported(tp.Child("effect"), shown(string(t.Effect)), taintEffects))
		}
		if t.TimeAdded != nil {
			errs = append(errs, field.Forbidden(tp.Child("timeAdded"), "is set by Kubernetes when the taint is added; remove it"))
		}
		k := t.Key + "\x00" + string(t.Effect)
		if j, dup := seen[k]; dup && t.Key != "" {
			errs = append(errs, field.Invalid(tp, fmt.Sprintf("%s:%s", shown(t.Key), t.Effect), fmt.Sprintf(
				"repeats the key and effect of nodeTaints[%d]; a node holds one taint per key and effect: remove one or give it another effect", j)))
			continue
		}
		seen[k] = i
	}
	return errs
}

// validateReadiness checks what a node must show before it counts as ready for work.
// Unlike a layout's nodeLabels, readiness labels are read, not set, so keys that other
// components set (feature.node.kubernetes.io/..., nvidia.com/...) are fine; the syntax
// of a Node's labels applies, so that a label that can never be on a node cannot be
// waited for. Keys gpupool itself sets are refused: gpupool relabels a node only after
// it is ready for work, so waiting for one of them (a gpupool.dev/ key, or a key some
// layout's nodeLabels set) would hold every power-on until nodeReadyTimeout.
func validateReadiness(p *field.Path, spec *gpupoolv1.GPUPoolProfileSpec) field.ErrorList {
	r := &spec.Readiness
	setBy := map[string]int{}
	for i := len(spec.Layouts) - 1; i >= 0; i-- {
		for k := range spec.Layouts[i].NodeLabels {
			setBy[k] = i
		}
	}
	keys := make([]string, 0, len(r.NodeLabels))
	for k := range r.NodeLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs field.ErrorList
	if r.GPUResource != nil {
		if why := extendedResourceProblem(*r.GPUResource); why != "" {
			errs = append(errs, field.Invalid(p.Child("gpuResource"), shown(*r.GPUResource), why))
		}
	}
	lp := p.Child("nodeLabels")
	for _, k := range keys {
		kp := lp.Key(shown(k))
		prefix, _, _ := strings.Cut(k, "/")
		li, byLayout := setBy[k]
		switch {
		case len(validation.IsQualifiedName(k)) > 0:
			errs = append(errs, field.Invalid(kp, shown(k), "is not a valid label key: "+strings.Join(validation.IsQualifiedName(k), "; ")+
				"; write the key the labelling component sets, such as nvidia.com/vgpu.present"))
		case strings.Contains(k, "/") && strings.EqualFold(prefix, gpupoolv1.KeyPrefix):
			errs = append(errs, field.Invalid(kp, shown(k), "is a label gpupool sets itself, after the node is ready for work: waiting for it would hold every power-on until nodeReadyTimeout; "+
				"name a label another component sets when the GPUs are usable, such as nvidia.com/vgpu.present"))
		case byLayout:
			errs = append(errs, field.Invalid(kp, shown(k), fmt.Sprintf("is set by gpupool from spec.layouts[%d].nodeLabels (layout %q), after the node is ready for work: waiting for it would hold every power-on until nodeReadyTimeout; "+
				"remove it here, or name a label another component sets, such as nvidia.com/vgpu.present", li, shown(spec.Layouts[li].Name))))
		case len(validation.IsValidLabelValue(r.NodeLabels[k])) > 0:
			errs = append(errs, field.Invalid(kp, shown(r.NodeLabels[k]), "is not a valid label value: "+strings.Join(validation.IsValidLabelValue(r.NodeLabels[k]), "; ")+"; write a value such as \"true\""))
		}
	}
	return errs
}

// extendedResourceProblem says why name cannot be the GPU resource a node advertises,
// "" when it can. It is Kubernetes' extended resource rule (IsExtendedResourceName in
// k8s.io/kubernetes, which cannot be imported): a qualified name with a domain prefix,
// the prefix not kubernetes.io or a subdomain of it (native resources: cpu, memory,
// pods, kubernetes.io/...), and not starting with "requests." (the quota form). A
// device plugin can register only such a name, so any other is never advertised.
func extendedResourceProblem(name string) string {
	const hint = `; write the extended resource the device plugin advertises, such as nvidia.com/gpu (or nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb), or "" to not wait for GPUs`
	prefix, _, found := strings.Cut(name, "/")
	switch {
	case name == "":
		return ""
	case len(validation.IsQualifiedName(name)) > 0:
		return "is not a resource name: " + strings.Join(validation.IsQualifiedName(name), "; ") + hint
	case !found:
		return "is not an extended resource: a name without a domain prefix is a native resource (cpu, memory, pods) or none, never a device plugin's" + hint
	case isInDomain(strings.ToLower(prefix), "kubernetes.io"):
		return "is not an extended resource: kubernetes.io and its subdomains name Kubernetes' native resources, never a device plugin's" + hint
	case strings.HasPrefix(name, "requests."):
		return `is not an extended resource: the "requests." prefix is the quota form of a resource name` + hint
	}
	return ""
}

// validateAccounting checks spec.accounting: the tenant label must be a label key, or no
// namespace could carry it and every pod would be its namespace's tenant, silently.
func validateAccounting(p *field.Path, a *gpupoolv1.AccountingSpec) field.ErrorList {
	if a == nil || a.TenantLabel == "" {
		return nil
	}
	if msgs := validation.IsQualifiedName(a.TenantLabel); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p.Child("tenantLabel"), shown(a.TenantLabel), "is not a valid label key: "+strings.Join(msgs, "; ")+
			"; write the key of the namespace label that names the tenant, such as example.com/team, or leave it out for the namespace as the tenant")}
	}
	return nil
}
