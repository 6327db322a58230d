#!/usr/bin/env bash
# Builds the Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl), etcd and kwok from source through the Go module proxy into
# $BIN_DIR. Prebuilt archives cannot be downloaded in our environments, and building
# from pinned module versions is reproducible anyway.
#
# Cached twice: $BIN_DIR/<name> is left alone when $BIN_DIR/.VERSION-<name> matches the
# pinned version; otherwise it is linked from the user's cache directory
# ($GPUPOOL_CACHE_DIR, default ${XDG_CACHE_HOME:-~/.cache}/gpupool/controlplane), where
# each binary is kept by name and version, so that another clone or a CI run on the same
# machine does not rebuild it. The first build takes about 10-15 minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=${BIN_DIR:-$here/../bin}
mkdir -p "$BIN_DIR"
BIN_DIR=$(cd "$BIN_DIR" && pwd)
CACHE_DIR=${GPUPOOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool/controlplane}
mkdir -p "$CACHE_DIR"
# Two clones (or a CI run and a developer) building at once on one machine share the
# cache: the second waits for the first and then finds its binaries there.
exec 9>"$CACHE_DIR/.lock"
if ! flock -n 9; then
  echo "controlplane: another build holds $CACHE_DIR/.lock; waiting for it..."
  flock 9
fi

kube_version=$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3}' "$here/controlplane/go.mod")
kwok_version=$(awk '$1=="require" && $2=="sigs.k8s.io/kwok" {print $3}' "$here/controlplane/kwok/go.mod")
etcd_version=$(awk '$1=="require" && $2=="go.etcd.io/etcd/server/v3" {print $3}' "$here/controlplane/etcd/go.mod")

# Version strings are v0.0.0-master unless stamped; the API server reports this version.
pkg=k8s.io/component-base/version
minor=$(echo "$kube_version" | cut -d. -f2)
ldflags="-s -w -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"

build() { # name version moduledir package
  local name=$1 version=$2 dir=$3 pkgpath=$4
  local stamp="$BIN_DIR/.VERSION-$name"
  if [[ -x "$BIN_DIR/$name" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
    echo "controlplane: $name $version is up to date"
    return
  fi
  local cached="$CACHE_DIR/$name-$version"
  if [[ -x "$cached" ]]; then
    echo "controlplane: $name $version from the cache $CACHE_DIR"
  else
    echo "controlplane: building $name $version from source into $CACHE_DIR (first time: several minutes)..."
    local start=$SECONDS
    local tmp
    tmp=$(mktemp "$cached.XXXXXX.tmp")
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkgpath") || { rm -f "$tmp"; return 1; }
    chmod +x "$tmp"
    mv -f "$tmp" "$cached"
    echo "controlplane: built $name in $((SECONDS - start))s"
  fi
  rm -f "$BIN_DIR/$name"
  ln -s "$cached" "$BIN_DIR/$name"
  echo "$version" >"$stamp"
}

build etcd "$etcd_version" "$here/controlplane/etcd" go.etcd.io/etcd/server/v3
build kube-apiserver "$kube_version" "$here/controlplane" k8s.io/kubernetes/cmd/kube-apiserver
build kubectl "$kube_version" "$here/controlplane" k8s.io/kubernetes/cmd/kubectl
build kwok "$kwok_version" "$here/controlplane/kwok" sigs.k8s.io/kwok/cmd/kwok
if [[ "${CONTROLPLANE_MINIMAL:-}" != "1" ]]; then
  build kwokctl "$kwok_version" "$here/controlplane/kwok" sigs.k8s.io/kwok/cmd/kwokctl
  build kube-controller-manager "$kube_version" "$here/controlplane" k8s.io/kubernetes/cmd/kube-controller-manager
  build kube-scheduler "$kube_version" "$here/controlplane" k8s.io/kubernetes/cmd/kube-scheduler
fi
