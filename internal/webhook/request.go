package webhook

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// +kubebuilder:webhook:path=/validate-gpupool-dev-v1alpha1-gpupoolrequest,mutating=false,failurePolicy=fail,sideEffects=None,groups=gpupool.dev,resources=gpupoolrequests,verbs=create,versions=v1alpha1,name=vgpupoolrequest.gpupool.dev,admissionReviewVersions=v1

// RequestPath is where the GPUPoolRequest webhook is served; it matches the marker above.
const RequestPath = "/validate-gpupool-dev-v1alpha1-gpupoolrequest"

// RequestValidator checks what the CRD's rules cannot, on create (a request's spec
// never changes: the CRD refuses updates of it): that the pool exists, has the layout a
// Switch names, and that until is not already past.
type RequestValidator struct {
	// Reader reads the pool, uncached.
	Reader client.Reader
	// Now is the clock for until; time.Now when nil.
	Now func() time.Time
}

var _ admission.Validator[*gpupoolv1.GPUPoolRequest] = &RequestValidator{}

// SetupWithManager registers the webhook with the manager's webhook server.
func (v *RequestValidator) SetupWithManager(mgr ctrl.Manager) error {
	if v.Reader == nil {
		v.Reader = mgr.GetAPIReader()
	}
	mgr.GetWebhookServer().Register(RequestPath, admission.WithValidator[*gpupoolv1.GPUPoolRequest](mgr.GetScheme(), v))
	return nil
}

// ValidateCreate implements admission.Validator.
func (v *RequestValidator) ValidateCreate(ctx context.Context, q *gpupoolv1.GPUPoolRequest) (admission.Warnings, error) {
	var pool *gpupoolv1.GPUPoolProfile
	if q.Spec.Pool != "" {
		var p gpupoolv1.GPUPoolProfile
		err := v.Reader.Get(ctx, client.ObjectKey{Name: q.Spec.Pool}, &p)
		switch {
		case err == nil:
			pool = &p
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading GPUPoolProfile %s: %w", q.Spec.Pool, err)
		}
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if errs := ValidateRequest(q, pool, now()); len(errs) > 0 {
		return nil, apierrors.NewInvalid(gpupoolv1.GroupVersion.WithKind("GPUPoolRequest").GroupKind(), q.Name, errs)
	}
	return nil, nil
}

// ValidateUpdate implements admission.Validator: the CRD keeps the spec as it was, and
// the status is the operator's.
func (v *RequestValidator) ValidateUpdate(context.Context, *gpupoolv1.GPUPoolRequest, *gpupoolv1.GPUPoolRequest) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDelete implements admission.Validator; deletes are always allowed.
func (v *RequestValidator) ValidateDelete(context.Context, *gpupoolv1.GPUPoolRequest) (admission.Warnings, error) {
	return nil, nil
}

// ValidateRequest checks a new request against its pool (nil: none of that name) at now.
func ValidateRequest(q *gpupoolv1.GPUPoolRequest, pool *gpupoolv1.GPUPoolProfile, now time.Time) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if pool == nil {
		return append(errs, field.Invalid(spec.Child("pool"), q.Spec.Pool,
			"no GPUPoolProfile has this name: name an existing pool (kubectl get gpp lists them)"))
	}
	if q.Spec.Action == gpupoolv1.RequestSwitch && q.Spec.Layout != "" {
		var names []string
		found := false
		for _, l := range pool.Spec.Layouts {
			names = append(names, l.Name)
			found = found || l.Name == q.Spec.Layout
		}
		if !found {
			errs = append(errs, field.Invalid(spec.Child("layout"), q.Spec.Layout,
				fmt.Sprintf("pool %s has no layout of this name: write one of %s", pool.Name, strings.Join(names, ", "))))
		}
	}
	if u := q.Spec.Until; u != nil && !u.After(now) {
		errs = append(errs, field.Invalid(spec.Child("until"), u.UTC().Format(time.RFC3339),
			fmt.Sprintf("is already past (now is %s): write a later time, or spec.duration such as 2h", now.UTC().Format(time.RFC3339))))
	}
	return errs
}
