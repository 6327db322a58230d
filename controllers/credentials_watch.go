package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// Credentials Secrets are watched, metadata only, in the credentials namespace
// (--credentials-namespace) alone: a refused login is not tried again for the back-off
// unless the Secret changes (its resourceVersion keys the back-off, vsphere.Config.
// CredentialsVersion), so a fixed Secret must wake its pools. The further allowed
// namespaces are not watched: their Roles, made by an admin, grant only get.

// credentialsSecret is what the watch caches of a Secret: its metadata, never its data.
func credentialsSecret() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return m
}

// credentialsCacheOptions are the options of the cache the Secret watch reads from: the
// credentials namespace only, so that no Secret elsewhere is listed or held.
func credentialsCacheOptions(namespace string) cache.Options {
	return cache.Options{
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	}
}

// watchCredentials adds the Secret watch to b, on a cache of its own (the manager's
// cache watches every namespace) that the manager starts. Without a credentials
// namespace it adds nothing: no pool can use a Secret then.
func (r *GPUPoolProfileReconciler) watchCredentials(mgr ctrl.Manager, b *builder.Builder) (*builder.Builder, error) {
	ns := r.Credentials.Namespace
	if ns == "" {
		return b, nil
	}
	opts := credentialsCacheOptions(ns)
	opts.HTTPClient, opts.Scheme, opts.Mapper = mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper()
	c, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return nil, fmt.Errorf("making the cache of credentials Secrets: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, err
	}
	return b.WatchesRawSource(source.Kind[client.Object](c, credentialsSecret(), handler.EnqueueRequestsFromMapFunc(r.poolsOfSecret))), nil
}

// poolsOfSecret maps a credentials Secret's event (created, changed, deleted) to the
// pools whose spec.vcenter.credentialsSecretRef names it.
func (r *GPUPoolProfileReconciler) poolsOfSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	var pools gpupoolv1.GPUPoolProfileList
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range pools.Items {
		ref := p.Spec.VCenter.CredentialsSecretRef
		if ref.Namespace == secret.GetNamespace() && ref.Name == secret.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.Name}})
		}
	}
	return reqs
}

// credentialsWatched says whether a change of a Secret in namespace ns wakes its pools.
func (r *GPUPoolProfileReconciler) credentialsWatched(ns string) bool {
	return ns != "" && ns == r.Credentials.Namespace
}
