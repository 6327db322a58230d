package ociimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestBuildThenUnpackRunsTheEntrypoint builds an image around a small static program,
// writes it as an OCI layout, unpacks the host platform's root filesystem and runs the
// entrypoint as the image's config says.
func TestBuildThenUnpackRunsTheEntrypoint(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skip("the image is for linux/amd64 and linux/arm64")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(`package main

import ("fmt"; "os")

func main() {
	ca, err := os.ReadFile(os.Getenv("SSL_CERT_FILE"))
	fmt.Println("hello", len(ca) > 0, err == nil)
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	platform := "linux/" + runtime.GOARCH
	idx, err := Build(Spec{
		Binaries: map[string]string{platform: bin}, CACerts: ca,
		Version: "v9.9.9", Source: "https://example.org/gpupool", Licenses: "Apache-2.0",
		Created: time.Unix(1700000000, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	lp := filepath.Join(dir, "layout")
	if _, err := layout.Write(lp, idx); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "rootfs")
	cfg, err := Unpack(lp, platform, root)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != "65532:65532" || len(cfg.Entrypoint) != 1 || cfg.Entrypoint[0] != "/manager" {
		t.Fatalf("config: user %q entrypoint %q", cfg.User, cfg.Entrypoint)
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": "v9.9.9", "org.opencontainers.image.licenses": "Apache-2.0", "org.opencontainers.image.source": "https://example.org/gpupool"} {
		if cfg.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("/tmp: %v %v, want a sticky folder", fi, err)
	}
	// Run the entrypoint with the image's environment, with file paths under the rootfs.
	cmd := exec.Command(filepath.Join(root, cfg.Entrypoint[0]))
	for _, e := range cfg.Env {
		if k, v, _ := strings.Cut(e, "="); k == "SSL_CERT_FILE" {
			e = k + "=" + filepath.Join(root, v)
		}
		cmd.Env = append(cmd.Env, e)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello true true" {
		t.Fatalf("entrypoint: %v: %q", err, out)
	}
	if _, err := Unpack(lp, "linux/s390x", t.TempDir()); err == nil {
		t.Error("unpacking a platform the image lacks succeeded")
	}
}

func TestBuildRefusesADynamicBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// /bin/sh is dynamically linked on every distribution we build on.
	_, err := Build(Spec{Binaries: map[string]string{"linux/" + runtime.GOARCH: "/bin/sh"}, CACerts: ca})
	if err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("err = %v, want a refusal of a dynamically linked binary", err)
	}
}
