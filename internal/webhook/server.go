package webhook

import (
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/vcenter"
)

// validateVCenter checks where and how vCenter is reached: a server that normalizes (see
// vcenter.NormalizeServer), a datacenter name, a Secret reference made of valid object
// names and a CA bundle that holds a certificate.
func validateVCenter(p *field.Path, vc *gpupoolv1.VCenterSpec) field.ErrorList {
	var errs field.ErrorList
	if _, err := vcenter.NormalizeServer(vc.Server); err != nil {
		errs = append(errs, field.Invalid(p.Child("server"), shown(redactServer(vc.Server)), err.Error()))
	}
	if dc := vc.Datacenter; dc != strings.TrimFunc(dc, unicode.IsSpace) || strings.HasSuffix(dc, "/") || strings.Contains(dc, "//") {
		errs = append(errs, field.Invalid(p.Child("datacenter"), shown(dc),
			"has leading or trailing whitespace or an empty path element; write the datacenter's name as vCenter shows it, such as DC0"))
	}
	ref := p.Child("credentialsSecretRef")
	if msgs := validation.IsDNS1123Subdomain(vc.CredentialsSecretRef.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(ref.Child("name"), shown(vc.CredentialsSecretRef.Name),
			"is not a valid Secret name: "+strings.Join(msgs, "; ")+"; write the name as kubectl get secret shows it, such as vcenter-credentials"))
	}
	if msgs := validation.IsDNS1123Label(vc.CredentialsSecretRef.Namespace); len(msgs) > 0 {
		errs = append(errs, field.Invalid(ref.Child("namespace"), shown(vc.CredentialsSecretRef.Namespace),
			"is not a valid namespace name: "+strings.Join(msgs, "; ")+"; write the namespace as kubectl get namespace shows it, such as gpupool-system"))
	}
	if b := vc.CABundle; len(b) > 0 {
		if err := checkPEM(b); err != nil {
			errs = append(errs, field.Invalid(p.Child("caBundle"), "<PEM data>", err.Error()))
		}
	}
	return errs
}

// redactServer hides the user info of a server string, so that a password pasted into
// it is not repeated in the refusal (which lands in logs and terminals).
func redactServer(s string) string {
	rest, scheme := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i+3], s[i+3:]
	}
	host := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		host = rest[:i]
	}
	if i := strings.LastIndex(host, "@"); i >= 0 {
		return scheme + "***@" + rest[i+1:]
	}
	return s
}
