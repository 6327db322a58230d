package webhook

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/secretpolicy"
)

// +kubebuilder:webhook:path=/validate-gpupool-dev-v1alpha1-gpupoolprofile,mutating=false,failurePolicy=fail,sideEffects=None,groups=gpupool.dev,resources=gpupoolprofiles,verbs=create;update,versions=v1alpha1,name=vgpupoolprofile.gpupool.dev,admissionReviewVersions=v1

// Validator validates GPUPoolProfiles on create and update.
type Validator struct {
	// Reader lists the other GPUPoolProfiles for the claims check. The API reader is used
	// rather than the cache so that two pools created back to back still see each other.
	Reader client.Reader
	// Credentials lists the namespaces credentials Secrets may be named in; the zero
	// value allows none.
	Credentials secretpolicy.Policy
}

var _ admission.Validator[*gpupoolv1.GPUPoolProfile] = &Validator{}

// SetupWithManager registers the webhook with the manager's webhook server.
func (v *Validator) SetupWithManager(mgr ctrl.Manager) error {
	if v.Reader == nil {
		v.Reader = mgr.GetAPIReader()
	}
	return ctrl.NewWebhookManagedBy(mgr, &gpupoolv1.GPUPoolProfile{}).WithValidator(v).Complete()
}

// ValidateCreate implements admission.Validator.
func (v *Validator) ValidateCreate(ctx context.Context, obj *gpupoolv1.GPUPoolProfile) (admission.Warnings, error) {
	return v.validate(ctx, obj, true)
}

// ValidateUpdate implements admission.Validator.
func (v *Validator) ValidateUpdate(ctx context.Context, old, obj *gpupoolv1.GPUPoolProfile) (admission.Warnings, error) {
	if skipsValidation(old, obj) {
		return nil, nil
	}
	return v.validate(ctx, obj, claimsChanged(old, obj))
}

// ValidateDelete implements admission.Validator; deletes are always allowed.
func (v *Validator) ValidateDelete(context.Context, *gpupoolv1.GPUPoolProfile) (admission.Warnings, error) {
	return nil, nil
}

func (v *Validator) validate(ctx context.Context, obj *gpupoolv1.GPUPoolProfile, checkClaims bool) (admission.Warnings, error) {
	errs := ValidateSpec(&obj.Spec)
	errs = append(errs, ValidateCredentialsNamespace(&obj.Spec, v.Credentials)...)
	if checkClaims {
		var others gpupoolv1.GPUPoolProfileList
		if err := v.Reader.List(ctx, &others); err != nil {
			return nil, fmt.Errorf("listing GPUPoolProfiles to check VM claims: %w", err)
		}
		errs = append(errs, ValidateClaims(obj.Name, &obj.Spec, others.Items)...)
	}
	var warnings admission.Warnings
	if obj.Spec.VCenter.Insecure {
		warnings = append(warnings, "spec.vcenter.insecure is true: the vCenter certificate is not verified; set thumbprint or caBundle for production")
	}
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(gpupoolv1.GroupVersion.WithKind("GPUPoolProfile").GroupKind(), obj.Name, errs)
	}
	return warnings, nil
}
