package demand

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/nodes"
)

// Shapes are, per layout, the nodes it makes as a scheduler would see them (labels and
// taints, one per distinct profile), to match pending pods against.
type Shapes map[string][]*corev1.Node

// ShapesOf are the shapes of the pool's layouts.
func ShapesOf(pool *gpupoolv1.GPUPoolProfile) Shapes {
	out := Shapes{}
	for i := range pool.Spec.Layouts {
		l := &pool.Spec.Layouts[i]
		seen := map[string]bool{}
		for _, w := range l.Workers {
			if w.NoNode || seen[w.Profile] {
				continue
			}
			seen[w.Profile] = true
			mib, _ := inventory.ProfileFrameBufferMiB(w.Profile)
			m := nodes.ActiveMeta(pool.Name, l, w.Profile, mib)
			out[l.Name] = append(out[l.Name], &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "layout-" + l.Name, Labels: m.Labels},
				Spec:       corev1.NodeSpec{Taints: m.Taints},
			})
		}
	}
	return out
}

// Serves says whether a node of the layout could take the pod: its node selector and
// required node affinity match, and it tolerates the layout's NoSchedule and NoExecute
// taints. Preferences are no requirement.
func (ls Shapes) Serves(layout string, p *corev1.Pod) bool {
	return ls.ServesProfile(layout, "", p)
}

// ServesProfile is Serves for the layout's nodes of one vGPU profile ("": any).
func (ls Shapes) ServesProfile(layout, profile string, p *corev1.Pod) bool {
	aff := nodeaffinity.GetRequiredNodeAffinity(p)
	for _, n := range ls[layout] {
		if profile != "" && n.Labels[gpupoolv1.LabelProfile] != profile {
			continue
		}
		if ok, err := aff.Match(n); err != nil || !ok {
			continue
		}
		_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, p.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}, false)
		if !untolerated {
			return true
		}
	}
	return false
}
