// Command image builds the manager's OCI image from scratch with go-containerregistry:
// no container daemon, no base image. It writes an OCI layout (a multi-platform index,
// for 'crane push') and one 'docker load' tarball per platform.
//
//	go run ./hack/image --binary linux/amd64=dist/bin/linux_amd64/manager \
//	    --ca-certs /etc/ssl/certs/ca-certificates.crt --out dist
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/gpupool/gpupool/internal/ociimage"
)

type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }
func (b binaries) Set(v string) error {
	p, f, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("want PLATFORM=PATH, got %q", v)
	}
	b[p] = f
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	bins := binaries{}
	flag.Var(bins, "binary", "PLATFORM=PATH of a static manager binary (repeatable)")
	caCerts := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of public CA certificates")
	license := flag.String("license", "LICENSE", "licence file shipped in /licenses")
	ref := flag.String("image", "ghcr.io/gpupool/gpupool:devel", "image reference recorded in the layout and the tarballs")
	version := flag.String("version", "devel", "version label")
	revision := flag.String("revision", "", "source revision label")
	source := flag.String("source", "https://github.com/gpupool/gpupool", "source label")
	out := flag.String("out", "dist", "output folder: image/ (OCI layout) and manager-image-OS-ARCH.tar")
	flag.Parse()
	if len(bins) == 0 {
		return fmt.Errorf("no --binary given")
	}
	created := time.Unix(0, 0).UTC()
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		sec, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		created = time.Unix(sec, 0).UTC()
	}
	tag, err := name.NewTag(*ref)
	if err != nil {
		return err
	}
	idx, err := ociimage.Build(ociimage.Spec{
		Binaries: bins, CACerts: *caCerts, License: *license,
		Version: *version, Revision: *revision, Source: *source, Licenses: "Apache-2.0",
		Created: created,
	})
	if err != nil {
		return err
	}
	dir := filepath.Join(*out, "image")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if _, err := layout.Write(dir, idx); err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		p := d.Platform
		tarPath := filepath.Join(*out, fmt.Sprintf("manager-image-%s-%s.tar", p.OS, p.Architecture))
		if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
			return err
		}
		fmt.Printf("image: %s %s/%s %s -> %s\n", tag, p.OS, p.Architecture, d.Digest, tarPath)
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image: index %s -> %s (OCI layout: crane push %s %s)\n", digest, dir, dir, tag)
	return nil
}
