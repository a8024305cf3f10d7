#!/usr/bin/env bash
# Builds Reverser's binaries into bin/ with one `go build`, so that the
# packages they share compile once and their links run side by side:
#   hack/build.sh [NAME...]   (default: all of them)
# NAME is a binary below. REVERSER_LDFLAGS (the Makefile sets it) stamps the
# version.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"

declare -A pkgs=(
  [reverser-apiserver]=./cmd/apiserver
  [reverser-controller]=./cmd/controller
  [kubectl-reverser]=./cmd/kubectl-reverser
  [reverser-gitserver]=./hack/gitserver
  [reverser-redis]=./hack/redis
  [reverser-controlplane]=./hack/controlplane
)
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(reverser-apiserver reverser-controller kubectl-reverser reverser-gitserver reverser-redis reverser-controlplane)

list=()
for n in "${names[@]}"; do
  [[ -n "${pkgs[${n}]:-}" ]] || { echo "hack/build.sh: no binary ${n}" >&2; exit 2; }
  list+=("${pkgs[${n}]}")
done
mkdir -p bin
tmp=$(mktemp -d bin/.build.XXXXXX)
trap 'rm -rf "${tmp}"' EXIT
# go build -o DIR names each binary after its package's directory. Built
# as the images are (hack/images): without cgo, whose external link keeps
# about twice the code in the controller, and with paths trimmed.
CGO_ENABLED=0 go build -trimpath -ldflags "${REVERSER_LDFLAGS:-}" -o "${tmp}/" "${list[@]}"
for n in "${names[@]}"; do
  mv "${tmp}/$(basename "${pkgs[${n}]}")" "bin/${n}"
done
# What each binary weighs: the controller's size is most of its resident
# memory at rest (docs/scaling.md).
for n in "${names[@]}"; do
  stat -c '%s' "bin/${n}" | awk -v n="${n}" '{ printf "%-24s %6.1f MB\n", n, $1 / 1e6 }'
done
