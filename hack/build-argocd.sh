#!/usr/bin/env bash
# Builds Argo CD's application controller and repo server from the Go module
# proxy into a cache keyed by version, copies its core install manifest
# (CRDs, ServiceAccounts, RBAC, ConfigMaps: what the local plane applies of
# it) next to them, and prints the directory. A warm cache is reused: only
# the first run pays.
#
# Argo CD v3 cannot be built from the module proxy (docs/appliers.md says
# why); v2.14 can. Its go.mod pins k8s.io/* with replace directives, which
# hold only in the main module, so the module's own source is built as the
# main module (a writable copy of its zip), not required from ours as Flux
# is. Argo CD ships one binary that acts on the name it runs as: the cache
# holds `argocd` and the two names as links to it.
#
#   REVERSER_CACHE   cache root (default $HOME/.cache/reverser)
set -o errexit -o nounset -o pipefail

ARGOCD_VERSION=v2.14.21
MODULE=github.com/argoproj/argo-cd/v2
CACHE=${REVERSER_CACHE:-${HOME}/.cache/reverser}/argocd/${ARGOCD_VERSION}
NAMES=(argocd-application-controller argocd-repo-server)
MANIFEST=core-install.yaml

# The module's source, downloaded once into the module cache.
source_dir() {
  local d
  d=$(cd "${TMPDIR:-/tmp}" && go mod download -json "${MODULE}@${ARGOCD_VERSION}" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -n "${d}" ]] || { echo "argo-cd: go mod download ${MODULE}@${ARGOCD_VERSION} named no directory" >&2; exit 1; }
  echo "${d}"
}

mkdir -p "${CACHE}"
if [[ ! -f "${CACHE}/${MANIFEST}" ]]; then
  cp "$(source_dir)/manifests/${MANIFEST}" "${CACHE}/${MANIFEST}.tmp"
  chmod u+w "${CACHE}/${MANIFEST}.tmp" && mv "${CACHE}/${MANIFEST}.tmp" "${CACHE}/${MANIFEST}"
fi

complete=true
for f in argocd "${NAMES[@]}"; do [[ -x "${CACHE}/${f}" ]] || complete=false; done
if ${complete}; then
  echo "argo-cd ${ARGOCD_VERSION}: cache hit in ${CACHE}" >&2
  echo "${CACHE}"
  exit 0
fi

echo "argo-cd ${ARGOCD_VERSION}: building argocd into ${CACHE} (cold build, several minutes)" >&2
start=${SECONDS}
tmp=$(mktemp -d "${CACHE}/.build.XXXXXX")
trap 'chmod -R u+w "${tmp}" 2>/dev/null; rm -rf "${tmp}"' EXIT

cp -r "$(source_dir)" "${tmp}/src" && chmod -R u+w "${tmp}/src"

# The version Argo CD reports (and stamps on what it writes), as its Makefile
# sets it.
ldflags="-s -w -X ${MODULE}/common.version=${ARGOCD_VERSION#v} -X ${MODULE}/common.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X ${MODULE}/common.gitTreeState=clean"
(cd "${tmp}/src" && GOFLAGS=-buildvcs=false go build -trimpath -ldflags "${ldflags}" -o "${tmp}/argocd" ./cmd)

for n in "${NAMES[@]}"; do ln -sfn argocd "${CACHE}/${n}"; done
mv "${tmp}/argocd" "${CACHE}/argocd"   # last: a cut build never looks complete
echo "  built argocd in $((SECONDS - start))s" >&2
echo "${CACHE}"
