package main

import (
	"flag"
	"fmt"
	"os"

	// The image has no /usr/share/zoneinfo: without the embedded database every
	// non-UTC schedule time zone would fail to load.
	_ "time/tzdata"

	"github.com/gpupool/gpupool/internal/version"
)

var showVersion = flag.Bool("version", false, "Print the version and exit.")

// exitIfVersion prints the version and exits when --version was given.
func exitIfVersion() {
	if *showVersion {
		fmt.Println("gpupool manager", version.Get())
		os.Exit(0)
	}
}
