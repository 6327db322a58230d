package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/gpupool/gpupool/internal/testenv"
)

// TestKrewManifest renders hack/krew/gpupool.yaml as krew-release-bot does and checks
// it names, per platform, the archive 'make plugin-archives' writes and the binary in it.
func TestKrewManifest(t *testing.T) {
	root := testenv.Root()
	data, err := os.ReadFile(filepath.Join(root, "hack", "krew", "gpupool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const tag = "v1.2.3"
	tmpl, err := template.New("krew").Funcs(template.FuncMap{
		"addURIAndSha": func(url, tag string) string {
			return "uri: " + strings.ReplaceAll(url, "{{ .TagName }}", tag) + "\n    sha256: 0000"
		},
	}).Parse(string(data))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, map[string]string{"TagName": tag}); err != nil {
		t.Fatal(err)
	}
	var m struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Version   string
			Platforms []struct {
				Selector struct{ MatchLabels map[string]string }
				URI      string
				Bin      string
			}
		}
	}
	if err := yaml.Unmarshal(out.Bytes(), &m); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind != "Plugin" || m.Metadata.Name != "gpupool" || m.Spec.Version != tag || len(m.Spec.Platforms) == 0 {
		t.Fatalf("manifest: %+v", m)
	}
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		archive := "kubectl-gpupool_" + tag + "_" + goos + "_" + arch + ".tar.gz"
		if !strings.HasSuffix(p.URI, "/releases/download/"+tag+"/"+archive) {
			t.Errorf("%s/%s: uri %s, want the archive %s", goos, arch, p.URI, archive)
		}
		if !strings.Contains(string(makefile), goos+"/"+arch) {
			t.Errorf("%s/%s: make plugin-archives does not build it (PLUGIN_PLATFORMS)", goos, arch)
		}
		if want := map[bool]string{true: "kubectl-gpupool.exe", false: "kubectl-gpupool"}[goos == "windows"]; p.Bin != want {
			t.Errorf("%s/%s: bin %s, want %s", goos, arch, p.Bin, want)
		}
	}
}
