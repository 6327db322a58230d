// Package localenv runs gpupool's embedded local environment on loopback: a real
// control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) started
// by kwokctl from the binaries built from source, kwok as the nodes' kubelets, vgpusim
// as vCenter, the power wire that ties each node's readiness to its VM, and the operator
// with its webhook. Every process it starts is recorded in the state folder, so Down can
// stop them all, from this process or another one.
package localenv

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/execute"
	"github.com/gpupool/gpupool/internal/loopback"
	"github.com/gpupool/gpupool/internal/testcert"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/test/kueueenv"
	"github.com/gpupool/gpupool/vsphere"
)

// Options say where things are.
type Options struct {
	// Dir is the state folder: kubeconfig, govc.env, logs, pids.
	Dir string
	// Root is the repository root (config/, test/ are read from it).
	Root string
	// BinDir holds the control-plane binaries, kwok, kwokctl, manager and vgpusim.
	BinDir string
	// Inventory is vgpusim's inventory file.
	Inventory string
	// Log receives progress lines; discarded when nil.
	Log io.Writer
	// Image is the manager image's OCI layout ('make image'): the manager runs from the
	// image's files. Empty: BinDir/manager.
	Image string
	// VgpusimArgs are more flags for vgpusim, such as task delays.
	VgpusimArgs []string
	// Kueue runs Kueue's own manager (BinDir/kueue-<version>, 'make kueue') with its CRDs
	// and webhooks, and the demo queues its training Job through it.
	Kueue bool
	// NodeLease is how long kwok's node leases last (a kubelet's nodeLeaseDurationSeconds:
	// renewed every quarter of it, one write per node); 0: DefaultNodeLease. A longer lease
	// gives the node lifecycle controller the same grace period (--node-monitor-grace-period),
	// so that nodes stay Ready between renewals (nodeLeaseArgs).
	NodeLease time.Duration
	// ControlPlaneQPS is the requests a second the controller manager and the scheduler
	// allow themselves to the API server (burst twice that); 0: their defaults (20 and
	// 50). With the defaults, the ReplicaSet controller recreates a large drain's evicted
	// pods at 20 a second, and the node lifecycle controller taints hundreds of parked
	// nodes at the same pace, which a benchmark then counts as Kubernetes' share of a
	// switch (controlPlaneQPSArgs).
	ControlPlaneQPS int
	// MaxConcurrentStarts is the manager's --max-concurrent-starts, and how many task
	// starts the benchmark's environment-alone floor asks at once; 0: the manager's
	// default (execute.MaxConcurrentStarts).
	MaxConcurrentStarts int
	// ManagerLogLevel is the manager's --zap-log-level ("": its default, info); "debug"
	// adds a line per pass with where its time went (controllers.logPass).
	ManagerLogLevel string
	// ManagerWatchMinVMs, when set, is the manager's --vcenter-watch-min-vms (nil: its
	// default, vsphere.WatchMinVMs).
	ManagerWatchMinVMs *int
	// ManagerStatusInterval, when set, is the manager's --status-write-interval (nil: its
	// default, controllers.DefaultStatusInterval).
	ManagerStatusInterval *time.Duration
	// ManagerMinPassInterval, when set, is the manager's --min-pass-interval (nil: its
	// default, controllers.DefaultMinPassInterval).
	ManagerMinPassInterval *time.Duration
	// ManagerEnv is more of the manager's environment ("KEY=value"), such as the
	// end-to-end tests' KUBE_CACHE_MUTATION_DETECTOR=true: client-go then compares every
	// cached object with a copy of it each second and ends the manager on the first change
	// (a pass writes no node of the cache: controllers.patchNodeNow).
	ManagerEnv []string
}

// startsAtOnce is how many task starts the manager asks at once in this environment.
func (o Options) startsAtOnce() int {
	return cmp.Or(o.MaxConcurrentStarts, execute.MaxConcurrentStarts)
}

// DefaultNodeLease is kwok's node lease unless Options.NodeLease says otherwise, the
// kubelet's default.
const DefaultNodeLease = 40 * time.Second

// controlPlaneArgs are kwokctl's flags for the node lease (nodeLeaseArgs) and the
// control plane's client QPS (controlPlaneQPSArgs).
func controlPlaneArgs(lease time.Duration, qps int) []string {
	flags, extra := nodeLeaseArgs(lease)
	return append(flags, extraArgsFlags(append(extra, controlPlaneQPSArgs(qps)...))...)
}

// extraArg is one of kwokctl's --extra-args: a flag for one component.
type extraArg struct{ component, key, value string }

// extraArgsFlags are the --extra-args flags for args, ordered so that kwokctl v0.8.0
// reads them: it indexes a component's patch by the position of the component's first
// flag among all --extra-args, not among the components (mutationComponentPatches), and
// panics unless each component's first flag comes before any component's second. So
// the flags go round by round: every component's first, then every second, and so on,
// components in the order they first appear.
func extraArgsFlags(args []extraArg) []string {
	var order []string
	byComp := map[string][]extraArg{}
	for _, a := range args {
		if byComp[a.component] == nil {
			order = append(order, a.component)
		}
		byComp[a.component] = append(byComp[a.component], a)
	}
	var out []string
	for round := 0; len(out) < 2*len(args); round++ {
		for _, c := range order {
			if round < len(byComp[c]) {
				a := byComp[c][round]
				out = append(out, "--extra-args", fmt.Sprintf("%s=%s=%s", a.component, a.key, a.value))
			}
		}
	}
	return out
}

// nodeLeaseArgs are kwokctl's flags for the node lease: its duration and, when it is
// longer than the default, the node lifecycle controller's grace period to match (a
// node whose lease is older than the grace period is marked NotReady). The controller's
// monitor period stays the default 5 s, so that it still sees a parked node come back
// within seconds. A lease of 400 s at 1,281 nodes is about 13 lease writes a second
// instead of 128.
func nodeLeaseArgs(lease time.Duration) ([]string, []extraArg) {
	if lease <= 0 {
		lease = DefaultNodeLease
	}
	secs := int(lease.Round(time.Second) / time.Second)
	flags := []string{"--node-lease-duration-seconds", strconv.Itoa(secs)}
	if lease <= DefaultNodeLease {
		return flags, nil
	}
	return flags, []extraArg{{"kube-controller-manager", "node-monitor-grace-period", fmt.Sprintf("%ds", secs)}}
}

// controlPlaneQPSArgs are the components' flags for Options.ControlPlaneQPS: the
// client-side limits of the controller manager and the scheduler only. The API server
// keeps its own limits (max in flight, priority and fairness), as a real cluster does,
// so the manager's requests are treated as in any cluster.
func controlPlaneQPSArgs(qps int) []extraArg {
	if qps <= 0 {
		return nil
	}
	var args []extraArg
	for _, c := range []string{"kube-controller-manager", "kube-scheduler"} {
		args = append(args, extraArg{c, "kube-api-qps", strconv.Itoa(qps)}, extraArg{c, "kube-api-burst", strconv.Itoa(2 * qps)})
	}
	return args
}

// Env is a running local environment.
type Env struct {
	Options
	// Kubeconfig is the path of the kubeconfig file.
	Kubeconfig string
	// Client talks to the cluster.
	Client client.WithWatch
	// VCenter is how to reach vgpusim.
	VCenter vsphere.Config
	// Thumbprint is vgpusim's SHA-256 certificate fingerprint.
	Thumbprint string
	// rest is the connection Client uses, for the power wire's own cache.
	rest *rest.Config
	// manager is how the operator was started, so that a fault test can start it again.
	manager managerRun
}

// managerRun is the operator's command line and where it says it is ready.
type managerRun struct {
	certDir  string
	args     []string
	readyURL string
}

const clusterName = "gpupool"

// The credentials Secret Up creates for vgpusim, which the pools name.
const (
	credentialsSecret    = "vcenter-credentials"
	credentialsNamespace = "gpupool-system"
)

// Scheme is the scheme the environment's client uses.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	return s
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// Up starts everything and returns when the cluster, the nodes, vgpusim and the
// operator are ready. On failure it stops what it started.
func Up(ctx context.Context, o Options) (_ *Env, err error) {
	if err := o.checkUp(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "pids"), 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = Down(o)
		}
	}()
	e := &Env{Options: o}

	// 1. The control plane and kwok, by kwokctl from the locally built binaries.
	if err := e.startControlPlane(ctx); err != nil {
		return nil, err
	}
	// 2. vgpusim.
	govcEnv, err := e.startVgpusim(ctx)
	if err != nil {
		return nil, err
	}
	// 3. gpupool's CRDs (GPUPoolProfile, GPUPoolRequest: the manager watches both), the
	// credentials, and one Node per VM (plus a CPU node outside the pool).
	o.logf("==> installing gpupool's CRDs and creating one node per VM")
	crds, err := filepath.Glob(filepath.Join(o.Root, "config", "crd", "bases", "gpupool.dev_*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("finding gpupool's CRDs in config/crd/bases: %w", err)
	}
	if len(crds) == 0 {
		return nil, errors.New("no gpupool CRD in config/crd/bases: run make manifests")
	}
	for _, crd := range crds {
		if err := e.applyFile(ctx, crd, nil); err != nil {
			return nil, err
		}
	}
	if err := e.createBasics(ctx); err != nil {
		return nil, err
	}

	if o.Kueue {
		o.logf("==> starting Kueue %s (its CRDs, webhooks and manager)", kueueenv.Version)
		if err := e.startKueue(ctx); err != nil {
			return nil, err
		}
	}

	// 4. The power wire.
	if err := e.startPowerWire(); err != nil {
		return nil, err
	}

	// 5. The operator with its webhook, served on loopback with a certificate made here.
	o.logf("==> starting the gpupool operator and its webhook")
	if err := e.startOperator(ctx); err != nil {
		return nil, err
	}
	if err := e.waitNodesMatchPower(ctx, 90*time.Second); err != nil {
		return nil, err
	}
	pool, err := e.writeUserFiles(govcEnv)
	if err != nil {
		return nil, err
	}
	o.logf("==> ready: . %s/env.sh, then kubectl apply -f %s and kubectl gpupool status daynight", o.Dir, pool)
	return e, nil
}

// checkUp fails unless Up can start: every binary it runs is in BinDir, the manager
// (image or binary) is there, and Dir holds no running environment.
func (o *Options) checkUp() error {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwokctl", "vgpusim", "gpupool-local"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return fmt.Errorf("%s is missing in %s: run 'make controlplane build' first", b, o.BinDir)
		}
	}
	if err := o.checkManager(); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "pids")); err == nil {
		return fmt.Errorf("%s holds a running environment: run 'down' first", o.Dir)
	}
	return nil
}

// bin is the path of the binary name in BinDir.
func (o *Options) bin(name string) string { return filepath.Join(o.BinDir, name) }

// startControlPlane has kwokctl start etcd, the API server, the controller manager, the
// scheduler and kwok from BinDir with the environment's kwok stages, copies kwokctl's
// kubeconfig to Dir/kubeconfig and connects e.Client.
func (e *Env) startControlPlane(ctx context.Context) (err error) {
	e.logf("==> starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (kwokctl, binary runtime)")
	stages := filepath.Join(e.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, cluster.Stages, 0o644); err != nil {
		return err
	}
	args := append([]string{"create", "cluster", "--name", clusterName, "--runtime", "binary",
		"--kube-apiserver-binary", e.bin("kube-apiserver"), "--kube-controller-manager-binary", e.bin("kube-controller-manager"),
		"--kube-scheduler-binary", e.bin("kube-scheduler"), "--etcd-binary", e.bin("etcd"), "--kwok-controller-binary", e.bin("kwok"),
		"--config", stages, "--wait", "2m"}, controlPlaneArgs(e.NodeLease, e.ControlPlaneQPS)...)
	if err := e.kwokctl(ctx, args...); err != nil {
		return err
	}
	src := filepath.Join(e.Dir, "kwok", "clusters", clusterName, "kubeconfig.yaml")
	kc, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("reading kwokctl's kubeconfig: %w", err)
	}
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, kc, 0o600); err != nil {
		return err
	}
	if e.rest, err = restConfig(kc); err != nil {
		return err
	}
	if e.Client, err = client.NewWithWatch(e.rest, client.Options{Scheme: Scheme()}); err != nil {
		return err
	}
	return nil
}

// startVgpusim starts vgpusim with the inventory, waits for the govc.env file it writes
// and sets e.VCenter and e.Thumbprint from it. It returns the file's path.
func (e *Env) startVgpusim(ctx context.Context) (govcEnv string, err error) {
	e.logf("==> starting vgpusim with %s", e.Inventory)
	govcEnv = filepath.Join(e.Dir, "govc.env")
	if _, err := e.spawn("vgpusim", e.bin("vgpusim"), append([]string{"--inventory", e.Inventory, "--env-file", govcEnv}, e.VgpusimArgs...)...); err != nil {
		return "", err
	}
	vars, err := waitEnvFile(ctx, govcEnv, 30*time.Second)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(vars["GOVC_URL"])
	if err != nil {
		return "", fmt.Errorf("vgpusim printed a bad GOVC_URL: %w", err)
	}
	e.VCenter = vsphere.Config{Server: u.Host, Datacenter: vars["GOVC_DATACENTER"], Username: vars["GOVC_USERNAME"], Password: vars["GOVC_PASSWORD"]}
	if e.Thumbprint, err = thumbprint(u.Host); err != nil {
		return "", err
	}
	e.VCenter.Thumbprint = e.Thumbprint
	return govcEnv, nil
}

// startPowerWire starts the power wire: gpupool-local wire, which copies each VM's power
// state to its node and restarts control-plane components that exit.
func (e *Env) startPowerWire() error {
	// Note: absolute folders, as the wire runs from wherever Up's caller does and
	// restarts control-plane components with kwokctl from BinDir (Supervise).
	absBin, err := filepath.Abs(e.BinDir)
	if err != nil {
		return err
	}
	absDir, err := filepath.Abs(e.Dir)
	if err != nil {
		return err
	}
	_, err = e.spawn("powerwire", e.bin("gpupool-local"), "wire", "--dir", absDir, "--bin-dir", absBin)
	return err
}

// writeUserFiles writes what a user of the environment reads: Dir/env.sh (KUBECONFIG and
// the govc variables of govcEnv) and the pool file, whose path it returns.
func (e *Env) writeUserFiles(govcEnv string) (pool string, err error) {
	envSh := fmt.Sprintf("export KUBECONFIG=%s\n. %s\n", e.Kubeconfig, govcEnv)
	if err := os.WriteFile(filepath.Join(e.Dir, "env.sh"), []byte(envSh), 0o644); err != nil {
		return "", err
	}
	return e.writePool()
}

func restConfig(kubeconfig []byte) (*rest.Config, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 500, 1000
	return cfg, nil
}

// Open connects to an environment that Up started earlier.
func Open(o Options) (*Env, error) {
	e := &Env{Options: o, Kubeconfig: filepath.Join(o.Dir, "kubeconfig")}
	kc, err := os.ReadFile(e.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("no environment in %s: %w", o.Dir, err)
	}
	if e.rest, err = restConfig(kc); err != nil {
		return nil, err
	}
	if e.Client, err = client.NewWithWatch(e.rest, client.Options{Scheme: Scheme()}); err != nil {
		return nil, err
	}
	vars, err := readEnvFile(filepath.Join(o.Dir, "govc.env"))
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(vars["GOVC_URL"])
	if err != nil {
		return nil, err
	}
	e.VCenter = vsphere.Config{Server: u.Host, Datacenter: vars["GOVC_DATACENTER"], Username: vars["GOVC_USERNAME"], Password: vars["GOVC_PASSWORD"]}
	if e.Thumbprint, err = thumbprint(u.Host); err != nil {
		return nil, err
	}
	e.VCenter.Thumbprint = e.Thumbprint
	return e, nil
}

// Down stops every process Up started and deletes the cluster. It is safe to call on a
// half-started or already stopped environment.
func Down(o Options) error {
	var errs []error
	// The power wire first: its supervisor would start again what is stopped after it.
	wire, _ := readPid(filepath.Join(o.Dir, "pids", "powerwire.pid"))
	if wire > 0 {
		if err := stopGroup(wire); err != nil {
			errs = append(errs, fmt.Errorf("stopping the power wire (pid %d): %w", wire, err))
		}
	}
	for _, pid := range readPidFiles(filepath.Join(o.Dir, "pids")) {
		if pid == wire {
			continue
		}
		if err := stopGroup(pid); err != nil {
			errs = append(errs, fmt.Errorf("stopping pid %d: %w", pid, err))
		}
	}
	files, _ := filepath.Glob(filepath.Join(o.Dir, "pids", "*.pid"))
	for _, f := range files {
		_ = os.Remove(f)
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "kwok", "clusters", clusterName)); err == nil {
		// kwokctl signals its processes and returns; wait until they are gone, so that
		// Down really leaves nothing running.
		kwokPids := readPidFiles(filepath.Join(o.Dir, "kwok", "clusters", clusterName, "pids"))
		cmd := exec.Command(filepath.Join(o.BinDir, "kwokctl"), "delete", "cluster", "--name", clusterName)
		cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(o.Dir, "kwok"))
		if out, err := cmd.CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("kwokctl delete cluster: %w: %s", err, out))
		}
		for _, pid := range kwokPids {
			if !waitGone(pid, 10*time.Second) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				waitGone(pid, 5*time.Second)
			}
		}
	}
	_ = os.Remove(filepath.Join(o.Dir, "pids"))
	return errors.Join(errs...)
}

// stopGroup ends a process group started by spawn: SIGTERM, then SIGKILL after 10s.
func stopGroup(pid int) error {
	if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return err
	}
	if !waitGone(pid, 10*time.Second) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		waitGone(pid, 5*time.Second)
	}
	return nil
}

// waitGone waits, bounded, until a process has exited (a zombie counts as exited).
func waitGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if exited(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exited tells whether a process has ended: it is gone, or a zombie nobody reaped yet
// (processes kwokctl forks are reparented, and not every init reaps).
func exited(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

// readPid reads the pid a pid file records.
func readPid(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// readPidFiles reads the pids recorded in a folder of *.pid files.
func readPidFiles(dir string) []int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	var pids []int
	for _, f := range files {
		if pid, err := readPid(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (e *Env) kwokctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(e.BinDir, "kwokctl"), args...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(e.Dir, "kwok"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kwokctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// spawn starts a long-running process in its own process group, logging to
// Dir/logs/NAME.log, and records its pid so that Down can stop it.
func (e *Env) spawn(name, bin string, args ...string) (*os.Process, error) {
	if err := os.MkdirAll(filepath.Join(e.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(e.Dir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(e.Dir, "pids", name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait() }() // reap it if it ends while we run
	return cmd.Process, nil
}

func readEnvFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export ")
		k, v, ok := strings.Cut(line, "=")
		if ok {
			vars[k] = strings.Trim(v, `'"`)
		}
	}
	if vars["GOVC_URL"] == "" {
		return nil, fmt.Errorf("%s has no GOVC_URL yet", path)
	}
	return vars, nil
}

func waitEnvFile(ctx context.Context, path string, timeout time.Duration) (map[string]string, error) {
	deadline := time.Now().Add(timeout)
	for {
		vars, err := readEnvFile(path)
		if err == nil {
			return vars, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("vgpusim did not write %s within %s: %w", path, timeout, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// thumbprint reads the SHA-256 fingerprint of the server's certificate, as
// `govc about.cert -thumbprint` would print it.
func thumbprint(hostport string) (string, error) {
	conn, err := tls.Dial("tcp", hostport, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only to read the fingerprint the pool then pins
	if err != nil {
		return "", fmt.Errorf("reading vgpusim's certificate: %w", err)
	}
	defer conn.Close()
	sum := sha256.Sum256(conn.ConnectionState().PeerCertificates[0].Raw)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":"), nil
}

// applyFile creates (or updates) every object of a YAML file, after edit.
func (e *Env) applyFile(ctx context.Context, path string, edit func(*unstructured.Unstructured)) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return e.Apply(ctx, data, edit)
}

// Apply creates or updates every object of a multi-document YAML.
func (e *Env) Apply(ctx context.Context, data []byte, edit func(*unstructured.Unstructured)) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		if edit != nil {
			edit(u)
		}
		if err := e.Client.Create(ctx, u); err != nil {
			if !strings.Contains(err.Error(), "already exists") {
				return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
			}
			cur := &unstructured.Unstructured{}
			cur.SetGroupVersionKind(u.GroupVersionKind())
			if err := e.Client.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
				return err
			}
			u.SetResourceVersion(cur.GetResourceVersion())
			if err := e.Client.Update(ctx, u); err != nil {
				return fmt.Errorf("updating %s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}
}

func (e *Env) createBasics(ctx context.Context) error {
	// The CRD must be served before objects of it can be made.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var l gpupoolv1.GPUPoolProfileList
		if err := e.Client.List(ctx, &l); err == nil {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the GPUPoolProfile CRD is not served: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: credentialsNamespace}}
	if err := e.Client.Create(ctx, ns); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentialsSecret, Namespace: ns.Name},
		StringData: map[string]string{"username": e.VCenter.Username, "password": e.VCenter.Password}}
	if err := e.Client.Create(ctx, sec); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	vc, err := conn.Connect(ctx, e.VCenter)
	if err != nil {
		return err
	}
	inv, err := vc.Inventory(ctx)
	if err != nil {
		return err
	}
	if err := cluster.CreateNodes(ctx, e.Client, inv); err != nil {
		return err
	}
	// The class of the devices the simulated DRA driver publishes (cluster.SyncSlices).
	if err := e.Client.Create(ctx, cluster.DeviceClass()); client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	// A CPU node outside the pool: where workloads that can do without a GPU go at night.
	cpu := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-1",
		Annotations: map[string]string{cluster.AnnotationKwokNode: "fake", cluster.AnnotationSimPower: "poweredOn"},
		Labels:      map[string]string{"kubernetes.io/hostname": "cpu-1", "kubernetes.io/os": "linux", "type": "kwok", "node.gpupool.dev/cpu-only": "true"}}}
	return client.IgnoreAlreadyExists(e.Client.Create(ctx, cpu))
}

// waitNodesMatchPower waits until each VM's node is Ready exactly when the VM runs: for
// timeout, plus 100 ms per node (kwok brings a thousand nodes up in about a minute and a
// half on two cores).
func (e *Env) waitNodesMatchPower(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	for {
		var nodes corev1.NodeList
		err := e.Client.List(ctx, &nodes)
		deadline := start.Add(timeout + time.Duration(len(nodes.Items))*100*time.Millisecond)
		ok := err == nil
		for _, n := range nodes.Items {
			if !cluster.FollowsPower(&n) {
				ok = false
			}
		}
		if ok && len(nodes.Items) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nodes did not follow their VMs' power state within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (e *Env) startOperator(ctx context.Context) error {
	certDir := filepath.Join(e.Dir, "webhook-certs")
	cert, err := testcert.WriteServing(certDir, "gpupool-webhook.local")
	if err != nil {
		return err
	}
	caPEM := base64.StdEncoding.EncodeToString(cert)
	port, err := loopback.FreePort()
	if err != nil {
		return err
	}
	probe, err := loopback.FreePort()
	if err != nil {
		return err
	}
	metrics, err := loopback.FreePort()
	if err != nil {
		return err
	}
	pprof, err := loopback.FreePort()
	if err != nil {
		return err
	}
	e.manager = managerRun{certDir: certDir, readyURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", probe), args: []string{
		"--webhook-host", "127.0.0.1", "--webhook-port", strconv.Itoa(port),
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(probe),
		// Plain-HTTP metrics on loopback, for the demo's curl; in a cluster they are HTTPS
		// with authentication and authorization.
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(metrics), "--metrics-secure=false", "--leader-elect",
		"--leader-election-namespace", "gpupool-system", "--credentials-namespace", "gpupool-system",
		// Profiles on loopback and log times to the nanosecond: what the benchmark's
		// reader needs to tell where a transition's time goes.
		"--pprof-bind-address", "127.0.0.1:" + strconv.Itoa(pprof), "--zap-time-encoding", "rfc3339nano",
		// The soft memory limit the install manifest's and the chart's default limit
		// gives (config/manager/manager.yaml), so that the benchmark's RSS is the
		// deployed manager's.
		"--memory-limit", "256Mi",
		"--accounting-write-interval", usageInterval.String(),
		"--max-concurrent-starts", strconv.Itoa(e.startsAtOnce())}}
	if e.ManagerLogLevel != "" {
		e.manager.args = append(e.manager.args, "--zap-log-level", e.ManagerLogLevel)
	}
	if e.ManagerWatchMinVMs != nil {
		e.manager.args = append(e.manager.args, "--vcenter-watch-min-vms", strconv.Itoa(*e.ManagerWatchMinVMs))
	}
	if e.ManagerStatusInterval != nil {
		e.manager.args = append(e.manager.args, "--status-write-interval", e.ManagerStatusInterval.String())
	}
	if e.ManagerMinPassInterval != nil {
		e.manager.args = append(e.manager.args, "--min-pass-interval", e.ManagerMinPassInterval.String())
	}
	if err := e.spawnManager(e.Kubeconfig, certDir, e.manager.args...); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.Dir, "metrics-url"), []byte(fmt.Sprintf("http://127.0.0.1:%d/metrics\n", metrics)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.Dir, "pprof-url"), []byte(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/\n", pprof)), 0o644); err != nil {
		return err
	}
	if err := e.waitManagerReady(ctx); err != nil {
		return err
	}
	// The webhooks (the pools', the requests'), pointed at the operator on loopback,
	// each at its own path.
	return e.applyFile(ctx, filepath.Join(e.Root, "config", "webhook", "manifests.yaml"), func(u *unstructured.Unstructured) {
		hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
		for i := range hooks {
			h := hooks[i].(map[string]any)
			path, _, _ := unstructured.NestedString(h, "clientConfig", "service", "path")
			h["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://127.0.0.1:%d%s", port, path), "caBundle": caPEM}
		}
		_ = unstructured.SetNestedSlice(u.Object, hooks, "webhooks")
	})
}
