package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/inventory"
	"github.com/gpupool/gpupool/internal/world"
	"github.com/gpupool/gpupool/vsphere"
)

// Secrets are read only in the namespaces the credentials policy allows: the generated
// Role below is namespaced (the operator's namespace, "system" before kustomize names
// it); other namespaces need a Role and RoleBinding from an admin. list and watch are
// for the watch of credentials Secrets (credentials_watch.go), metadata only.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;list;watch

// ReasonCredentialsNotAllowed: the pool names a Secret outside the allowed namespaces.
const ReasonCredentialsNotAllowed = "CredentialsNamespaceNotAllowed"

// loginRetryDefault is the requeue after a refused login when the connector does not say
// when it will try again: the documented back-off.
const loginRetryDefault = vsphere.LoginBackoff

// connectVCenter reads the pool's credentials and logs in (or reuses the session). It
// reports false, with when to look again, when the pool cannot go on now; the facts
// then say why, naming the server without any user info and never the password. It reads
// no inventory: a pass checks its tasks in flight first (checkTasks), then reads what
// they change (readInventory).
func (r *GPUPoolProfileReconciler) connectVCenter(ctx context.Context, s *scope) (vsphere.Client, time.Duration, bool) {
	vc := s.pool.Spec.VCenter
	key := types.NamespacedName{Namespace: vc.CredentialsSecretRef.Namespace, Name: vc.CredentialsSecretRef.Name}
	if !r.Credentials.Allows(key.Namespace) {
		// Admission refuses this; a pool that got through (webhook down, flag changed)
		// is held here, before any Secret is read.
		s.facts.credentialsReason, s.facts.credentials = ReasonCredentialsNotAllowed, r.Credentials.Refusal(key.Namespace)
		return nil, requeueBlocked, false
	}
	var secret corev1.Secret
	// Read uncached: caching would watch Secrets.
	if err := r.APIReader.Get(ctx, key, &secret); err != nil {
		s.facts.credentials = fmt.Sprintf("cannot read Secret %s with the vCenter credentials: %v", key, err)
		return nil, requeueBlocked, false
	}
	user, pass := string(secret.Data["username"]), string(secret.Data["password"])
	if user == "" || pass == "" {
		s.facts.credentials = fmt.Sprintf("Secret %s must have the keys username and password", key)
		return nil, requeueBlocked, false
	}
	vcc, err := r.VSphere.Connect(ctx, vsphere.Config{
		Server: vc.Server, Datacenter: vc.Datacenter, Username: user, Password: pass,
		Thumbprint: vc.Thumbprint, CABundle: vc.CABundle, Insecure: vc.Insecure,
		CredentialsVersion: secret.ResourceVersion, Owner: s.pool.Name,
	})
	if err != nil {
		return nil, r.vcenterFailed(ctx, s, err), false
	}
	return vcc, 0, true
}

// readInventory reads the pool's part of the vSphere inventory through the session
// connectVCenter opened (s.vc). It reports false, with when to look again, as
// connectVCenter does.
func (r *GPUPoolProfileReconciler) readInventory(ctx context.Context, s *scope) (*inventory.Inventory, time.Duration, bool) {
	inv, err := s.vc.Inventory(ctx, world.PoolVMs(&s.pool.Spec)...)
	if err != nil {
		return nil, r.vcenterFailed(ctx, s, err), false
	}
	return inv, 0, true
}

// vcenterFailed records why vCenter could not be used (a refused login, or vCenter
// unreachable or failing) in the facts and returns when to try again.
func (r *GPUPoolProfileReconciler) vcenterFailed(ctx context.Context, s *scope, err error) time.Duration {
	vc := s.pool.Spec.VCenter
	server := displayServer(vc.Server)
	key := types.NamespacedName{Namespace: vc.CredentialsSecretRef.Namespace, Name: vc.CredentialsSecretRef.Name}
	if errors.Is(err, vsphere.ErrInvalidLogin) {
		// Whatever triggers the next reconcile, the connector does not log in with these
		// credentials before the back-off ends; come back then.
		retry := loginRetryDefault
		var lre *vsphere.LoginRefusedError
		if errors.As(err, &lre) {
			retry = max(lre.RetryIn, time.Second) // the connector's clock, not r.Clock
		}
		s.facts.credentials = r.refusedMessage(server, key, retry)
		return retry
	}
	s.facts.vcenter = fmt.Sprintf("vCenter %s: %v", server, err)
	log.FromContext(ctx).Info("vCenter unavailable", "server", server, "error", err.Error())
	return requeueVCenter
}

// refusedMessage says when refused credentials are tried again: at once when their
// Secret changes if it is watched (credentialsWatched), else at the end of the back-off
// or at the pool's next reconcile after a change.
func (r *GPUPoolProfileReconciler) refusedMessage(server string, key types.NamespacedName, retry time.Duration) string {
	if r.credentialsWatched(key.Namespace) {
		return fmt.Sprintf("vCenter %s refused the credentials in Secret %s; they are not tried again for %s unless the Secret changes",
			server, key, retry.Round(time.Second))
	}
	watched := fmt.Sprintf("only Secrets in namespace %q are watched", r.Credentials.Namespace)
	if !r.secretsWatched {
		watched = "Secrets are not watched: the manager may not list and watch them"
	}
	return fmt.Sprintf("vCenter %s refused the credentials in Secret %s; they are tried again in %s, or at the pool's next reconcile once the Secret changes (%s)",
		server, key, retry.Round(time.Second), watched)
}

// displayServer is spec.vcenter.server as it may be shown in conditions, events and logs:
// any user info (which could hold a password) is cut off, whether or not the rest parses.
func displayServer(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "***@" + s[i+1:]
	}
	return s
}

// releaseSession tells the connector that a deleted pool no longer uses its vCenter
// session, so that a session no other pool uses is logged out.
func (r *GPUPoolProfileReconciler) releaseSession(pool *gpupoolv1.GPUPoolProfile) {
	if rel, ok := r.VSphere.(interface{ Release(owner string) }); ok {
		rel.Release(pool.Name)
	}
}
