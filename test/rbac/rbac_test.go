// Package rbac_test checks the generated and hand-written RBAC in config/rbac against
// what the operator uses: any rule wider than the list below fails the test, so that a
// new permission is a reviewed change of this list and the permissions table of docs/security.md.
package rbac_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// grant is one permission: in a ClusterRole (namespaced=false) or a Role.
type grant struct {
	role       string
	namespaced bool
	group      string
	resource   string // or a non-resource URL
	verb       string
}

// used lists every permission the operator needs, and why (see docs/security.md).
var used = map[string]string{
	// The GPUPoolProfile controller.
	"manager-role  nodes get,list,watch,patch":                               "node labels, taints, cordon",
	"manager-role  pods get,list,watch,delete":                               "drain; delete only for drain.mode Force",
	"manager-role  pods/eviction create":                                     "drain",
	"manager-role  namespaces get,list,watch":                                "spec.demand.namespaceSelector: the labels of namespaces, whose pods count as demand; spec.accounting.tenantLabel: a pod's tenant",
	"manager-role batch jobs get":                                            "spec.demand: a pod of a Job near completion holds a demand switch back (read by name, not cached)",
	"manager-role events.k8s.io events create,patch":                         "events on pools and their nodes",
	"manager-role cluster.x-k8s.io machines get,list,patch":                  "pause remediation of parked machines; list a MachineDeployment's Machines (select.machineDeployment, read uncached)",
	"manager-role infrastructure.cluster.x-k8s.io vspheremachines get,patch": "the same on CAPV's infrastructure machine",
	"manager-role infrastructure.cluster.x-k8s.io vspherevms get,patch":      "pause the VSphereVM too: CAPV powers VMs on from it, honouring only its own pause",
	"manager-role gpupool.dev gpupoolprofiles get,list,watch,update":         "read pools, the finalizer",
	"manager-role gpupool.dev gpupoolprofiles/status patch":                  "status",
	"manager-role gpupool.dev gpupoolprofiles/finalizers update":             "owner references on clusters that enforce them",
	"manager-role gpupool.dev gpupoolrequests list,watch,delete":             "the pools' GPUPoolRequests; delete: --request-retention after they ended",
	"manager-role gpupool.dev gpupoolrequests/status patch":                  "the requests' phase",
	"manager-role gpupool.dev gpupoolusages get,list,create,update,delete":   "the pools' daily GPU-hour accounting; delete: past spec.accounting.retentionDays (read uncached)",
	"manager-role kueue.x-k8s.io workloads list,watch":                       "spec.kueue: Workloads that wait for a layout (the check, demand)",
	"manager-role kueue.x-k8s.io workloads/status patch":                     "spec.kueue: gpupool's admission check state on a Workload",
	"manager-role kueue.x-k8s.io clusterqueues list,watch,patch":             "spec.kueue: the flavors' nominalQuota in opted-in ClusterQueues (watched as metadata: a new opted-in queue gets its quota at once)",
	"manager-role kueue.x-k8s.io admissionchecks list,watch":                 "spec.kueue: the AdmissionChecks with controllerName gpupool.dev/layout (watched as metadata)",
	"manager-role kueue.x-k8s.io admissionchecks/status patch":               "spec.kueue: their Active condition",
	"manager-role resource.k8s.io resourceclaims get":                        "readiness.dra: the devices a pending pod's claims ask for (demand)",
	"manager-role resource.k8s.io resourceclaimtemplates get":                "readiness.dra: the devices a pod's claim template asks for (demand)",
	"manager-role resource.k8s.io resourceslices list":                       "readiness.dra: the devices the driver publishes for the pool's nodes (readiness for work)",
	"ns:manager-role  secrets get,list,watch":                                "vCenter credentials, operator namespace only; list, watch: a changed Secret wakes its pools (metadata only)",
	// Leader election, in the operator's namespace.
	"ns:leader-election-role coordination.k8s.io leases get,list,watch,create,update,patch,delete": "leader election",
	"ns:leader-election-role  events create,patch":                                                 "leader election events",
	// Metrics over HTTPS with authentication and authorization.
	"metrics-auth-role authentication.k8s.io tokenreviews create":        "authenticate scrapers",
	"metrics-auth-role authorization.k8s.io subjectaccessreviews create": "authorize scrapers",
	"metrics-reader  /metrics get":                                       "granted to scrapers",
	// For people using kubectl gpupool, not the operator (bound by an admin).
	"viewer gpupool.dev gpupoolprofiles get,list,watch":                  "kubectl gpupool status, plan, history, timeline",
	"viewer gpupool.dev gpupoolrequests get,list,watch":                  "kubectl get gpr, kubectl gpupool status",
	"viewer gpupool.dev gpupoolusages get,list,watch":                    "kubectl gpupool report",
	"editor gpupool.dev gpupoolprofiles patch":                           "kubectl gpupool switch, resume, pause, unpause --in-spec",
	"requester gpupool.dev gpupoolrequests create,delete,get,list,watch": "kubectl gpupool switch, resume, pause, unpause (GPUPoolRequests)",
}

func allowed() map[grant]bool {
	out := map[grant]bool{}
	for k := range used {
		f := strings.Split(k, " ")
		role, ns := f[0], false
		if r, ok := strings.CutPrefix(role, "ns:"); ok {
			role, ns = r, true
		}
		for _, v := range strings.Split(f[3], ",") {
			out[grant{role: role, namespaced: ns, group: f[1], resource: f[2], verb: v}] = true
		}
	}
	return out
}

// roles reads every Role and ClusterRole under config/rbac.
func roles(t *testing.T) (cluster []rbacv1.ClusterRole, namespaced []rbacv1.Role) {
	t.Helper()
	files, err := filepath.Glob("../../config/rbac/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no RBAC files: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			switch tm.Kind {
			case "ClusterRole":
				var r rbacv1.ClusterRole
				if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				cluster = append(cluster, r)
			case "Role":
				var r rbacv1.Role
				if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				namespaced = append(namespaced, r)
			}
		}
	}
	return cluster, namespaced
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	cluster, namespaced := roles(t)
	ok := allowed()
	seen := map[grant]bool{}
	check := func(role string, ns bool, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.NonResourceURLs} {
				if slices.ContainsFunc(field, func(s string) bool { return strings.Contains(s, "*") }) {
					t.Errorf("%s: wildcard in rule %+v: list what is used", role, r)
				}
			}
			if len(r.ResourceNames) > 0 {
				continue // narrower than the resource: fine
			}
			if !ns && slices.Contains(r.Resources, "secrets") {
				t.Errorf("%s: cluster-wide access to Secrets (%v): anyone who may create a pool could read any Secret through the operator", role, r.Verbs)
			}
			targets := r.Resources
			groups := r.APIGroups
			if len(r.NonResourceURLs) > 0 {
				targets, groups = r.NonResourceURLs, []string{""}
			}
			for _, g := range groups {
				for _, res := range targets {
					for _, v := range r.Verbs {
						gr := grant{role: role, namespaced: ns, group: g, resource: res, verb: v}
						seen[gr] = true
						if !ok[gr] {
							t.Errorf("%s: grants %s on %s/%s, which the operator does not use (namespaced role: %v)", role, v, g, res, ns)
						}
					}
				}
			}
		}
	}
	for _, r := range cluster {
		check(r.Name, false, r.Rules)
	}
	for _, r := range namespaced {
		if r.Namespace != "system" {
			t.Errorf("Role %s is in namespace %q, not the operator's (system before kustomize)", r.Name, r.Namespace)
		}
		check(r.Name, true, r.Rules)
	}
	// The list above must not keep permissions that are gone: it is the documentation.
	for g := range ok {
		if !seen[g] {
			t.Errorf("permission %+v is listed as used but no role grants it: remove it from the list", g)
		}
	}
}
