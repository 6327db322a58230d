// Command manager runs the gpupool operator: the GPUPoolProfile controller and its
// validating webhook.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	gpwebhook "github.com/gpupool/gpupool/internal/webhook"
	"github.com/gpupool/gpupool/vsphere"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(gpupoolv1.AddToScheme(scheme))
}

func main() {
	var (
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
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to authenticated and authorized callers only; false serves plain HTTP to anyone (local runs only).")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "Folder with tls.crt and tls.key for the metrics server (default: a self-signed certificate).")
	flag.StringVar(&credsNamespace, "credentials-namespace", ownNamespace(), "Namespace the vCenter credentials Secrets are read from (default: the operator's own namespace).")
	flag.StringVar(&credsAllowed, "allowed-credentials-namespaces", "", "Further namespaces, comma-separated, that pools may name credentials Secrets in; each also needs a Role and RoleBinding that let the operator get Secrets there.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica acts at a time.")
	flag.StringVar(&leaderNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace; required outside a cluster).")
	flag.BoolVar(&enableWebhook, "enable-webhook", true, "Serve the validating webhook.")
	flag.StringVar(&certDir, "webhook-cert-dir", "", "Folder with tls.crt and tls.key for the webhook server (default: the controller-runtime default).")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the webhook server binds to (default: all).")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	// A transition cordons, labels and evicts on every node it touches; at
	// controller-runtime's default of 20 requests a second a 256-node drain spends most of
	// its time waiting on its own client (the apiserver's priority and fairness still
	// protects the cluster).
	flag.Float64Var(&kubeQPS, "kube-api-qps", 200, "Requests a second to the Kubernetes API the operator allows itself (client-side).")
	flag.IntVar(&kubeBurst, "kube-api-burst", 300, "Burst of requests to the Kubernetes API above --kube-api-qps.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "Address Go's pprof profiles are served on (such as 127.0.0.1:8082); empty: off. Serve it on loopback only: profiles are unauthenticated.")
	certOpts := bindWebhookCertFlags(flag.CommandLine)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	exitIfVersion()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	restCfg := ctrl.GetConfigOrDie()
	restCfg.QPS, restCfg.Burst = float32(kubeQPS), kubeBurst
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme: scheme,
		// The informers hold every Node and Pod (drains read pods by node); their
		// managedFields are never read and are a large part of each object.
		Cache:                   cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Metrics:                 metricsOptions(metricsAddr, metricsSecure, metricsCertDir),
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "gpupool.dev",
		LeaderElectionNamespace: leaderNamespace,
		WebhookServer: certOpts.wrap(webhook.NewServer(webhook.Options{
			Host:    webhookHost,
			Port:    webhookPort,
			CertDir: certDir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }},
		})),
	})
	if err != nil {
		log.Error(err, "Unable to create manager")
		os.Exit(1)
	}
	creds := secretpolicy.Parse(credsNamespace, credsAllowed)
	if len(creds.Namespaces()) == 0 {
		log.Error(nil, "No namespace to read credentials from: set --credentials-namespace")
		os.Exit(1)
	}
	if enableWebhook {
		if err := setupWebhook(mgr, certOpts, certDir, func() error { return (&gpwebhook.Validator{Credentials: creds}).SetupWithManager(mgr) }); err != nil {
			log.Error(err, "Unable to set up webhook")
			os.Exit(1)
		}
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setupControllers(ctx, mgr, creds); err != nil {
		log.Error(err, "Unable to set up controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up ready check")
		os.Exit(1)
	}
	log.Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Manager exited with an error")
		os.Exit(1)
	}
}

// setupControllers registers the reconcilers with the manager.
func setupControllers(ctx context.Context, mgr ctrl.Manager, creds secretpolicy.Policy) error {
	if err := registerPoolMetrics(mgr); err != nil {
		return err
	}
	conn := vsphere.NewConnector(vsphere.WithLogger(ctrl.Log.WithName("vsphere")))
	// Added as a Runnable, the session cache logs out of every vCenter session when the
	// manager stops, so restarts do not leave sessions behind on vCenter.
	if err := mgr.Add(conn); err != nil {
		return err
	}
	r := &controllers.GPUPoolProfileReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("gpupool"),
		Clock:                   clock.RealClock{},
		VSphere:                 conn,
		Credentials:             creds,
		MaxConcurrentReconciles: *maxConcurrentReconciles,
	}
	return r.SetupWithManager(ctx, mgr)
}
