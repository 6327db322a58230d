// Package version reports the version a binary was built from: stamped by the Makefile
// from 'git describe' (-ldflags -X), or the module version 'go install ...@vX' records.
package version

import "runtime/debug"

// Version is set at build time with
// -ldflags "-X github.com/gpupool/gpupool/internal/version.Version=v0.1.0".
var Version = ""

// Get returns the stamped version, else the main module's version from the build
// information, else "devel".
func Get() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
