package drain

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestGone: a node's pods are gone when only pods a drain leaves alone remain (a
// DaemonSet's, a mirror pod, finished pods, terminating or not); any other pod, running
// or terminating, is not gone, whatever its grace period or the node.
func TestGone(t *testing.T) {
	deleting, yes := metav1.Now(), true
	owned := func(kind string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: "x", UID: "u", Controller: &yes}}
	}
	left := map[string]corev1.Pod{
		"daemonset":             {ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("DaemonSet")}},
		"daemonset terminating": {ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("DaemonSet"), DeletionTimestamp: &deleting}},
		"mirror":                {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}},
		"succeeded":             {Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
		"failed":                {Status: corev1.PodStatus{Phase: corev1.PodFailed}, ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("Job")}},
	}
	notGone := map[string]corev1.Pod{
		"running":                   {Status: corev1.PodStatus{Phase: corev1.PodRunning}, ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("ReplicaSet")}},
		"pending":                   {Status: corev1.PodStatus{Phase: corev1.PodPending}},
		"terminating":               {ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("ReplicaSet"), DeletionTimestamp: &deleting}},
		"terminating without grace": {ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleting, DeletionGracePeriodSeconds: ptr(0)}},
		"no controller":             {},
		"job":                       {ObjectMeta: metav1.ObjectMeta{OwnerReferences: owned("Job")}},
	}
	if !Gone(nil) {
		t.Error("no pods: not gone")
	}
	var all []corev1.Pod
	for name, p := range left {
		all = append(all, p)
		if !Gone([]corev1.Pod{p}) {
			t.Errorf("%s: not gone, want left alone", name)
		}
	}
	if !Gone(all) {
		t.Error("only pods a drain leaves alone: not gone")
	}
	for name, p := range notGone {
		if Gone([]corev1.Pod{p}) {
			t.Errorf("%s: gone", name)
		}
		if Gone(append([]corev1.Pod{p}, all...)) || Gone(append(append([]corev1.Pod(nil), all...), p)) {
			t.Errorf("%s among pods left alone: gone", name)
		}
	}
}
