#!/usr/bin/env bash
# Regenerates deepcopy, defaults, conversion, OpenAPI, the source clusters'
# CommitRequest schema (artifacts/source), the PrometheusRule
# (artifacts/monitoring/prometheusrule), clientset, listers, informers and
# apply configurations. Output is deterministic; `make verify`
# runs this into a copy and fails when the tree is stale.
#
# UPDATE_API_KNOWN_VIOLATIONS=true refreshes hack/api_violations.list.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"
CODEGEN_VERSION=v0.37.2
CODEGEN_PKG=$(go mod download -json "k8s.io/code-generator@${CODEGEN_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d "${CODEGEN_PKG}" ]] || { echo "k8s.io/code-generator@${CODEGEN_VERSION} not found in the module cache" >&2; exit 1; }

# kube_codegen.sh installs its generators from its own module directory.
source "${CODEGEN_PKG}/kube_codegen.sh"

THIS_PKG=reverser.dev/reverser
BOILERPLATE="${ROOT}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers --boilerplate "${BOILERPLATE}" "${ROOT}/pkg/apis"

update_report=""
[[ "${UPDATE_API_KNOWN_VIOLATIONS:-}" == "true" ]] && update_report="--update-report"
kube::codegen::gen_openapi \
    --output-dir "${ROOT}/pkg/generated/openapi" \
    --output-pkg "${THIS_PKG}/pkg/generated/openapi" \
    --output-model-name-file zz_generated.model_name.go \
    --report-filename "${ROOT}/hack/api_violations.list" \
    ${update_report:+"${update_report}"} \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"

# The alerts as a PrometheusRule, from artifacts/monitoring/alerts.yaml.
go run ./hack/prometheusrule

# The CommitRequest CRD and kcp APIResourceSchema of source clusters, from the
# OpenAPI definitions just generated.
go run ./hack/source-schema

schema=$(mktemp)
trap 'rm -f "${schema}"' EXIT
go run ./hack/models-schema > "${schema}"
kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema "${schema}" \
    --output-dir "${ROOT}/pkg/generated" \
    --output-pkg "${THIS_PKG}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${ROOT}/pkg/apis"
