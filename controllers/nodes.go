package controllers

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// nodeMeta is the labels and taints a node should carry.
type nodeMeta struct {
	Labels map[string]string
	Taints []corev1.Taint
}

// activeMeta is what a node of a running worker of layout l carries.
func activeMeta(pool string, l *gpupoolv1.Layout, profile string, memMiB int64) nodeMeta {
	m := nodeMeta{Labels: map[string]string{
		LabelPool:      pool,
		LabelLayout:    l.Name,
		LabelProfile:   profile,
		LabelMemoryMiB: strconv.FormatInt(memMiB, 10),
	}}
	for k, v := range l.NodeLabels {
		m.Labels[k] = v
	}
	m.Taints = append(m.Taints, l.NodeTaints...)
	return m
}

// parkedMeta is what the node of a parked VM carries: schedulers and people can see
// that it is parked on purpose, and nothing lands on it if it comes back unexpectedly.
func parkedMeta(pool string) nodeMeta {
	return nodeMeta{
		Labels: map[string]string{LabelPool: pool, LabelParked: "true"},
		Taints: []corev1.Taint{{Key: TaintParked, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
	}
}

func taintID(t corev1.Taint) string { return t.Key + ":" + string(t.Effect) }

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// hasMeta tells whether the node carries exactly m as far as gpupool manages it: every
// wanted label and taint, and none that gpupool set before and no longer wants.
func hasMeta(n *corev1.Node, m nodeMeta) bool {
	for k, v := range m.Labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	for _, k := range splitList(n.Annotations[AnnotationManagedLabels]) {
		if _, want := m.Labels[k]; !want {
			if _, has := n.Labels[k]; has {
				return false
			}
		}
	}
	wantTaints := map[string]corev1.Taint{}
	for _, t := range m.Taints {
		wantTaints[taintID(t)] = t
	}
	have := map[string]corev1.Taint{}
	for _, t := range n.Spec.Taints {
		have[taintID(t)] = t
	}
	for id, t := range wantTaints {
		if got, ok := have[id]; !ok || got.Value != t.Value {
			return false
		}
	}
	for _, id := range splitList(n.Annotations[AnnotationManagedTaints]) {
		if _, want := wantTaints[id]; !want {
			if _, has := have[id]; has {
				return false
			}
		}
	}
	return true
}

// applyMeta makes the node carry m: it removes what gpupool set before and no longer
// wants, sets m, and records what it manages. Labels and taints that gpupool did not set
// are left alone, unless m sets the same key.
func applyMeta(n *corev1.Node, m nodeMeta) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for _, k := range splitList(n.Annotations[AnnotationManagedLabels]) {
		if _, want := m.Labels[k]; !want {
			delete(n.Labels, k)
		}
	}
	keys := make([]string, 0, len(m.Labels))
	for k, v := range m.Labels {
		n.Labels[k] = v
		keys = append(keys, k)
	}
	sort.Strings(keys)

	want := map[string]corev1.Taint{}
	ids := make([]string, 0, len(m.Taints))
	for _, t := range m.Taints {
		want[taintID(t)] = t
		ids = append(ids, taintID(t))
	}
	sort.Strings(ids)
	oldManaged := splitList(n.Annotations[AnnotationManagedTaints])
	taints := n.Spec.Taints[:0:0]
	for _, t := range n.Spec.Taints {
		id := taintID(t)
		if _, ok := want[id]; ok {
			continue // replaced below
		}
		if slices.Contains(oldManaged, id) {
			continue // ours, no longer wanted
		}
		taints = append(taints, t)
	}
	for _, id := range ids {
		taints = append(taints, want[id])
	}
	n.Spec.Taints = taints
	setOrDelete(n.Annotations, AnnotationManagedLabels, strings.Join(keys, ","))
	setOrDelete(n.Annotations, AnnotationManagedTaints, strings.Join(ids, ","))
}

// setManagedLabel sets one label and records it as gpupool's.
func setManagedLabel(n *corev1.Node, k, v string) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Labels[k] = v
	keys := splitList(n.Annotations[AnnotationManagedLabels])
	if !slices.Contains(keys, k) {
		keys = append(keys, k)
		sort.Strings(keys)
	}
	n.Annotations[AnnotationManagedLabels] = strings.Join(keys, ",")
}

// removeMeta removes everything gpupool put on the node, uncordoning it if gpupool
// cordoned it. It is what deleting a pool does.
func removeMeta(n *corev1.Node) {
	applyMeta(n, nodeMeta{})
	stripMarks(n)
	if _, ours := n.Annotations[AnnotationCordoned]; ours {
		n.Spec.Unschedulable = false
	}
	delete(n.Annotations, AnnotationCordoned)
}

// cordon marks the node unschedulable. It remembers on the node whether gpupool did it,
// so that a node an admin had cordoned stays cordoned afterwards.
func cordon(n *corev1.Node) {
	if n.Spec.Unschedulable {
		return
	}
	n.Spec.Unschedulable = true
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[AnnotationCordoned] = "true"
}

// cordonedByUs tells whether the node is cordoned because gpupool cordoned it.
func cordonedByUs(n *corev1.Node) bool {
	_, ours := n.Annotations[AnnotationCordoned]
	return n.Spec.Unschedulable && ours
}

// uncordon undoes gpupool's own cordon, and only that.
func uncordon(n *corev1.Node) {
	if cordonedByUs(n) {
		n.Spec.Unschedulable = false
	}
	delete(n.Annotations, AnnotationCordoned)
}

func setOrDelete(m map[string]string, k, v string) {
	if v == "" {
		delete(m, k)
		return
	}
	m[k] = v
}

// nodeReady tells whether the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
