package webhook

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
)

// +kubebuilder:webhook:path=/validate-gpupool-dev-v1alpha1-gpupoolprofile,mutating=false,failurePolicy=fail,sideEffects=None,groups=gpupool.dev,resources=gpupoolprofiles,verbs=create;update,versions=v1alpha1,name=vgpupoolprofile.gpupool.dev,admissionReviewVersions=v1

// Path is where the webhook is served; it matches the marker above.
const Path = "/validate-gpupool-dev-v1alpha1-gpupoolprofile"

// Validator validates GPUPoolProfiles on create and update.
type Validator struct {
	// Reader lists the other GPUPoolProfiles for the claims check. The API reader is used
	// rather than the cache so that two pools created back to back still see each other.
	Reader client.Reader
	// Now is the clock for warnings about times already past; time.Now when nil.
	Now func() time.Time
	// Credentials lists the namespaces credentials Secrets may be named in; the zero
	// value allows none.
	Credentials secretpolicy.Policy
}

var _ admission.Validator[*gpupoolv1.GPUPoolProfile] = &Validator{}

// SetupWithManager registers the webhook with the manager's webhook server. The typed
// validator is wrapped by a check of the raw object, so that a value the Go types cannot
// decode is refused with its field rather than with a decoding error.
func (v *Validator) SetupWithManager(mgr ctrl.Manager) error {
	if v.Reader == nil {
		v.Reader = mgr.GetAPIReader()
	}
	hook := admission.WithValidator[*gpupoolv1.GPUPoolProfile](mgr.GetScheme(), v)
	hook.Handler = rawGuard{next: hook.Handler}
	mgr.GetWebhookServer().Register(Path, hook)
	return nil
}

// ValidateCreate implements admission.Validator.
func (v *Validator) ValidateCreate(ctx context.Context, obj *gpupoolv1.GPUPoolProfile) (admission.Warnings, error) {
	return v.validate(ctx, nil, obj)
}

// ValidateUpdate implements admission.Validator. Some updates are always admitted, so
// that an admin can always stop or remove a pool whose spec no longer passes (rules got
// stricter, or another pool now claims one of its VMs): updates of an object being
// deleted, updates that change nothing in the spec (finalizer removal, labels,
// annotations), and updates that only set spec.paused to true.
func (v *Validator) ValidateUpdate(ctx context.Context, old, obj *gpupoolv1.GPUPoolProfile) (admission.Warnings, error) {
	if old.DeletionTimestamp != nil || obj.DeletionTimestamp != nil {
		return nil, nil
	}
	if specUnchangedOrPausing(&old.Spec, &obj.Spec) {
		return nil, nil
	}
	return v.validate(ctx, old, obj)
}

// ValidateDelete implements admission.Validator; deletes are always allowed.
func (v *Validator) ValidateDelete(context.Context, *gpupoolv1.GPUPoolProfile) (admission.Warnings, error) {
	return nil, nil
}

// validate checks obj, and its VM and ResourceFlavor claims against the other pools when
// they are new: on create, or on an update (old is set) that changes the server, the
// datacenter or adds VMs, or maps a flavor it did not. A pool that only keeps or drops
// VMs or flavors is not blocked by a conflict it already had.
func (v *Validator) validate(ctx context.Context, old, obj *gpupoolv1.GPUPoolProfile) (admission.Warnings, error) {
	errs := ValidateName(obj.Name)
	errs = append(errs, ValidateSpec(&obj.Spec)...)
	errs = append(errs, ValidateCredentialsNamespace(&obj.Spec, v.Credentials)...)
	var oldSpec *gpupoolv1.GPUPoolProfileSpec
	if old != nil {
		oldSpec = &old.Spec
	}
	if claimsChanged(oldSpec, &obj.Spec) || flavorsAdded(oldSpec, &obj.Spec) {
		var others gpupoolv1.GPUPoolProfileList
		if err := v.Reader.List(ctx, &others); err != nil {
			return nil, fmt.Errorf("listing GPUPoolProfiles to check VM and flavor claims: %w", err)
		}
		errs = append(errs, ValidateNewClaims(obj.Name, oldSpec, &obj.Spec, others.Items)...)
		errs = append(errs, ValidateNewFlavors(obj.Name, oldSpec, &obj.Spec, others.Items)...)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	warnings := admission.Warnings(Warnings(&obj.Spec, now()))
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(gpupoolv1.GroupVersion.WithKind("GPUPoolProfile").GroupKind(), obj.Name, errs)
	}
	return warnings, nil
}
