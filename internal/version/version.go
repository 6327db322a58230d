// Package version is the version of gpupool's binaries, stamped at build time:
//
//	go build -ldflags "-X github.com/gpupool/gpupool/internal/version.Version=v0.3.0" ./cmd/...
package version

// Version is the release, or "dev" for a build that was not stamped.
var Version = "dev"
