#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) from source through the Go module
# proxy, in module mode at the pinned version, into $BIN_DIR/kueue-$KUEUE_VERSION, and
# copies its CRDs and webhook configurations (config/components/crd/bases and
# config/components/webhook/manifests.yaml of the module) into
# $BIN_DIR/kueue-config-$KUEUE_VERSION/{crd,webhook}, for the tests and the local
# environment that run Kueue's own controller (test/kueueenv).
#
# Cached like the control plane (hack/build-controlplane.sh): the binary and the CRDs are
# kept by version in $GPUPOOL_CACHE_DIR (default ${XDG_CACHE_HOME:-~/.cache}/gpupool/kueue)
# and linked into $BIN_DIR. The first build takes several minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=${BIN_DIR:-$here/../bin}
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
mkdir -p "$BIN_DIR"
BIN_DIR=$(cd "$BIN_DIR" && pwd)
CACHE_DIR=${GPUPOOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}/kueue
mkdir -p "$CACHE_DIR"
# A second build at the same time (another clone, a CI run) waits for the first and then
# finds its result in the cache.
exec 9>"$CACHE_DIR/.lock"
if ! flock -n 9; then
  echo "kueue: another build holds $CACHE_DIR/.lock; waiting for it..."
  flock 9
fi

bin=kueue-$KUEUE_VERSION
crds=kueue-config-$KUEUE_VERSION
if [[ -x "$BIN_DIR/$bin" && -d "$BIN_DIR/$crds" ]]; then
  echo "kueue: $KUEUE_VERSION is up to date"
  exit 0
fi
if [[ ! -x "$CACHE_DIR/$bin" ]]; then
  echo "kueue: building $KUEUE_VERSION from source into $CACHE_DIR (first time: several minutes)..."
  start=$SECONDS
  tmp=$(mktemp -d "$CACHE_DIR/.build-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # Outside any module (GOFLAGS cleared of -mod), so that 'go install pkg@version' resolves
  # Kueue's own go.mod and nothing of gpupool's.
  (cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
    "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION")
  mv "$tmp/kueue" "$CACHE_DIR/$bin"
  echo "kueue: built in $((SECONDS - start))s"
fi
if [[ ! -d "$CACHE_DIR/$crds" ]]; then
  dir=$(cd "$CACHE_DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -d "$dir/config/components/crd/bases" ]] || { echo "kueue: no CRDs in the module at $dir" >&2; exit 1; }
  rm -rf "$CACHE_DIR/$crds.tmp" && mkdir -p "$CACHE_DIR/$crds.tmp/crd" "$CACHE_DIR/$crds.tmp/webhook"
  cp "$dir"/config/components/crd/bases/*.yaml "$CACHE_DIR/$crds.tmp/crd/"
  cp "$dir"/config/components/webhook/manifests.yaml "$CACHE_DIR/$crds.tmp/webhook/"
  chmod -R u+w "$CACHE_DIR/$crds.tmp"
  mv "$CACHE_DIR/$crds.tmp" "$CACHE_DIR/$crds"
fi
rm -f "$BIN_DIR/$bin" "$BIN_DIR/$crds"
ln -s "$CACHE_DIR/$bin" "$BIN_DIR/$bin"
ln -s "$CACHE_DIR/$crds" "$BIN_DIR/$crds"
echo "kueue: $BIN_DIR/$bin and $BIN_DIR/$crds"
