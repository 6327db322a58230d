#!/usr/bin/env bash
# Builds Prometheus's promtool (github.com/prometheus/prometheus/cmd/promtool) from source
# through the Go module proxy, in module mode at the pinned version, into
# $BIN_DIR/promtool-$PROMTOOL_VERSION, for the tests of the alert rules
# (test/prometheus: 'promtool check rules' and 'promtool test rules').
#
# PROMTOOL_VERSION is Prometheus's release (v3.16.0); its Go module is tagged v0.316.0
# (release 3.x.y is module v0.3xx.y), which is what the proxy serves. Built with the tag
# remove_all_sd: the rule tests need no service discovery, and leaving the cloud SDKs out
# makes the build several times faster.
#
# Cached like the control plane and Kueue (hack/build-controlplane.sh, hack/build-kueue.sh):
# the binary is kept by version in $GPUPOOL_CACHE_DIR (default
# ${XDG_CACHE_HOME:-~/.cache}/gpupool/promtool) and linked into $BIN_DIR. The first build
# takes a few minutes on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=${BIN_DIR:-$here/../bin}
PROMTOOL_VERSION=${PROMTOOL_VERSION:-v3.16.0}
mkdir -p "$BIN_DIR"
BIN_DIR=$(cd "$BIN_DIR" && pwd)
CACHE_DIR=${GPUPOOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpupool}/promtool
mkdir -p "$CACHE_DIR"
# A second build at the same time (another clone, a CI run) waits for the first and then
# finds its result in the cache.
exec 9>"$CACHE_DIR/.lock"
if ! flock -n 9; then
  echo "promtool: another build holds $CACHE_DIR/.lock; waiting for it..."
  flock 9
fi

[[ "$PROMTOOL_VERSION" =~ ^v3\.([0-9]+)\.([0-9]+)$ ]] || {
  echo "promtool: PROMTOOL_VERSION must be a Prometheus 3 release such as v3.16.0, not '$PROMTOOL_VERSION'" >&2
  exit 1
}
module_version=v0.$((300 + BASH_REMATCH[1])).${BASH_REMATCH[2]}

bin=promtool-$PROMTOOL_VERSION
if [[ -x "$BIN_DIR/$bin" ]]; then
  echo "promtool: $PROMTOOL_VERSION is up to date"
  exit 0
fi
if [[ ! -x "$CACHE_DIR/$bin" ]]; then
  echo "promtool: building $PROMTOOL_VERSION (module $module_version) from source into $CACHE_DIR (first time: a few minutes)..."
  start=$SECONDS
  tmp=$(mktemp -d "$CACHE_DIR/.build-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # Outside any module (GOFLAGS cleared of -mod), so that 'go install pkg@version' resolves
  # Prometheus's own go.mod and nothing of gpupool's.
  (cd "$tmp" && GOBIN="$tmp" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROMTOOL_VERSION#v}" \
    "github.com/prometheus/prometheus/cmd/promtool@$module_version")
  mv "$tmp/promtool" "$CACHE_DIR/$bin"
  echo "promtool: built in $((SECONDS - start))s"
fi
rm -f "$BIN_DIR/$bin"
ln -s "$CACHE_DIR/$bin" "$BIN_DIR/$bin"
echo "promtool: $BIN_DIR/$bin"
