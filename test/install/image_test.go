package install

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupool/gpupool/internal/testenv"
)

// TestInstallerRendersCustomImage: 'make build-installer INSTALL_IMG=...' (the README's
// way to install your own image) names that image in every manager container of both
// manifests. It renders into a temporary directory, never dist/. The image has a
// registry port and a digest, which a naive split on ':' gets wrong.
func TestInstallerRendersCustomImage(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed to render the installer (make build-installer), as for every build of this project")
	}
	const image = "registry.example.com:5000/team/gpupool:v9.9.9@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", testenv.Root(), "build-installer", "INSTALL_IMG="+image, "DIST_DIR="+dir)
	// Note: under 'make verify' or 'make test' the outer make's command-line variables
	// reach this make through MAKEFLAGS; they must not change what is rendered.
	cmd.Env = withoutMakeVars(os.Environ())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("make build-installer: %v\n%s", err, out.String())
	}
	for _, manifest := range []string{"install.yaml", "install-cert-manager.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, manifest))
		if err != nil {
			t.Fatal(err)
		}
		images := managerImages(t, decode(t, data))
		if len(images) == 0 {
			t.Fatalf("%s has no manager container", manifest)
		}
		for c, got := range images {
			if got != image {
				t.Errorf("%s: container %s runs %q, want %q", manifest, c, got, image)
			}
		}
	}
}

// managerImages returns the image of every container and init container of the
// manifest's Deployments, by Deployment/container.
func managerImages(t *testing.T, objs []*unstructured.Unstructured) map[string]string {
	t.Helper()
	images := map[string]string{}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		for _, field := range []string{"containers", "initContainers"} {
			cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cs {
				m, _ := c.(map[string]any)
				name, _ := m["name"].(string)
				img, _ := m["image"].(string)
				images[o.GetName()+"/"+name] = img
			}
		}
	}
	return images
}

func withoutMakeVars(env []string) []string {
	var kept []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MAKELEVEL=") || strings.HasPrefix(kv, "MFLAGS=") {
			continue
		}
		kept = append(kept, kv)
	}
	return kept
}
