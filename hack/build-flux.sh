#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller from the Go module
# proxy (hack/tools/flux-source, hack/tools/flux-kustomize) into a cache
# keyed by version, copies their CRDs next to them, and prints the
# directory. A warm cache is reused: only the first run pays (~3 minutes and
# ~1.8 GB of memory per controller on 2 cores).
#
# Argo CD's Application CRD is copied beside them (crds/argocd) from the
# github.com/argoproj/argo-cd/v3 module: its controllers cannot be built from
# the module proxy (docs/appliers.md says why), but ArgoCDClaims are tested
# against the real CRD.
#
#   REVERSER_CACHE   cache root (default $HOME/.cache/reverser)
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FLUX_VERSION=v1.9.6
CACHE=${REVERSER_CACHE:-${HOME}/.cache/reverser}/flux/${FLUX_VERSION}
CONTROLLERS=(source kustomize)
ARGOCD_MODULE=github.com/argoproj/argo-cd/v3@v3.5.6
ARGOCD_CRD=${CACHE}/crds/argocd/application-crd.yaml

missing=()
for c in "${CONTROLLERS[@]}"; do
  [[ -x "${CACHE}/${c}-controller" && -d "${CACHE}/crds/${c}" ]] || missing+=("${c}")
done
if [[ ! -f "${ARGOCD_CRD}" ]]; then
  dir=$(cd "${TMPDIR:-/tmp}" && go mod download -json "${ARGOCD_MODULE}" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  mkdir -p "${CACHE}/crds/argocd"
  cp "${dir}/manifests/crds/application-crd.yaml" "${ARGOCD_CRD}.tmp" && chmod u+w "${ARGOCD_CRD}.tmp" && mv "${ARGOCD_CRD}.tmp" "${ARGOCD_CRD}"
  echo "argo-cd: Application CRD from ${ARGOCD_MODULE}" >&2
fi
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
