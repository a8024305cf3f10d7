#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller from the Go module
# proxy (hack/tools/flux-source, hack/tools/flux-kustomize) into a cache
# keyed by version, copies their CRDs next to them, and prints the
# directory. A warm cache is reused: only the first run pays (~3 minutes and
# ~1.8 GB of memory per controller on 2 cores).
#
#   REVERSER_CACHE   cache root (default $HOME/.cache/reverser)
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLUX_VERSION=v1.9.6
CACHE=${REVERSER_CACHE:-${HOME}/.cache/reverser}/flux/${FLUX_VERSION}
CONTROLLERS=(source kustomize)

missing=()
for c in "${CONTROLLERS[@]}"; do
  [[ -x "${CACHE}/${c}-controller" && -d "${CACHE}/crds/${c}" ]] || missing+=("${c}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "flux ${FLUX_VERSION}: cache hit in ${CACHE}" >&2
  echo "${CACHE}"
  exit 0
fi

echo "flux ${FLUX_VERSION}: building ${missing[*]}-controller into ${CACHE} (cold build, several minutes)" >&2
mkdir -p "${CACHE}/crds"
tmp=$(mktemp -d "${CACHE}/.build.XXXXXX")
trap 'rm -rf "${tmp}"' EXIT

for c in "${missing[@]}"; do
  start=${SECONDS}
  cd "${ROOT}/hack/tools/flux-${c}"
  module=github.com/fluxcd/${c}-controller
  go build -trimpath -ldflags "-s -w" -o "${tmp}/${c}-controller" "${module}"
  dir=$(go list -m -f '{{.Dir}}' "${module}")
  rm -rf "${tmp}/crds-${c}" && cp -r "${dir}/config/crd/bases" "${tmp}/crds-${c}" && chmod -R u+w "${tmp}/crds-${c}"
  rm -rf "${CACHE}/crds/${c}" && mv "${tmp}/crds-${c}" "${CACHE}/crds/${c}"
  mv "${tmp}/${c}-controller" "${CACHE}/${c}-controller"   # last: a cut build never looks complete
  echo "  built ${c}-controller in $((SECONDS - start))s" >&2
done
echo "${CACHE}"
