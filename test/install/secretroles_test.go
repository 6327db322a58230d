package install

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestChartSecretRolesPerNamespace: the chart lets the manager list and watch Secrets
// only in the credentials namespace (its metadata-only watch of credentials Secrets);
// in the further allowed namespaces it may only get a named Secret, since list would
// return every Secret's data there.
func TestChartSecretRolesPerNamespace(t *testing.T) {
	out := helm(t, "template", "gpupool", "charts/gpupool", "--namespace", "gpupool-system",
		"--set", "allowedCredentialsNamespaces={team-a,team-b}")
	verbs := map[string][]string{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var role rbacv1.Role
		if err := dec.Decode(&role); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if role.Kind != "Role" || !strings.HasSuffix(role.Name, "-manager-role") {
			continue // the certificate Role has its own Secret rules
		}
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "secrets") {
				verbs[role.Namespace] = append(verbs[role.Namespace], r.Verbs...)
			}
		}
	}
	for ns, want := range map[string][]string{"gpupool-system": {"get", "list", "watch"}, "team-a": {"get"}, "team-b": {"get"}} {
		got := slices.Sorted(slices.Values(verbs[ns]))
		if !slices.Equal(got, want) {
			t.Errorf("namespace %s: Secrets verbs %v, want %v", ns, got, want)
		}
	}
}
