// Package secretpolicy decides from which namespaces gpupool may read vCenter
// credentials. Whoever may create a GPUPoolProfile chooses the vCenter the operator logs
// in to; if they could also name any Secret, they could have the operator send that
// Secret's username and password to a host of theirs. So, like cert-manager's
// cluster-resource namespace, credentials come from the operator's own namespace, or
// from namespaces an admin lists explicitly.
package secretpolicy

import (
	"fmt"
	"slices"
	"strings"
)

// Policy lists the namespaces credentials Secrets may live in. The zero Policy allows
// none: a controller or webhook that was not told where credentials live reads none.
type Policy struct {
	// Namespace is the operator's own namespace (--credentials-namespace).
	Namespace string
	// Allowed are further namespaces an admin allows (--allowed-credentials-namespaces).
	// The operator also needs RBAC to read Secrets there: a Role and RoleBinding per
	// namespace, which is the admin's explicit act.
	Allowed []string
}

// Parse builds a Policy from the manager's flags: the own namespace and a comma-separated
// list of further namespaces.
func Parse(namespace, allowed string) Policy {
	p := Policy{Namespace: strings.TrimSpace(namespace)}
	for _, ns := range strings.Split(allowed, ",") {
		if ns = strings.TrimSpace(ns); ns != "" && ns != p.Namespace && !slices.Contains(p.Allowed, ns) {
			p.Allowed = append(p.Allowed, ns)
		}
	}
	return p
}

// Allows reports whether a credentials Secret may be read from namespace ns.
func (p Policy) Allows(ns string) bool {
	if ns == "" {
		return false
	}
	return ns == p.Namespace || slices.Contains(p.Allowed, ns)
}

// Namespaces lists the allowed namespaces, the operator's own first.
func (p Policy) Namespaces() []string {
	var out []string
	if p.Namespace != "" {
		out = append(out, p.Namespace)
	}
	return append(out, p.Allowed...)
}

// Refusal explains why a Secret in namespace ns is not read.
func (p Policy) Refusal(ns string) string {
	allowed := p.Namespaces()
	if len(allowed) == 0 {
		return fmt.Sprintf("credentials Secrets may not be read from namespace %q: the operator allows no namespace (set --credentials-namespace)", ns)
	}
	return fmt.Sprintf("credentials Secrets may not be read from namespace %q: put the Secret in %s, or have an admin add the namespace to --allowed-credentials-namespaces",
		ns, strings.Join(quote(allowed), " or "))
}

func quote(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
