#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller from the Go module
# proxy (hack/tools/flux, one module and one go build for both, so what they
# share compiles once) into a cache keyed by version and by that module's
# go.sum, copies their CRDs next to them, and prints the directory. A warm
# cache is reused: only the first run pays.
#
#   REVERSER_CACHE   cache root (default $HOME/.cache/reverser)
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLUX_VERSION=v1.9.6
MODULE_DIR=${ROOT}/hack/tools/flux
# A change of the module's requirements is another build.
CACHE=${REVERSER_CACHE:-${HOME}/.cache/reverser}/flux/${FLUX_VERSION}-$(sha256sum "${MODULE_DIR}/go.sum" | cut -c1-12)
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

start=${SECONDS}
cd "${MODULE_DIR}"
modules=()
for c in "${missing[@]}"; do modules+=("github.com/fluxcd/${c}-controller"); done
# go build -o DIR names each binary after its module: source-controller,
# kustomize-controller.
go build -trimpath -ldflags "-s -w" -o "${tmp}/" "${modules[@]}"
for c in "${missing[@]}"; do
  dir=$(go list -m -f '{{.Dir}}' "github.com/fluxcd/${c}-controller")
  rm -rf "${tmp}/crds-${c}" && cp -r "${dir}/config/crd/bases" "${tmp}/crds-${c}" && chmod -R u+w "${tmp}/crds-${c}"
  rm -rf "${CACHE}/crds/${c}" && mv "${tmp}/crds-${c}" "${CACHE}/crds/${c}"
  mv "${tmp}/${c}-controller" "${CACHE}/${c}-controller"   # last: a cut build never looks complete
done
echo "  built ${missing[*]}-controller in $((SECONDS - start))s" >&2
echo "${CACHE}"
