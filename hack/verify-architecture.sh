#!/usr/bin/env bash
# Every package under pkg/ is named in docs/architecture.md, so the page
# that says who owns what grows with the code. Generated code is named once,
# as pkg/generated/...
set -euo pipefail
cd "$(dirname "$0")/.."
doc=docs/architecture.md
missing=0
for p in $(go list ./pkg/... | sed 's#^reverser.dev/reverser/##'); do
  case "$p" in pkg/generated/*) continue ;; esac
  if ! grep -qF "\`$p\`" "$doc"; then
    echo "$doc does not name package $p: add it to the table of packages" >&2
    missing=1
  fi
done
grep -qF '`pkg/generated/...`' "$doc" || { echo "$doc does not name pkg/generated/..." >&2; missing=1; }
exit "$missing"
