package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
)

// describeKueue prints what the pool holds in Kueue (spec.kueue, docs/kueue.md): the
// Workloads gpupool's AdmissionCheck held on its last pass, and per flavor the layout
// that serves it and the quota gpupool sets, from the pool alone (status.kueue and the
// decision the operator applies, controllers.FlavorQuota): a gpupool-viewer may not
// read Kueue's objects.
func describeKueue(out io.Writer, p *gpupoolv1.GPUPoolProfile, sc screen) {
	ks, st := p.Spec.Kueue, p.Status.Kueue
	if ks == nil && st == nil {
		return
	}
	fmt.Fprintln(out, "\nKueue:")
	if ks == nil {
		fmt.Fprintln(out, "  spec.kueue was removed: gpupool releases the admission checks the pool held, then forgets Kueue")
		return
	}
	held := int32(0)
	if st != nil {
		held = st.HeldWorkloads
	}
	fmt.Fprintf(out, "  Held Workloads: %d (gpupool's AdmissionCheck %s keeps them Pending until their flavor's layout is ready for work)\n",
		held, gpupoolv1.KueueAdmissionCheckController)
	fmt.Fprintf(out, "  Quota in the ClusterQueues labelled %s=%s:\n", gpupoolv1.LabelKueuePool, p.Name)
	if p.Spec.Paused {
		fmt.Fprintf(out, "  (paused: gpupool changes no quota and no check until kubectl gpupool unpause %s; below is what it would set)\n", p.Name)
	}
	tw := table(out)
	fmt.Fprintln(tw, "  FLAVOR\tLAYOUT\tQUOTA NOW\tNEXT CHANGE")
	for i := range ks.Flavors {
		f := &ks.Flavors[i]
		now, at := controllers.FlavorQuota(p, f, sc.now)
		next := "-"
		switch {
		case !at.IsZero():
			next = fmt.Sprintf("%s at %s (warnAhead before layout %s is left)", quotaText(waitingQuota(f)), sc.at(at), f.Layout)
		case sameQuota(now, f.Quota):
		case serving(p, f.Layout):
			// Active and ready, but within warnAhead of a switch away: no new work
			// onto nodes about to be drained.
			next = fmt.Sprintf("%s on layout %s's next turn (a switch away from it is due)", quotaText(f.Quota), f.Layout)
		default:
			next = fmt.Sprintf("%s once layout %s is active and ready for work", quotaText(f.Quota), f.Layout)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", f.Name, f.Layout, quotaText(now), next)
	}
	_ = tw.Flush()
}

// serving says whether the layout is active with no transition running (one aborted
// keeps it serving), as the operator decides a flavor's full quota (controllers'
// layoutReady).
func serving(p *gpupoolv1.GPUPoolProfile, layout string) bool {
	t := p.Status.Transition
	return p.Status.ActiveLayout == layout && (t == nil || t.AbortedTime != nil)
}

// waitingQuota is a flavor's waitingQuota over the resources of its quota, 0 for one not
// listed, as the operator sets it.
func waitingQuota(f *gpupoolv1.KueueFlavor) corev1.ResourceList {
	w := corev1.ResourceList{}
	for r := range f.Quota {
		w[r] = f.WaitingQuota[r]
	}
	return w
}

// sameQuota says whether two quotas name the same resources in the same amounts.
func sameQuota(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for r, q := range a {
		if o, ok := b[r]; !ok || o.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// quotaText writes a quota as "nvidia.com/gpu=4", resources sorted.
func quotaText(l corev1.ResourceList) string {
	var parts []string
	for r, q := range l {
		parts = append(parts, fmt.Sprintf("%s=%s", r, q.String()))
	}
	slices.Sort(parts)
	return or(strings.Join(parts, ", "), "-")
}
