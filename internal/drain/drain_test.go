package drain

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

func TestHoldsUntilDone(t *testing.T) {
	pod := func(owner string, ann map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: ann}}
		if owner != "" {
			yes := true
			p.OwnerReferences = []metav1.OwnerReference{{Kind: owner, Name: "o", Controller: &yes}}
		}
		return p
	}
	dnd := map[string]string{gpupoolv1.AnnotationDoNotDisrupt: "true"}
	for _, owner := range []string{"", "Job", "ReplicaSet", "StatefulSet"} {
		for _, mode := range []gpupoolv1.DrainJobPods{"", gpupoolv1.JobPodsEvict, gpupoolv1.JobPodsWaitCompleted} {
			for _, ann := range []map[string]string{nil, dnd, {gpupoolv1.AnnotationDoNotDisrupt: "false"}} {
				for _, ready := range []bool{true, false} {
					got := holdsUntilDone(pod(owner, ann), mode, ready)
					// A NotReady node holds nothing: the pod is evicted, as before.
					wantHold := ready && (ann[gpupoolv1.AnnotationDoNotDisrupt] == "true" || (owner == "Job" && mode == gpupoolv1.JobPodsWaitCompleted))
					if (got != "") != wantHold {
						t.Errorf("owner %q, jobPods %q, annotations %v, node ready %v: holdsUntilDone = %q, want hold %v", owner, mode, ann, ready, got, wantHold)
					}
				}
			}
		}
	}
}

func TestDrainMessageNamesHeldPodsBounded(t *testing.T) {
	var held []string
	for i := range 8 {
		held = append(held, fmt.Sprintf("ns/job-%d (%s)", i, gpupoolv1.AnnotationDoNotDisrupt))
	}
	msg := Result{Holding: held}.Message()
	if !strings.Contains(msg, "waiting for 8 pod(s) to finish: ns/job-0") || !strings.Contains(msg, "and 3 more") || strings.Contains(msg, "job-7") {
		t.Errorf("message = %q", msg)
	}
}
