package main

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/controllers"
	"github.com/gpupool/gpupool/internal/secretpolicy"
	"github.com/gpupool/gpupool/vsphere"
)

// liveOptions are plan --live's flags.
type liveOptions struct {
	enabled bool
	at      string
	layout  string
	// credentialsNamespace is --credentials-namespace: when set, the only namespace the
	// credentials Secret may be read from.
	credentialsNamespace string
}

// credentialsPolicy is the namespace policy --live reads the credentials Secret under.
// The operator's policy (its flags) is not known here, and need not be: the plugin reads
// the Secret with the user's own kubeconfig, so the user's RBAC decides whether it may be
// read. By default it trusts exactly the namespace the pool names; with
// --credentials-namespace the user pins the namespace they expect, so a pool naming
// another one is refused before any Secret is read or sent to the pool's vCenter.
func (o liveOptions) credentialsPolicy(pool *gpupoolv1.GPUPoolProfile) secretpolicy.Policy {
	if o.credentialsNamespace != "" {
		return secretpolicy.Policy{Namespace: o.credentialsNamespace}
	}
	return secretpolicy.Policy{Namespace: pool.Spec.VCenter.CredentialsSecretRef.Namespace}
}

// livePlan observes the pool's world as the operator does (the credentials Secret, the
// inventory from vCenter, the nodes and pods) and plans, changing nothing.
func (a *app) livePlan(ctx context.Context, name string, o liveOptions) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	var pool gpupoolv1.GPUPoolProfile
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
		return err
	}
	sc, err := a.screenFor(&pool.Spec)
	if err != nil {
		return err
	}
	// --at's wall-clock time is read in the zone the screen shows, as switch --until's.
	at := sc.now
	if o.at != "" {
		if at, err = parseTime("--at", o.at, sc.loc); err != nil {
			return err
		}
	}
	conn := vsphere.NewConnector()
	defer func() { _ = conn.Close() }()
	r := &controllers.GPUPoolProfileReconciler{Client: c, APIReader: c, VSphere: conn, Credentials: o.credentialsPolicy(&pool)}
	pv, err := r.Preview(ctx, &pool, at, o.layout)
	if err != nil {
		return err
	}
	out := a.streams.Out
	fmt.Fprintf(out, "pool %s at %s, times in %s: wants %s (%s: %s)\n", name, sc.at(at), sc.zone(), pv.Decision.Layout, pv.Decision.Reason, sc.text(pv.Decision.Message))
	if pv.Layout != "" && pv.Layout != pv.Decision.Layout {
		fmt.Fprintf(out, "%s cannot be completed: the plan goes back to %s, the layout the transition started from\n", pv.Decision.Layout, pv.Layout)
	}
	if n := pv.Decision.Next; n != nil && o.layout == "" {
		fmt.Fprintf(out, "next: %s at %s\n", n.Layout, sc.at(n.At))
	}
	if pv.Settling {
		fmt.Fprintln(out, "read while the pool's vSphere tasks run or just ended: a pass would act on none of this and wait for the next read")
	}
	if pv.Conversion != nil {
		fmt.Fprint(out, sc.text(pv.Conversion.String()))
	}
	_, err = fmt.Fprint(out, sc.text(pv.Plan.String()))
	return err
}
