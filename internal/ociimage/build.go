// Package ociimage builds the manager's OCI image from scratch, without a container
// daemon and without a base image, and unpacks it again to run its entrypoint (the
// local environment and the end-to-end test run the manager from the image's files).
package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group the image runs as (distroless's "nonroot").
const NonRoot = 65532

// Entrypoint is the manager's path in the image.
const Entrypoint = "/manager"

// Spec describes the image to build.
type Spec struct {
	// Binaries maps a platform ("linux/amd64") to a static manager binary built for it.
	Binaries map[string]string
	// CACerts is a PEM bundle of public CA certificates (Debian's ca-certificates).
	CACerts string
	// License is the licence text shipped in /licenses/LICENSE (optional).
	License string
	// Version, Revision, Source and Licenses fill the OCI labels.
	Version, Revision, Source, Licenses string
	// Created is the timestamp of every file and of the image (reproducible builds:
	// the commit time, not the build time).
	Created time.Time
}

// file is one entry of a layer.
type file struct {
	name string
	mode int64
	data []byte
	dir  bool
	uid  int
}

// Build returns an OCI image index with one image per platform.
func Build(s Spec) (v1.ImageIndex, error) {
	base, err := s.baseFiles()
	if err != nil {
		return nil, err
	}
	baseLayer, err := layer(base, s.Created)
	if err != nil {
		return nil, err
	}
	platforms := make([]string, 0, len(s.Binaries))
	for p := range s.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil {
			return nil, err
		}
		img, err := s.image(baseLayer, plat, s.Binaries[p])
		if err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
	}
	return idx, nil
}

// baseFiles are the files every platform's image shares: the CA certificates, the
// users (root and nonroot), their home and /tmp, and the license when given.
func (s Spec) baseFiles() ([]file, error) {
	ca, err := os.ReadFile(s.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("%s holds no PEM certificate", s.CACerts)
	}
	base := []file{
		{name: "etc", dir: true, mode: 0o755},
		{name: "etc/ssl", dir: true, mode: 0o755},
		{name: "etc/ssl/certs", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot))},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot))},
		{name: "home", dir: true, mode: 0o755},
		{name: "home/nonroot", dir: true, mode: 0o700, uid: NonRoot},
		{name: "tmp", dir: true, mode: 0o1777},
	}
	if s.License != "" {
		lic, err := os.ReadFile(s.License)
		if err != nil {
			return nil, err
		}
		base = append(base, file{name: "licenses", dir: true, mode: 0o755}, file{name: "licenses/LICENSE", mode: 0o644, data: lic})
	}
	return base, nil
}

// image is one platform's image: the base layer, a layer with the static binary at
// Entrypoint, and a config that runs it as nonroot.
func (s Spec) image(baseLayer v1.Layer, plat *v1.Platform, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(bin, plat.Architecture); err != nil {
		return nil, fmt.Errorf("%s: %w", binary, err)
	}
	binLayer, err := layer([]file{{name: Entrypoint[1:], mode: 0o755, data: bin}}, s.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, baseLayer, binLayer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = plat.OS, plat.Architecture, plat.Variant
	cf.Created = v1.Time{Time: s.Created}
	cf.Author = "The gpupool Authors"
	cf.Config = v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       fmt.Sprintf("%d:%d", NonRoot, NonRoot),
		WorkingDir: "/",
		Env: []string{
			"PATH=/",
			"HOME=/home/nonroot",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		Labels: s.labels(),
	}
	return mutate.ConfigFile(img, cf)
}

func (s Spec) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "gpupool manager",
		"org.opencontainers.image.description": "Kubernetes operator that reshapes vSphere vGPU worker pools on a schedule",
		"org.opencontainers.image.source":      s.Source,
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.revision":    s.Revision,
		"org.opencontainers.image.licenses":    s.Licenses,
		"org.opencontainers.image.created":     s.Created.UTC().Format(time.RFC3339),
	}
}

// layer builds an uncompressed tar of the files, owned by root, with a fixed time.
func layer(files []file, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: mtime, Format: tar.FormatPAX, Uid: f.uid, Gid: f.uid}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, f.name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// checkStatic refuses a binary that needs a dynamic loader (the image has none) or is
// built for another architecture.
func checkStatic(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF binary: %w", err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked (build with CGO_ENABLED=0)")
		}
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if want == 0 || f.Machine != want {
		return fmt.Errorf("built for %v, not %s", f.Machine, arch)
	}
	return nil
}

// cleanName maps a tar entry name to a relative slash path, or "" when it is unsafe.
func cleanName(name string) string {
	n := path.Clean("/" + name)[1:]
	if n == "" || n == "." {
		return ""
	}
	return n
}
