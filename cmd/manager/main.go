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
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
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
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica acts at a time.")
	flag.StringVar(&leaderNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace; required outside a cluster).")
	flag.BoolVar(&enableWebhook, "enable-webhook", true, "Serve the validating webhook.")
	flag.StringVar(&certDir, "webhook-cert-dir", "", "Folder with tls.crt and tls.key for the webhook server (default: the controller-runtime default).")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the webhook server binds to (default: all).")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	certOpts := bindWebhookCertFlags(flag.CommandLine)
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	exitIfVersion()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
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
	if enableWebhook {
		if err := setupWebhook(mgr, certOpts, certDir, func() error { return (&gpwebhook.Validator{}).SetupWithManager(mgr) }); err != nil {
			log.Error(err, "Unable to set up webhook")
			os.Exit(1)
		}
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setupControllers(ctx, mgr); err != nil {
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
func setupControllers(ctx context.Context, mgr ctrl.Manager) error {
	if err := registerPoolMetrics(mgr); err != nil {
		return err
	}
	r := &controllers.GPUPoolProfileReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("gpupool"),
		Clock:     clock.RealClock{},
		VSphere:   vsphere.NewConnector(vsphere.WithLogger(ctrl.Log.WithName("vsphere"))),
	}
	return r.SetupWithManager(ctx, mgr)
}
