#!/usr/bin/env bash
# The production binaries link no fake client and no cloud SDK: they weigh
# on every controller's memory, and a fake client in a binary is one mistake
# away from being used. The API server is allowed exactly what
# k8s.io/apiserver's generic server links itself (its admission policy
# plugins import client-go's fake clientset). k8s.io/client-go/testing is
# not banned: client-go's own typed clients (gentype) import it.
set -euo pipefail
cd "$(dirname "$0")/.."
banned='/fake$|/fake/|^github\.com/getsops/|^github\.com/aws/|^github\.com/Azure/|^cloud\.google\.com/|^github\.com/hashicorp/vault|huaweicloud'
allowed=$(mktemp)
trap 'rm -f "${allowed}"' EXIT
go list -deps k8s.io/apiserver/pkg/server | grep -E "${banned}" >"${allowed}" || true
fail=0
for cmd in ./cmd/*/; do
  deps=$(go list -deps "${cmd}")
  found=$(echo "${deps}" | grep -E "${banned}" || true)
  if echo "${deps}" | grep -qx 'k8s.io/apiserver/pkg/server'; then
    found=$(echo "${found}" | grep -vxF -f "${allowed}" || true)
  fi
  if [[ -n "${found}" ]]; then
    echo "${cmd} links packages no production binary may:" >&2
    echo "${found}" | sed 's/^/  /' >&2
    fail=1
  fi
done
exit "${fail}"
