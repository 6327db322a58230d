// Package testworld is the one harness of the test suites that run the reconciler on
// vgpusim (controllers, cmd/kubectl-gpupool): the control plane's start and stop around
// the tests (Main), the scheme, the fixed Monday the fake clocks start at, the day/night
// pool pointed at a test's simulator, the Secret with the simulator's credentials, the
// install's RBAC read from config/rbac and bound to test users, and the converge loop
// (Loop) that reconciles, lets the world settle and steps the fake clock, bounded.
// The suites keep only what differs: their nodes and kubelets, which users they make,
// what a pass does besides Reconcile (faults, restarts, recording steps), and the
// reconciler itself, which a package the controllers' own tests import cannot build.
package testworld

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	gpupoolv1 "github.com/gpupool/gpupool/api/v1alpha1"
	"github.com/gpupool/gpupool/internal/testenv"
	"github.com/gpupool/gpupool/test/vgpusim"
)

// Berlin is the zone of the day/night schedule.
var Berlin = func() *time.Location {
	l, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	return l
}()

// VCenterSecret is a credentials Secret with the simulator's user and password.
func VCenterSecret(sim *vgpusim.Sim, name, namespace string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		StringData: map[string]string{"username": sim.Username, "password": sim.Password},
	}
}

// DayNight is the day/night sample (samples/daynight.yaml) on the simulator of
// vgpusim.OneHostDayNight filled in with prefix: four grid_p100-4q VMs by day (08:00,
// twelve hours on weekdays in Berlin, ten minutes' lead time), one grid_p100-16q VM
// otherwise, credentials from secret. Suites add their labels, taints and parking.
func DayNight(sim *vgpusim.Sim, prefix, name string, secret gpupoolv1.SecretReference) *gpupoolv1.GPUPoolProfile {
	workers := func(profile string, vms ...string) []gpupoolv1.Worker {
		var ws []gpupoolv1.Worker
		for _, vm := range vms {
			ws = append(ws, gpupoolv1.Worker{VM: prefix + vm, Profile: profile})
		}
		return ws
	}
	return &gpupoolv1.GPUPoolProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gpupoolv1.GPUPoolProfileSpec{
			VCenter: gpupoolv1.VCenterSpec{
				Server: sim.URL.Host, Datacenter: sim.Datacenter(), Thumbprint: sim.ThumbprintSHA256(),
				CredentialsSecretRef: secret,
			},
			Layouts: []gpupoolv1.Layout{
				{Name: "day", Workers: workers("grid_p100-4q", "day-1", "day-2", "day-3", "day-4")},
				{Name: "night", Workers: workers("grid_p100-16q", "night-1")},
			},
			Schedule: &gpupoolv1.Schedule{
				TimeZone: "Europe/Berlin",
				Windows:  []gpupoolv1.Window{{Layout: "day", Start: "0 8 * * 1-5", Duration: metav1.Duration{Duration: 12 * time.Hour}}},
				LeadTime: &metav1.Duration{Duration: 10 * time.Minute},
			},
			DefaultLayout: "night",
		},
	}
}

// Layout is the pool's layout of that name, for a suite to add to it.
func Layout(p *gpupoolv1.GPUPoolProfile, name string) *gpupoolv1.Layout {
	for i := range p.Spec.Layouts {
		if p.Spec.Layouts[i].Name == name {
			return &p.Spec.Layouts[i]
		}
	}
	panic("testworld: no layout " + name)
}

// ReadRBAC reads the ClusterRoles and Roles of a file of config/rbac (YAML documents
// separated by ---), so that tests grant exactly what the install grants.
func ReadRBAC(file string) ([]rbacv1.ClusterRole, []rbacv1.Role, error) {
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "config", "rbac", file))
	if err != nil {
		return nil, nil, err
	}
	var clusterRoles []rbacv1.ClusterRole
	var roles []rbacv1.Role
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		switch meta.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			err = yaml.UnmarshalStrict([]byte(doc), &r)
			clusterRoles = append(clusterRoles, r)
		case "Role":
			var r rbacv1.Role
			err = yaml.UnmarshalStrict([]byte(doc), &r)
			roles = append(roles, r)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	return clusterRoles, roles, nil
}

// BindClusterRole binds the ClusterRole role to the user, with a binding named name.
func BindClusterRole(ctx context.Context, c client.Client, name, role, user string) error {
	return c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})
}
