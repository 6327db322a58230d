package nodes

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Meta is the labels and taints a node should carry, as far as gpupool manages them.
type Meta struct {
	Labels map[string]string
	Taints []corev1.Taint
}

// ActiveMeta is what the node of a running worker of layout l carries: the pool, the
// layout, the vGPU profile and its frame buffer, then the layout's own labels and taints.
func ActiveMeta(pool string, l *gpupoolv1.Layout, profile string, memMiB int64) Meta {
	m := Meta{Labels: map[string]string{
		gpupoolv1.LabelPool:      pool,
		gpupoolv1.LabelLayout:    l.Name,
		gpupoolv1.LabelProfile:   profile,
		gpupoolv1.LabelMemoryMiB: strconv.FormatInt(memMiB, 10),
	}}
	for k, v := range l.NodeLabels {
		m.Labels[k] = v
	}
	m.Taints = append(m.Taints, l.NodeTaints...)
	return m
}

// ParkedMeta is what the node of a parked VM carries: schedulers and people can see
// that it is parked on purpose, and nothing lands on it if it comes back unexpectedly.
func ParkedMeta(pool string) Meta {
	return Meta{
		Labels: map[string]string{gpupoolv1.LabelPool: pool, gpupoolv1.LabelParked: "true"},
		Taints: []corev1.Taint{{Key: gpupoolv1.TaintParked, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
	}
}

func taintID(t corev1.Taint) string { return t.Key + ":" + string(t.Effect) }

// SplitList splits the value of a comma-separated list annotation (the keys and taints
// gpupool manages on a node, the Cluster API annotations it added); "" is no items.
func SplitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// HasMeta tells whether the node carries exactly m as far as gpupool manages it: every
// wanted label and taint, and none that gpupool set before and no longer wants. It lets
// the reconciler skip a patch (and a write from the pass's budget) that would change
// nothing.
func HasMeta(n *corev1.Node, m Meta) bool {
	for k, v := range m.Labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	for _, k := range SplitList(n.Annotations[gpupoolv1.AnnotationManagedLabels]) {
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
	for _, id := range SplitList(n.Annotations[gpupoolv1.AnnotationManagedTaints]) {
		if _, want := wantTaints[id]; !want {
			if _, has := have[id]; has {
				return false
			}
		}
	}
	return true
}

// ApplyMeta makes the node carry m: it removes what gpupool set before and no longer
// wants, sets m, and records what it manages (AnnotationManagedLabels,
// AnnotationManagedTaints), so that the next layout's labels replace this one's and
// nothing else. Labels and taints that gpupool did not set are left alone, unless m sets
// the same key.
func ApplyMeta(n *corev1.Node, m Meta) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for _, k := range SplitList(n.Annotations[gpupoolv1.AnnotationManagedLabels]) {
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
	oldManaged := SplitList(n.Annotations[gpupoolv1.AnnotationManagedTaints])
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
	SetOrDelete(n.Annotations, gpupoolv1.AnnotationManagedLabels, strings.Join(keys, ","))
	SetOrDelete(n.Annotations, gpupoolv1.AnnotationManagedTaints, strings.Join(ids, ","))
}

// SetManagedLabel sets one label and records it as gpupool's, so that removing the
// pool's marks later removes it too.
func SetManagedLabel(n *corev1.Node, k, v string) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Labels[k] = v
	keys := SplitList(n.Annotations[gpupoolv1.AnnotationManagedLabels])
	if !slices.Contains(keys, k) {
		keys = append(keys, k)
		sort.Strings(keys)
	}
	n.Annotations[gpupoolv1.AnnotationManagedLabels] = strings.Join(keys, ",")
}

// RemoveMeta removes everything gpupool put on the node, uncordoning it if gpupool
// cordoned it. It is what releasing a node (its VM left the spec, the pool is deleted)
// does.
func RemoveMeta(n *corev1.Node) {
	ApplyMeta(n, Meta{})
	StripMarks(n)
	if _, ours := n.Annotations[gpupoolv1.AnnotationCordoned]; ours {
		n.Spec.Unschedulable = false
	}
	delete(n.Annotations, gpupoolv1.AnnotationCordoned)
}

// Cordon marks the node unschedulable. It remembers on the node whether gpupool did it
// (AnnotationCordoned), so that a node an admin had cordoned stays cordoned afterwards.
func Cordon(n *corev1.Node) {
	if n.Spec.Unschedulable {
		return
	}
	n.Spec.Unschedulable = true
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[gpupoolv1.AnnotationCordoned] = "true"
}

// CordonedByUs tells whether the node is cordoned because gpupool cordoned it: only such
// a cordon is gpupool's to undo.
func CordonedByUs(n *corev1.Node) bool {
	_, ours := n.Annotations[gpupoolv1.AnnotationCordoned]
	return n.Spec.Unschedulable && ours
}

// Uncordon undoes gpupool's own cordon, and only that.
func Uncordon(n *corev1.Node) {
	if CordonedByUs(n) {
		n.Spec.Unschedulable = false
	}
	delete(n.Annotations, gpupoolv1.AnnotationCordoned)
}

// SetOrDelete sets annotation k to v, or removes it when v is "", so that an emptied
// list annotation does not stay behind.
func SetOrDelete(m map[string]string, k, v string) {
	if v == "" {
		delete(m, k)
		return
	}
	m[k] = v
}

// Ready tells whether the node's Ready condition is True. It is the kubelet's word only:
// ReadinessGaps says whether the node is ready for work.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
