// Command manager runs the gpupool operator: the GPUPoolProfile controller and its
// validating webhook.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/eventwriter"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	gpwebhook "github.com/gpupool/gpupool/internal/webhook"
	"github.com/gpupool/gpupool/vsphere"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(gpupoolv1.AddToScheme(scheme))
}

// options are the manager's flags.
type options struct {
	metricsAddr, probeAddr, certDir string
	leaderNamespace                 string
	webhookHost                     string
	webhookPort                     int
	leaderElect, enableWebhook      bool
	metricsSecure                   bool
	metricsCertDir                  string
	credsNamespace, credsAllowed    string
	kubeQPS                         float64
	pprofAddr                       string
	kubeBurst                       int
	requestRetention                time.Duration
	usageInterval                   time.Duration
	certOpts                        *webhookCertOptions
	zap                             zap.Options
}

func main() {
	o := parseFlags()
	exitIfVersion()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	log := ctrl.Log.WithName("setup")
	fail := func(err error, msg string) {
		log.Error(err, msg)
		os.Exit(1)
	}

	if soft, err := applyMemoryLimit(); err != nil {
		fail(err, "Invalid memory limit")
	} else if soft > 0 {
		log.Info("Soft memory limit set", "bytes", soft)
	}
	if p, err := applyGCPercent(); err != nil {
		fail(nil, err.Error())
	} else if p > 0 {
		log.Info("GC percent set", "percent", p)
	}
	if err := startsLimitError(*maxConcurrentStarts); err != nil {
		fail(nil, err.Error())
	}
	if err := statusIntervalError(*statusWriteInterval); err != nil {
		fail(nil, err.Error())
	}
	if err := minPassIntervalError(*minPassInterval); err != nil {
		fail(nil, err.Error())
	}
	if o.usageInterval < 10*time.Second {
		fail(nil, fmt.Sprintf("--accounting-write-interval %s is too short: at least 10s (default %s)", o.usageInterval, controllers.DefaultUsageInterval))
	}
	mgr, err := newManager(o)
	if err != nil {
		fail(err, "Unable to create manager")
	}
	creds := secretpolicy.Parse(o.credsNamespace, o.credsAllowed)
	if len(creds.Namespaces()) == 0 {
		fail(nil, "No namespace to read credentials from: set --credentials-namespace")
	}
	if o.enableWebhook {
		if err := setupWebhook(mgr, o.certOpts, o.certDir, func() error {
			if err := (&gpwebhook.Validator{Credentials: creds}).SetupWithManager(mgr); err != nil {
				return err
			}
			return (&gpwebhook.RequestValidator{}).SetupWithManager(mgr)
		}); err != nil {
			fail(err, "Unable to set up webhook")
		}
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setupControllers(ctx, mgr, creds, o.requestRetention, o.usageInterval); err != nil {
		fail(err, "Unable to set up controllers")
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fail(err, "Unable to set up health check")
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		fail(err, "Unable to set up ready check")
	}
	log.Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		fail(err, "Manager exited with an error")
	}
}

// parseFlags declares the manager's flags on the command line and parses them.
func parseFlags() *options {
	o := &options{}
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to authenticated and authorized callers only; false serves plain HTTP to anyone (local runs only).")
	flag.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Folder with tls.crt and tls.key for the metrics server (default: a self-signed certificate).")
	flag.StringVar(&o.credsNamespace, "credentials-namespace", ownNamespace(), "Namespace the vCenter credentials Secrets are read from (default: the operator's own namespace).")
	flag.StringVar(&o.credsAllowed, "allowed-credentials-namespaces", "", "Further namespaces, comma-separated, that pools may name credentials Secrets in; each also needs a Role and RoleBinding that let the operator get Secrets there.")
	flag.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica acts at a time.")
	flag.StringVar(&o.leaderNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace; required outside a cluster).")
	flag.BoolVar(&o.enableWebhook, "enable-webhook", true, "Serve the validating webhook.")
	flag.StringVar(&o.certDir, "webhook-cert-dir", "", "Folder with tls.crt and tls.key for the webhook server (default: the controller-runtime default).")
	flag.StringVar(&o.webhookHost, "webhook-host", "", "Address the webhook server binds to (default: all).")
	flag.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	// A transition cordons, labels and evicts on every node it touches; at
	// controller-runtime's default of 20 requests a second a 256-node drain spends most of
	// its time waiting on its own client (the apiserver's priority and fairness still
	// protects the cluster).
	flag.Float64Var(&o.kubeQPS, "kube-api-qps", 200, "Requests a second to the Kubernetes API the operator allows itself (client-side).")
	flag.IntVar(&o.kubeBurst, "kube-api-burst", 300, "Burst of requests to the Kubernetes API above --kube-api-qps.")
	flag.DurationVar(&o.requestRetention, "request-retention", controllers.DefaultRequestRetention, "How long a GPUPoolRequest is kept after it completed, expired or was superseded; then the manager deletes it.")
	flag.DurationVar(&o.usageInterval, "accounting-write-interval", controllers.DefaultUsageInterval, "How often at most a pool's GPUPoolUsage (its GPU-hour accounting of the day) is written: what a crash can lose of the pods that end while the manager is down. At least 10s.")
	flag.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address Go's pprof profiles are served on (such as 127.0.0.1:8082); empty: off. Serve it on loopback only: profiles are unauthenticated.")
	o.certOpts = bindWebhookCertFlags(flag.CommandLine)
	o.zap.BindFlags(flag.CommandLine)
	flag.Parse()
	return o
}

// newManager makes the controller-runtime manager: its client's rate, cache, metrics,
// probes, pprof, leader election and webhook server, as the flags say.
func newManager(o *options) (ctrl.Manager, error) {
	restCfg := ctrl.GetConfigOrDie()
	restCfg.QPS, restCfg.Burst = float32(o.kubeQPS), o.kubeBurst
	return ctrl.NewManager(restCfg, ctrl.Options{
		Scheme: scheme,
		// The informers hold every Node and the pods no node has yet (demand's pending
		// ones; a pool node's pods are watched node by node): managedFields are stripped,
		// and pods and nodes kept to what gpupool reads.
		Cache:                   controllers.CacheOptions(),
		Metrics:                 metricsOptions(o.metricsAddr, o.metricsSecure, o.metricsCertDir),
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "gpupool.dev",
		LeaderElectionNamespace: o.leaderNamespace,
		WebhookServer: o.certOpts.wrap(webhook.NewServer(webhook.Options{
			Host:    o.webhookHost,
			Port:    o.webhookPort,
			CertDir: o.certDir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }},
		})),
	})
}

// setupControllers registers the reconcilers with the manager.
func setupControllers(ctx context.Context, mgr ctrl.Manager, creds secretpolicy.Policy, retention, usageInterval time.Duration) error {
	if err := registerPoolMetrics(mgr); err != nil {
		return err
	}
	conn := vsphere.NewConnector(vsphere.WithLogger(ctrl.Log.WithName("vsphere")), vsphere.WithWatchedInventory(*watchMinVMs))
	// Added as a Runnable, the session cache logs out of every vCenter session when the
	// manager stops, so restarts do not leave sessions behind on vCenter.
	if err := mgr.Add(conn); err != nil {
		return err
	}
	// gpupool's own events writer, not controller-runtime's recorder: client-go's
	// broadcaster behind it keeps every event for minutes (internal/eventwriter).
	sink, err := eventwriter.NewAPISink(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	recorder := eventwriter.New(sink, mgr.GetScheme(), eventwriter.Options{Controller: "gpupool", Log: ctrl.Log.WithName("events")})
	if err := mgr.Add(recorder); err != nil {
		return err
	}
	r := &controllers.GPUPoolProfileReconciler{
		// Every write goes under gpupool's own field manager (the Kueue controller's
		// under gpupool-kueue), so that GitOps tools can tell them apart (docs/gitops.md).
		Client:                  client.WithFieldOwner(mgr.GetClient(), controllers.FieldOwner),
		APIReader:               mgr.GetAPIReader(),
		Recorder:                recorder,
		Clock:                   clock.RealClock{},
		VSphere:                 conn,
		Credentials:             creds,
		MaxConcurrentReconciles: *maxConcurrentReconciles,
		MaxConcurrentStarts:     *maxConcurrentStarts,
		RequestRetention:        retention,
		UsageInterval:           usageInterval,
		StatusInterval:          *statusWriteInterval,
		MinPassInterval:         *minPassInterval,
	}
	return r.SetupWithManager(ctx, mgr)
}
