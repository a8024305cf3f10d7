#!/usr/bin/env bash
# Fails when generated code is stale: regenerates into a copy of the tree and
# compares. The working tree is never touched.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "${TMP}"' EXIT

cd "${ROOT}"
# Tracked and untracked-but-not-ignored files, as they are in the working tree.
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [[ -e "$f" ]] || continue
  mkdir -p "${TMP}/$(dirname "$f")"
  cp -p "$f" "${TMP}/$f"
done

(cd "${TMP}" && bash hack/update-codegen.sh >/dev/null)

status=0
for d in pkg hack/api_violations.list artifacts/source artifacts/monitoring; do
  if ! diff -Nru "${ROOT}/${d}" "${TMP}/${d}" >"${TMP}/codegen.diff" 2>&1; then
    status=1
    cat "${TMP}/codegen.diff"
  fi
done
if [[ ${status} -ne 0 ]]; then
  echo "Generated code is stale: run hack/update-codegen.sh (make codegen) and commit the result." >&2
  exit 1
fi
echo "Generated code is up to date."
