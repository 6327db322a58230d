package ociimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack extracts the root filesystem of the image for platform ("linux/amd64") from the
// OCI layout in layoutDir into dest, and returns the image's config (entrypoint, user,
// env). Only directories, regular files and symlinks are written; every path stays
// inside dest.
func Unpack(layoutDir, platform, dest string) (*v1.Config, error) {
	want, err := v1.ParsePlatform(platform)
	if err != nil {
		return nil, err
	}
	lp, err := layout.FromPath(layoutDir)
	if err != nil {
		return nil, fmt.Errorf("reading the OCI layout %s: %w", layoutDir, err)
	}
	img, err := findImage(lp, *want)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	if err := untar(rc, dest); err != nil {
		return nil, err
	}
	return &cf.Config, nil
}

// findImage returns the image for the platform, looking through nested indexes.
func findImage(lp layout.Path, want v1.Platform) (v1.Image, error) {
	root, err := lp.ImageIndex()
	if err != nil {
		return nil, err
	}
	var walk func(ii v1.ImageIndex) (v1.Image, error)
	walk = func(ii v1.ImageIndex) (v1.Image, error) {
		im, err := ii.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range im.Manifests {
			if d.MediaType.IsIndex() {
				child, err := ii.ImageIndex(d.Digest)
				if err != nil {
					return nil, err
				}
				if img, err := walk(child); err == nil {
					return img, nil
				}
				continue
			}
			if d.MediaType.IsImage() && d.Platform != nil && d.Platform.Satisfies(want) {
				return ii.Image(d.Digest)
			}
		}
		return nil, fmt.Errorf("no image for %s", want.String())
	}
	return walk(root)
}

func untar(r io.Reader, dest string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := cleanName(h.Name)
		if name == "" {
			continue
		}
		p := filepath.Join(dest, filepath.FromSlash(name))
		if !strings.HasPrefix(p, filepath.Clean(dest)+string(filepath.Separator)) {
			return fmt.Errorf("unsafe path %q in the image", h.Name)
		}
		mode := os.FileMode(h.Mode & 0o777)
		if h.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if filepath.IsAbs(h.Linkname) || strings.Contains(h.Linkname, "..") {
				return fmt.Errorf("unsafe symlink %q -> %q in the image", h.Name, h.Linkname)
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		}
	}
}
