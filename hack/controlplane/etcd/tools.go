//go:build tools

// Package etcd only pins the etcd server built from source.
package etcd

import _ "go.etcd.io/etcd/server/v3"
