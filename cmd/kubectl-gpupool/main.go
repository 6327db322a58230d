// Command kubectl-gpupool previews what gpupool would do with a pool, without changing
// anything. As a kubectl plugin (on PATH): `kubectl gpupool plan NAME`.
//
//	kubectl-gpupool plan daynight                         # what is due now
//	kubectl-gpupool plan daynight --at 2026-12-01T20:00:00+01:00
//	kubectl-gpupool plan daynight --layout night          # plan for a layout, e.g. before an override
//
// It reads the pool, its credentials Secret, the nodes and pods with the current
// kubeconfig, and the inventory from vCenter, exactly as the operator observes them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/version"
	"github.com/gpupool/gpupool/vsphere"
)

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl-gpupool:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "version") {
		fmt.Println("kubectl-gpupool", version.Get())
		return nil
	}
	if len(args) < 2 || args[0] != "plan" {
		return errors.New("usage: kubectl-gpupool plan NAME [--at RFC3339] [--layout NAME]")
	}
	name := args[1]
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	at := fs.String("at", "", "plan for the layout wanted at this time (RFC 3339); default now")
	layout := fs.String("layout", "", "plan for this layout instead of the scheduled one")
	if err := fs.Parse(args[2:]); err != nil {
		return err
	}
	when := time.Now()
	if *at != "" {
		t, err := time.Parse(time.RFC3339, *at)
		if err != nil {
			return fmt.Errorf("--at: %w", err)
		}
		when = t
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = gpupoolv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	var pool gpupoolv1.GPUPoolProfile
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
		return err
	}
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	r := &controllers.GPUPoolProfileReconciler{Client: c, APIReader: c, VSphere: conn}
	pv, err := r.Preview(ctx, &pool, when, *layout)
	if err != nil {
		return err
	}
	fmt.Printf("pool %s at %s: wants %s (%s: %s)\n", name, when.Format(time.RFC3339), pv.Decision.Layout, pv.Decision.Reason, pv.Decision.Message)
	if n := pv.Decision.Next; n != nil && *layout == "" {
		fmt.Printf("next: %s at %s\n", n.Layout, n.At.Format(time.RFC3339))
	}
	fmt.Print(pv.Plan.String())
	return nil
}
