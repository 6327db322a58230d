// Package cluster gives tests and the local environment simulated GPU worker nodes: one
// Node per VM, kept by kwok (simulated kubelets), Ready only while its VM is powered on.
package cluster

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupool/gpupool/internal/inventory"
)

// Stages are the kwok stages that tie a node's readiness to its VM's power state.
//
//go:embed stages.yaml
var Stages []byte

const (
	// AnnotationKwokNode makes kwok manage a node.
	AnnotationKwokNode = "kwok.x-k8s.io/node"
	// SimKeyPrefix starts the keys of the simulated world below: the test world sets
	// and reads them, gpupool never does. gpupool's own keys are in
	// api/v1alpha1/keys.go; these stay here because stages.yaml spells them too.
	SimKeyPrefix = "gpupool.dev/sim-"
	// AnnotationSimPower carries the VM's power state to kwok's stages.
	AnnotationSimPower = "gpupool.dev/sim-power"
	// AnnotationSimGPUs carries the VM's vGPU count to kwok's device-plugin stages.
	AnnotationSimGPUs = "gpupool.dev/sim-gpus"
	// AnnotationSimGPUDelay is how long after the node is Ready the simulated device
	// plugin advertises the GPUs (a Go duration; 3s without it).
	AnnotationSimGPUDelay = "gpupool.dev/sim-gpu-delay"
	// AnnotationSimRunFor is how long a Job's pod runs before kwok completes it (a Go
	// duration; at once without it).
	AnnotationSimRunFor = "gpupool.dev/sim-run-for"
	// GPUResource is the resource the simulated device plugin advertises.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// LabelDevicePluginConfig selects the device plugin's configuration, as the NVIDIA
	// GPU Operator's does; the simulated plugin reads its replicas from the name.
	LabelDevicePluginConfig = "nvidia.com/device-plugin.config"
)

// trailingReplicas is how the simulated device plugin finds a configuration's replicas.
var trailingReplicas = regexp.MustCompile(`-([0-9]+)$`)

// Replicas is how many of nvidia.com/gpu the simulated device plugin advertises per vGPU
// on the node: N for a configuration named with a trailing -N (time-sliced-4), else 1.
// The kwok stages compute the same.
func Replicas(n *corev1.Node) int {
	if m := trailingReplicas.FindStringSubmatch(n.Labels[LabelDevicePluginConfig]); m != nil {
		if r, err := strconv.Atoi(m[1]); err == nil {
			return r
		}
	}
	return 1
}

// Advertises is how many nvidia.com/gpu the simulated device plugin advertises on the
// node once its VM is on: its vGPUs times the replicas of its configuration.
func Advertises(n *corev1.Node) string {
	g, err := strconv.Atoi(n.Annotations[AnnotationSimGPUs])
	if err != nil {
		return "0"
	}
	return strconv.Itoa(g * Replicas(n))
}

// NodeOption changes a node CreateNodes makes.
type NodeOption func(*corev1.Node)

// WithGPUDelay makes the simulated device plugin advertise a node's GPUs d after the
// node is Ready.
func WithGPUDelay(d time.Duration) NodeOption {
	return func(n *corev1.Node) { n.Annotations[AnnotationSimGPUDelay] = d.String() }
}

// vGPUs is how many vGPUs the VM carries, what its node's device plugin advertises.
func vGPUs(vm inventory.VM) string {
	return strconv.Itoa(vm.VGPUCount())
}

// Kwok is a running kwok process.
type Kwok struct {
	cmd  *exec.Cmd
	done chan struct{}
	dir  string
}

// StartKwok runs kwok (simulated kubelets) against the cluster of kubeconfig, managing
// the nodes annotated kwok.x-k8s.io/node=fake with gpupool's stages. Logs go to
// dir/kwok.log. Stop it with Stop.
func StartKwok(kwokBin string, kubeconfig []byte, dir string) (*Kwok, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kwok.kubeconfig")
	cfg := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfg, Stages, 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "kwok.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(kwokBin,
		"--kubeconfig", kc,
		"--config", cfg,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", AnnotationKwokNode+"=fake",
		"--node-lease-duration-seconds", "40",
		"--server-address", "127.0.0.1:0",
		"--node-ip", "127.0.0.1",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("starting kwok: %w", err)
	}
	k := &Kwok{cmd: cmd, done: make(chan struct{}), dir: dir}
	go func() {
		_ = cmd.Wait() // an exit status after SIGTERM is expected
		_ = logf.Close()
		close(k.done)
	}()
	return k, nil
}

// Stop ends kwok and waits for it.
func (k *Kwok) Stop() {
	if k == nil || k.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-k.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.done
	}
}

// Log returns kwok's log, for test failure messages.
func (k *Kwok) Log() string {
	b, _ := os.ReadFile(filepath.Join(k.dir, "kwok.log"))
	return string(b)
}

// NodeFor is the Node that plays the kubelet of a VM: named after the VM, with
// providerID vsphere://<BIOS UUID>, as the vSphere cloud provider would register it.
func NodeFor(vm inventory.VM) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: vm.Name,
			Annotations: map[string]string{
				AnnotationKwokNode: "fake",
				AnnotationSimPower: string(vm.PowerState),
				AnnotationSimGPUs:  vGPUs(vm),
			},
			Labels: map[string]string{
				"kubernetes.io/hostname": vm.Name,
				"kubernetes.io/os":       "linux",
				"type":                   "kwok",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: "vsphere://" + strings.ToLower(vm.UUID)},
	}
}

// CreateNodes creates a Node for every VM that does not have one yet.
func CreateNodes(ctx context.Context, c client.Client, inv *inventory.Inventory, opts ...NodeOption) error {
	for _, vm := range inv.VMs {
		n := NodeFor(vm)
		for _, o := range opts {
			o(n)
		}
		if err := c.Create(ctx, n); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating node %s: %w", vm.Name, err)
		}
	}
	return nil
}

// SyncPower copies each VM's power state onto its node (the power wire): kwok's stages
// then make the node Ready or not, as a kubelet in the VM would. It reads the nodes in
// one List (from a cache when c reads from one) and patches only those that differ,
// concurrently, the nodes of VMs that came on first: as kubelets do not queue behind each
// other, a node coming up should not wait for hundreds going down. It reports whether
// any node changed.
func SyncPower(ctx context.Context, c client.Client, inv *inventory.Inventory) (bool, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return false, err
	}
	byName := make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		byName[nodes.Items[i].Name] = &nodes.Items[i]
	}
	type change struct {
		node        *corev1.Node
		power, gpus string
	}
	var changes []change
	seen := map[string]bool{}
	for _, vm := range inv.VMs {
		n, ok := byName[vm.Name]
		if !ok || seen[vm.Name] {
			continue // VMs of one name in two folders: one node, patched once
		}
		seen[vm.Name] = true
		if n.Annotations[AnnotationSimPower] == string(vm.PowerState) && n.Annotations[AnnotationSimGPUs] == vGPUs(vm) {
			continue
		}
		changes = append(changes, change{n, string(vm.PowerState), vGPUs(vm)})
	}
	sort.SliceStable(changes, func(i, j int) bool {
		return changes[i].power == string(inventory.PoweredOn) && changes[j].power != string(inventory.PoweredOn)
	})
	errs := make([]error, len(changes))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, ch := range changes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			before := ch.node.DeepCopy()
			if ch.node.Annotations == nil {
				ch.node.Annotations = map[string]string{}
			}
			ch.node.Annotations[AnnotationSimPower] = ch.power
			ch.node.Annotations[AnnotationSimGPUs] = ch.gpus
			errs[i] = c.Patch(ctx, ch.node, client.MergeFrom(before))
		}()
	}
	wg.Wait()
	return len(changes) > 0, errors.Join(errs...)
}

// Ready tells whether the node's Ready condition is True.
func Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// FollowsPower tells whether a node is Ready exactly when the power wire last saw its VM
// powered on, and advertises the VM's GPUs (times its configuration's replicas) exactly
// when it is Ready: kwok has caught up with the VM.
func FollowsPower(n *corev1.Node) bool {
	on := n.Annotations[AnnotationSimPower] == "poweredOn"
	want := "0"
	if on {
		want = Advertises(n)
	}
	return Ready(n) == on && AdvertisedGPUs(n) == want
}

// AdvertisedGPUs is the node's allocatable nvidia.com/gpu, "0" when it has none.
func AdvertisedGPUs(n *corev1.Node) string {
	if q, ok := n.Status.Allocatable[GPUResource]; ok {
		return q.String()
	}
	return "0"
}
