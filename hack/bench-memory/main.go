// Command bench-memory measures the manager's memory against the number of pods in the
// cluster: it starts a real kube-apiserver and etcd (internal/testenv), vgpusim as
// vCenter and one day/night pool, creates pods up to each count asked for (1 % of them
// GPU pods), and at each count runs the manager binaries given, with and without
// spec.demand on the pool, reading their RSS (/proc/PID/status) and Go heap (the
// metrics endpoint, on loopback) once their caches synced and the pool was reconciled a
// few times. It prints a Markdown table (docs/performance.md, "Memory against the
// cluster's pods"). Every process it starts is stopped when it ends, failed or
// interrupted.
//
//	go run ./hack/bench-memory -pods 20000,100000 -manager after=bin/manager [-manager before=/tmp/old/manager]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/internal/testworld"
	"github.com/gpupool/gpupool/test/cluster"
	"github.com/gpupool/gpupool/test/vgpusim"
	"github.com/gpupool/gpupool/vsphere"
)

// managers are the -manager flags: name=path, in order.
type managers [][2]string

func (m *managers) String() string { return fmt.Sprint(*m) }

func (m *managers) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok {
		name, path = filepath.Base(v), v
	}
	*m = append(*m, [2]string{name, path})
	return nil
}

type options struct {
	counts   []int
	managers managers
	passes   int
	settle   time.Duration
	workers  int
}

func main() {
	var o options
	pods := flag.String("pods", "20000,100000", "Pod counts to measure at, ascending, comma-separated.")
	flag.Var(&o.managers, "manager", "A manager binary to measure, as name=path (repeatable; default after=bin/manager).")
	flag.IntVar(&o.passes, "passes", 3, "Reconciles of the pool to wait for before measuring.")
	flag.DurationVar(&o.settle, "settle", 20*time.Second, "How long RSS and heap are sampled (each second) after the passes.")
	flag.IntVar(&o.workers, "workers", 16, "Concurrent clients creating the pods.")
	flag.Parse()
	for _, s := range strings.Split(*pods, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "-pods: %q is not a count\n", s)
			os.Exit(2)
		}
		o.counts = append(o.counts, n)
	}
	if len(o.managers) == 0 {
		o.managers = managers{{"after", filepath.Join(testenv.Root(), "bin", "manager")}}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rows, err := run(ctx, o)
	printTable(os.Stdout, rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-memory:", err)
		stop()
		os.Exit(1)
	}
}

// world is the control plane, vCenter and pool the managers run against.
type world struct {
	env        *envtest.Environment
	cfg        *rest.Config
	c          client.Client
	kubeconfig string
	pool       string
	dir        string
}

const (
	benchNamespace = "gpupool-system"
	prefix         = "bench-"
)

func run(ctx context.Context, o options) (rows []row, err error) {
	dir, err := os.MkdirTemp("", "gpupool-bench-memory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	env, cfg, err := testenv.Start(testenv.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	inv, err := vgpusim.Load([]byte(fmt.Sprintf(vgpusim.OneHostDayNight, prefix)))
	if err != nil {
		return nil, err
	}
	sim, err := vgpusim.Start(inv, vgpusim.Options{})
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	w := &world{env: env, cfg: cfg, dir: dir}
	if err := w.setUp(ctx, sim); err != nil {
		return nil, err
	}
	created := 0
	for _, n := range o.counts {
		start := time.Now()
		if err := createPods(ctx, cfg, created, n, o.workers); err != nil {
			return rows, err
		}
		logf("%d pods in the cluster (%d created in %s)", n, n-created, time.Since(start).Round(time.Second))
		created = n
		for _, demand := range []bool{false, true} {
			if err := w.setDemand(ctx, demand); err != nil {
				return rows, err
			}
			for _, m := range o.managers {
				r, err := w.measure(ctx, m[0], m[1], o)
				r.pods, r.demand = n, demand
				rows = append(rows, r)
				logf("%s", r)
				if err != nil {
					return rows, err
				}
				if err := w.checkDemand(ctx, demand); err != nil {
					return rows, err
				}
			}
		}
	}
	return rows, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// setUp makes the managers' kubeconfig (an admin user), the credentials Secret, the
// pool's nodes, the nodes the pods are bound to and their namespaces, and the pool.
func (w *world) setUp(ctx context.Context, sim *vgpusim.Sim) error {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gpupoolv1.AddToScheme(s)
	c, err := client.New(w.cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	w.c = c
	user, err := w.env.AddUser(envtest.User{Name: "bench-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	w.kubeconfig = filepath.Join(w.dir, "kubeconfig")
	if err := os.WriteFile(w.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}); err != nil {
		return err
	}
	if err := c.Create(ctx, testworld.VCenterSecret(sim, "vcenter", benchNamespace)); err != nil {
		return err
	}
	conn := vsphere.NewConnector()
	vc, err := conn.Connect(ctx, vsphere.Config{Server: sim.URL.Host, Datacenter: sim.Datacenter(), Username: sim.Username,
		Password: sim.Password, Thumbprint: sim.ThumbprintSHA256()})
	if err != nil {
		return err
	}
	got, err := vc.Inventory(ctx)
	if err != nil {
		return err
	}
	if err := cluster.CreateNodes(ctx, c, got); err != nil {
		return err
	}
	if err := createWorkerNodes(ctx, c); err != nil {
		return err
	}
	p := testworld.DayNight(sim, prefix, "bench", gpupoolv1.SecretReference{Name: "vcenter", Namespace: benchNamespace})
	night := testworld.Layout(p, "night")
	night.NodeLabels = map[string]string{"bench.gpupool.dev/workload": "training"}
	w.pool = p.Name
	return c.Create(ctx, p)
}

// checkDemand fails when the passes measured with spec.demand did not read the demand:
// then the measurement would not be one of demand's reads.
func (w *world) checkDemand(ctx context.Context, demand bool) error {
	var p gpupoolv1.GPUPoolProfile
	if err := w.c.Get(ctx, client.ObjectKey{Name: w.pool}, &p); err != nil {
		return err
	}
	if demand && p.Status.Demand == nil {
		return errors.New("the pool has spec.demand but no status.demand: its passes did not read the demand")
	}
	return nil
}

// setDemand sets or removes the pool's spec.demand: a BringIn rule for night, which the
// pending GPU pods (that day serves as well) never trigger, so that the pool does not
// switch under the measurement.
func (w *world) setDemand(ctx context.Context, on bool) error {
	var p gpupoolv1.GPUPoolProfile
	if err := w.c.Get(ctx, client.ObjectKey{Name: w.pool}, &p); err != nil {
		return err
	}
	before := p.DeepCopy()
	p.Spec.Demand = nil
	if on {
		p.Spec.Demand = &gpupoolv1.DemandPolicy{NamespaceSelector: &metav1.LabelSelector{}, Rules: []gpupoolv1.DemandRule{{Layout: "night", Action: gpupoolv1.DemandBringIn}}}
	}
	return w.c.Patch(ctx, &p, client.MergeFrom(before))
}
