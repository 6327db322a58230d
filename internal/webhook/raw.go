package webhook

import (
	"context"
	"encoding/json"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
)

// rawGuard refuses, with the field and the value, what the API server stores but the Go
// types cannot decode. The API server's date-time format accepts a lower-case t or z
// ("2026-12-01t06:00:00z"); metav1.Time does not, and the typed validator would answer
// with a decoding error that names no field.
type rawGuard struct {
	next admission.Handler
}

func (g rawGuard) Handle(ctx context.Context, req admission.Request) admission.Response {
	if len(req.Object.Raw) > 0 {
		if errs := checkRaw(req.Object.Raw); len(errs) > 0 {
			var obj struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			_ = json.Unmarshal(req.Object.Raw, &obj)
			status := apierrors.NewInvalid(gpupoolv1.GroupVersion.WithKind("GPUPoolProfile").GroupKind(), obj.Metadata.Name, errs).ErrStatus
			resp := admission.Denied(status.Message)
			resp.Result = &status
			return resp
		}
	}
	return g.next.Handle(ctx, req)
}

// checkRaw decodes the parts of an object that the Go types parse more strictly than the
// API server, and as a last resort the whole object.
func checkRaw(raw []byte) field.ErrorList {
	var partial struct {
		Spec struct {
			Override *struct {
				Until *string `json:"until"`
			} `json:"override"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &partial); err == nil {
		if o := partial.Spec.Override; o != nil && o.Until != nil && *o.Until != "" {
			if _, err := time.Parse(time.RFC3339, *o.Until); err != nil {
				return field.ErrorList{field.Invalid(field.NewPath("spec", "override", "until"), shown(*o.Until),
					"is not an RFC 3339 time as gpupool reads it; write it with an upper-case T and Z or an offset, such as 2026-12-01T06:00:00Z or 2026-12-01T07:00:00+01:00")}
			}
		}
	}
	var full gpupoolv1.GPUPoolProfile
	if err := json.Unmarshal(raw, &full); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec"), "<object>", "does not decode into GPUPoolProfile ("+shown(err.Error())+"); fix the value the message names")}
	}
	return nil
}
