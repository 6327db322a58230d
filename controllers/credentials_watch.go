package controllers

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	// A watch the manager may not make would never sync and take the whole manager down
	// at start-up (a Role made by an admin for a custom --credentials-namespace that
	// grants get only, or an old Role with a new image): the watch is an optional
	// wake-up, so without list and watch it is left out, and the messages say when a
	// refused Secret is tried again instead (credentialsWatched).
	if ok, why := mayWatchSecrets(context.Background(), mgr.GetConfig(), ns); !ok {
		mgr.GetLogger().Info("Not watching credentials Secrets: a fixed Secret is tried again at the end of the login back-off", "namespace", ns, "reason", why)
		return b, nil
	}
	r.secretsWatched = true
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
	return poolsWhere(ctx, r.Client, func(p *gpupoolv1.GPUPoolProfile) bool {
		ref := p.Spec.VCenter.CredentialsSecretRef
		return ref.Namespace == secret.GetNamespace() && ref.Name == secret.GetName()
	})
}

// credentialsWatched says whether a change of a Secret in namespace ns wakes its pools.
func (r *GPUPoolProfileReconciler) credentialsWatched(ns string) bool {
	return r.secretsWatched && ns != "" && ns == r.Credentials.Namespace
}

// mayWatchSecrets asks the API server (SelfSubjectAccessReview, which every
// authenticated user may create) whether the manager may list and watch Secrets in ns;
// when not, or when it cannot tell, it says why.
func mayWatchSecrets(ctx context.Context, cfg *rest.Config, ns string) (bool, string) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err.Error()
	}
	for _, verb := range []string{"list", "watch"} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "secrets"}}}
		got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, "cannot ask whether Secrets may be watched: " + err.Error()
		}
		if !got.Status.Allowed {
			return false, verb + " on Secrets is not allowed in namespace " + ns
		}
	}
	return true, ""
}
