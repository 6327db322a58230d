package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/nodes"
)

// The pods are spread over benchNamespaces namespaces and bound to benchNodes nodes
// (spec.nodeName set at creation: no scheduler runs, no kubelet reports). No
// controller-manager runs either, so nothing touches them after creation: their owner
// (a ReplicaSet that does not exist) is there for their size and shape only.
const (
	benchNamespaces = 50
	benchNodes      = 100
	// gpuEvery: one pod in gpuEvery asks for a GPU; every other GPU pod is left
	// pending and marked unschedulable, as the scheduler would.
	gpuEvery = 100
)

func namespaceName(i int) string { return fmt.Sprintf("bench-ns-%02d", i%benchNamespaces) }
func nodeName(i int) string      { return fmt.Sprintf("bench-node-%03d", i%benchNodes) }

func createWorkerNodes(ctx context.Context, c client.Client) error {
	for i := range benchNodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{"kubernetes.io/hostname": nodeName(i)}}}
		if err := c.Create(ctx, n); err != nil {
			return err
		}
	}
	for i := range benchNamespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(i)}}); err != nil {
			return err
		}
	}
	return nil
}

// benchPod is pod i: a Deployment's pod of about 5 KiB as the API server stores it
// (labels, an owner, a container with env, probes, mounts and resources, a projected
// token volume), and every gpuEvery-th asks for one nvidia.com/gpu.
func benchPod(i int) (*corev1.Pod, bool) {
	app := fmt.Sprintf("svc-%03d", i%300)
	var env []corev1.EnvVar
	for k := range 24 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("SETTING_%02d", k), Value: strings.Repeat("v", 40)})
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-7d9c8b6f5-%06d", app, i), Namespace: namespaceName(i),
			Labels: map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "bench", "pod-template-hash": "7d9c8b6f5"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-12-01T10:00:00Z",
				"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9c8b6f5",
				UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i%300)), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName: nodeName(i), ServiceAccountName: "app",
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example.com/team/" + app + ":1.42.7", Args: []string{"--port=8080", "--metrics-port=9090", "--log-format=json"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
				Env:   env,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstrPort(8080)}}, PeriodSeconds: 10},
				LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstrPort(8080)}}, PeriodSeconds: 20},
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(3607))}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}},
			},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
			},
		},
	}
	if i%gpuEvery != 0 {
		return p, false
	}
	p.Spec.Containers[0].Resources.Limits[nodes.DefaultGPUResource] = resource.MustParse("1")
	pending := (i/gpuEvery)%2 == 1
	if pending {
		p.Spec.NodeName = ""
	}
	return p, pending
}

// createPods creates pods from to to-1 on workers concurrent clients, and marks the
// pending GPU pods unschedulable.
func createPods(ctx context.Context, cfg *rest.Config, from, to, workers int) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 5000, 10000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := createPod(ctx, cs, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var err2 error
feed:
	for i := from; i < to; i++ {
		select {
		case next <- i:
		case err2 = <-errs:
			break feed
		case <-ctx.Done():
			err2 = ctx.Err()
			break feed
		}
		if (i+1)%10000 == 0 {
			logf("created %d pods", i+1)
		}
	}
	close(next)
	wg.Wait()
	if err2 == nil {
		select {
		case err2 = <-errs:
		default:
		}
	}
	return err2
}

func createPod(ctx context.Context, cs kubernetes.Interface, i int) error {
	p, pending := benchPod(i)
	got, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %d: %w", i, err)
	}
	if !pending {
		return nil
	}
	got.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/100 nodes are available: 100 Insufficient nvidia.com/gpu."}}
	if _, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking pod %d unschedulable: %w", i, err)
	}
	return nil
}
