//go:build tools

// Package kwok only pins the kwok and kwokctl commands built from source.
package kwok

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
