#!/usr/bin/env bash
# make demo: builds what it needs, starts the local control plane, applies
# the example configuration, and shows who may save what. The control plane
# keeps running afterwards: `make down` stops it.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"
LOCAL_DIR=${LOCAL_DIR:-_output/local}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

# shellcheck source=hack/lib/progress.sh
source hack/lib/progress.sh

say "Building (the first run downloads and compiles Reverser, Kubernetes and Flux: about 16 minutes on two cores; then seconds)"
# The Kubernetes and Flux modules download while Reverser compiles: the
# network and the CPU work at once.
prefetch() {
  (cd hack/tools/controlplane && go list -deps ./etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager)
  (cd hack/tools/flux && go list -deps github.com/fluxcd/source-controller github.com/fluxcd/kustomize-controller)
}
prefetch >/dev/null 2>&1 &
step "Reverser: servers, kubectl plugin, Git server, control plane runner" make --no-print-directory build tools
step "Kubernetes: etcd, kube-apiserver, kube-controller-manager" hack/build-control-plane.sh
step "Flux: source-controller, kustomize-controller" hack/build-flux.sh
wait
make --no-print-directory start-built LOCAL_DIR="${LOCAL_DIR}"
# shellcheck disable=SC1091
source "${LOCAL_DIR}/env"

say "A Git repository on the local Git server"
[[ -d "${GIT_ROOT}/demo.git" ]] || {
  git init --quiet --bare --initial-branch=main "${GIT_ROOT}/demo.git"
  git -C "${GIT_ROOT}/demo.git" config http.receivepack true
}
echo "${GIT_BASE_URL}/demo.git"

say "The reverser.dev API, served by reverser-apiserver through kube-apiserver"
show kubectl get apiservice v1alpha1.reverser.dev
show kubectl api-resources --api-group=reverser.dev

say "The example configuration (artifacts/examples/demo.yaml), applied by admin"
sed "s|\${GIT_BASE_URL}|${GIT_BASE_URL}|g" artifacts/examples/demo.yaml | kubectl apply --server-side -f -
show kubectl get gitproviders,gittargets,watchrules -n demo

# wait_for DESCRIPTION COMMAND...: polls COMMAND for up to 30 seconds.
wait_for() {
  local what=$1; shift
  for _ in $(seq 150); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "timed out waiting for ${what}" >&2; return 1
}
repo="${GIT_ROOT}/demo.git"
doc=clusters/demo/demo/configmaps/site-config.yaml

say "alice creates a ConfigMap; reverser-controller commits it to Git, authored by her"
show kubectl --kubeconfig "${KUBECONFIG_ALICE}" -n demo create configmap site-config --from-literal=greeting=hello
wait_for "the commit" git -C "${repo}" cat-file -e "main:${doc}"
show git -C "${repo}" log --format='%h %an <%ae> | %s' main
show git -C "${repo}" show "main:${doc}"

say "bob edits it too: his change is his own commit, authored by him (from kube-apiserver's audit events)"
show kubectl --kubeconfig "${KUBECONFIG_BOB}" -n demo patch configmap site-config --type merge -p '{"data":{"greeting":"hello, world"}}'
wait_for "bob's commit" sh -c "git -C '${repo}' show 'main:${doc}' | grep -q 'hello, world'"
show git -C "${repo}" log -1 -p --format='%h %an <%ae> | %s' main

say "alice and bob edit two ConfigMaps at the same time: two commits, one each"
kubectl --kubeconfig "${KUBECONFIG_ALICE}" -n demo create configmap alice-notes --from-literal=note=mine &
kubectl --kubeconfig "${KUBECONFIG_BOB}" -n demo create configmap bob-notes --from-literal=note=mine &
wait
wait_for "both commits" sh -c "git -C '${repo}' cat-file -e main:clusters/demo/demo/configmaps/alice-notes.yaml &&
  git -C '${repo}' cat-file -e main:clusters/demo/demo/configmaps/bob-notes.yaml"
show git -C "${repo}" log --format='%an <%ae> | %cn | %s' main
show kubectl get gittarget site -n demo -o wide
show kubectl get kubeprovider local

say "alice edits and saves with a message: kubectl reverser save (a CommitRequest, authored by her)"
export PATH="${ROOT}/bin:${PATH}"
show kubectl --kubeconfig "${KUBECONFIG_ALICE}" -n demo create configmap feature-flags --from-literal=checkout=on
KUBECONFIG="${KUBECONFIG_ALICE}" show kubectl reverser save site -n demo -m "Turn the new checkout on

Requested by the shop team."
show git -C "${repo}" log -1 --format='%h %an <%ae>%n%B' main
show kubectl get commitrequests -n demo

say "bob has no save permission: kubectl reverser save is refused at create"
if out=$(KUBECONFIG="${KUBECONFIG_BOB}" kubectl reverser save site -n demo -m "Bob tries to save" 2>&1); then
  echo "unexpected: bob's save was accepted: ${out}" >&2
  exit 1
else
  echo "${out}"
fi
show kubectl --kubeconfig "${KUBECONFIG_BOB}" auth can-i save gittargets/site -n demo 2>/dev/null || true  # "no" exits 1
show kubectl reverser status -n demo

say "bob, a tenant of namespace demo, tries to mirror kube-system's Roles: he may not read them, so neither may his rule"
kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: demo-tenant, namespace: demo}
rules:
- apiGroups: [reverser.dev]
  resources: [watchrules]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: demo-tenant, namespace: demo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: demo-tenant}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
YAML
rule='apiVersion: reverser.dev/v1alpha1
kind: WatchRule
metadata: {name: kube-system-roles, namespace: demo}
spec:
  gitTargetRef: {name: site}
  sourceNamespace: kube-system
  rules:
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [roles]'
printf '$ kubectl --kubeconfig "$KUBECONFIG_BOB" apply --server-side -f - <<EOF\n%s\nEOF\n' "${rule}"
if out=$(kubectl --kubeconfig "${KUBECONFIG_BOB}" apply --server-side -f - <<<"${rule}" 2>&1); then
  echo "unexpected: bob's rule was accepted: ${out}" >&2
  exit 1
else
  echo "${out}"
fi
echo "(See docs/security.md: what an admin lends, and what each rule's author must be allowed.)"

say "admin may read kube-system, but KubeProvider local lends only namespace demo: the controller refuses admin's rule too, on the rule and in the GitTarget's Events"
kubectl apply --server-side -f - >/dev/null <<YAML
apiVersion: reverser.dev/v1alpha1
kind: WatchRule
metadata: {name: kube-system-configmaps, namespace: demo}
spec:
  gitTargetRef: {name: site}
  sourceNamespace: kube-system
  rules:
  - apiGroups: [""]
    resources: [configmaps]
YAML
show kubectl wait -n demo watchrule/kube-system-configmaps --for=condition=Ready=false --timeout=30s
show kubectl get watchrule kube-system-configmaps -n demo \
  -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}{.reason}: {.message}{"\n"}{end}'
kubectl delete watchrule kube-system-configmaps -n demo >/dev/null

say "Secrets are written only encrypted: a GitTarget with an age recipient writes each as a SOPS document"
keys="${LOCAL_DIR}/demo.agekey"
[[ -f "${keys}" ]] || go run filippo.io/age/cmd/age-keygen -o "${keys}" 2>/dev/null
recipient=$(sed -n 's/^# public key: //p' "${keys}")
kubectl apply --server-side -f - <<YAML
apiVersion: reverser.dev/v1alpha1
kind: GitTarget
metadata: {name: secrets, namespace: demo}
spec:
  kubeProviderRef: {name: local}
  gitProviderRef: {name: repo}
  branch: main
  path: clusters/demo-secrets
  encryption: {sops: {ageRecipients: [${recipient}]}}
---
apiVersion: reverser.dev/v1alpha1
kind: WatchRule
metadata: {name: secrets, namespace: demo}
spec:
  gitTargetRef: {name: secrets}
  rules: [{apiGroups: [""], resources: [secrets]}]
YAML
show kubectl -n demo create secret generic db --from-literal=password=demo-hunter2
secret=clusters/demo-secrets/demo/secrets/db.yaml
wait_for "the sealed Secret" git -C "${repo}" cat-file -e "main:${secret}"
show git -C "${repo}" show "main:${secret}"
git -C "${repo}" show "main:${secret}" >"${LOCAL_DIR}/db.sops.yaml"
echo "\$ SOPS_AGE_KEY_FILE=${keys} go tool sops --decrypt db.sops.yaml   # the sops CLI, built from the module Reverser seals with"
SOPS_AGE_KEY_FILE="${keys}" go tool sops --decrypt --input-type yaml --output-type yaml "${LOCAL_DIR}/db.sops.yaml"
echo "(Flux decrypts it too: docs/configuration.md, Secrets and other credentials.)"

say "Flux applies the same folder: admin hands its Kustomization to Reverser with a FluxClaim"
kubectl apply --server-side -f - <<YAML
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: demo, namespace: flux-system}
spec: {url: "${GIT_BASE_URL}/demo.git", ref: {branch: main}, interval: 5s}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: demo, namespace: flux-system}
spec: {sourceRef: {kind: GitRepository, name: demo}, path: ./clusters/demo, prune: false, interval: 5s}
---
apiVersion: reverser.dev/v1alpha1
kind: FluxClaim
metadata: {name: demo, namespace: demo}
spec:
  kubeProviderRef: {name: local}
  kustomizationRef: {namespace: flux-system, name: demo}
  catchUpAfter: 1m
YAML
show kubectl patch gittarget site -n demo --type merge -p '{"spec":{"applierRef":{"kind":"FluxClaim","name":"demo"}}}'
wait_for "the claim's Startup converge" sh -c "kubectl get fluxclaim demo -n demo -o jsonpath='{.status.operation.finishedAt}' | grep -q ."
show kubectl get kustomization demo -n flux-system -o jsonpath='{.spec.interval}{"  (was 5s)\n"}'

say "alice edits live; Flux's 5s interval is held, so it does not revert her"
show kubectl --kubeconfig "${KUBECONFIG_ALICE}" -n demo patch configmap feature-flags --type merge -p '{"data":{"checkout":"off"}}'
sleep 12  # more than two of Flux's old intervals: nothing is waited for here, the point is that nothing happens
show kubectl get configmap feature-flags -n demo -o jsonpath='{.data.checkout}{"  (still hers after 12s)\n"}'

say "alice edits again and saves with catchUp: AfterPush; Reverser pushes, then asks Flux to apply, and reports it in Applied"
show kubectl --kubeconfig "${KUBECONFIG_ALICE}" -n demo patch configmap feature-flags --type merge -p '{"data":{"checkout":"off, for the sale"}}'
kubectl --kubeconfig "${KUBECONFIG_ALICE}" create -f - <<YAML
apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: checkout-off, namespace: demo}
spec:
  gitTargetRef: {name: site}
  message: Turn the new checkout off again
  catchUp: AfterPush
YAML
show kubectl --kubeconfig "${KUBECONFIG_ALICE}" wait -n demo commitrequest/checkout-off --for=condition=Applied --timeout=60s
show kubectl get commitrequest checkout-off -n demo -o jsonpath='{.status.commit}{" applied as "}{.status.appliedRevision}{"\n"}'
show kubectl get kustomization demo -n flux-system -o jsonpath='{.status.lastAppliedRevision}{"\n"}'
show kubectl reverser status -n demo

say "A second cluster: alice edits there and saves there, next to her edit (a CommitRequest on the source cluster)"
bin/reverser-controlplane source --dir "${LOCAL_DIR}" --control-plane-bin "$(hack/build-control-plane.sh)" --name source
# shellcheck disable=SC1091
source "${LOCAL_DIR}/source/env"
src() { kubectl --kubeconfig "${SOURCE_KUBECONFIG_ADMIN}" "$@"; }
show src apply --server-side -k artifacts/source
src wait --for=condition=Established crd/commitrequests.reverser.dev --timeout=30s >/dev/null
src create namespace demo --dry-run=client -o yaml | src apply -f - >/dev/null
# What Reverser's credential there may do (docs/configuration.md), and alice's rights there.
src apply -f - >/dev/null <<'YAML'
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reverser, namespace: demo}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}
- {apiGroups: [reverser.dev], resources: [commitrequests], verbs: [get, list, watch, patch, delete]}
- {apiGroups: [reverser.dev], resources: [commitrequests/status], verbs: [update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reverser, namespace: demo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reverser}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: reverser-source}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: editor, namespace: demo}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: ["*"]}
- {apiGroups: [reverser.dev], resources: [commitrequests], verbs: [create, get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-edits, namespace: demo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: editor}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
YAML
kubectl create secret generic -n reverser-system source-kubeconfig --from-file=kubeconfig="${SOURCE_KUBECONFIG_REVERSER}" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create secret generic -n reverser-system source-audit --from-literal=token="${SOURCE_AUDIT_TOKEN}" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply --server-side -f - <<YAML
apiVersion: reverser.dev/v1alpha1
kind: KubeProvider
metadata: {name: source}
spec:
  kubeConfigSecretRef: {namespace: reverser-system, name: source-kubeconfig, key: kubeconfig}
  lendSameNamespaces: true
  commitRequests: ReconcileAndDeleteFinished
  audit:
    enabled: true
    bearerTokenSecretRef: {namespace: reverser-system, name: source-audit, key: token}
---
apiVersion: reverser.dev/v1alpha1
kind: GitTarget
metadata: {name: source-site, namespace: demo}
spec:
  kubeProviderRef: {name: source}
  gitProviderRef: {name: repo}
  branch: main
  path: clusters/source
  commit: {window: {silence: 10m, maxAge: 30m}}
  allowedCommitRequests: [{sourceNamespaces: [demo]}]
---
apiVersion: reverser.dev/v1alpha1
kind: WatchRule
metadata: {name: source-configmaps, namespace: demo}
spec:
  gitTargetRef: {name: source-site}
  rules: [{apiGroups: [""], resources: [configmaps]}]
YAML
show kubectl wait kubeprovider/source --for=condition=CommitRequestsServed --timeout=60s
show kubectl get kubeprovider source -o jsonpath='{.status.commitRequests.namespaces}{"\n"}'
show kubectl --kubeconfig "${SOURCE_KUBECONFIG_ALICE}" -n demo create configmap on-the-source --from-literal=where=source
show bin/kubectl-reverser --kubeconfig "${SOURCE_KUBECONFIG_ALICE}" save source-site -n demo --target-namespace demo \
  -m "Add on-the-source, saved on the source cluster"
show git -C "${repo}" log -1 --stat --format='%h %an <%ae> | %s' main

say "kubectl describe gittarget site: its Events tell what happened to it (pushes, the refused rule, saves)"
printf '$ kubectl describe gittarget site -n demo | sed -n "/^Events:/,\$p"\n'
kubectl describe gittarget site -n demo | sed -n '/^Events:/,$p'

say "Next"
cat <<TEXT
The control plane is still running (state and logs in ${LOCAL_DIR}).
  source ${LOCAL_DIR}/env                      # kubectl as admin; KUBECONFIG_ALICE, KUBECONFIG_BOB
  kubectl explain gittarget.spec               # every field, documented
  kubectl get reverser -A                      # every Reverser object
  PATH=$PWD/bin:\$PATH KUBECONFIG=\$KUBECONFIG_ALICE kubectl reverser save site -n demo -m "why"
  source ${LOCAL_DIR}/source/env               # the source cluster: SOURCE_KUBECONFIG_ADMIN, SOURCE_KUBECONFIG_ALICE
  docs/api.md, docs/configuration.md           # the API and the server flags
  docs/security.md                             # tenancy: lending, rule authors, credentials
  make down                                    # stop everything
  git clone ${GIT_BASE_URL}/demo.git            # the mirror, as any Git client sees it
  curl -s ${REVERSER_METRICS_URL} | grep ^reverser_   # the controller's metrics
Authors come from kube-apiserver's audit events (POST /audit/local on the controller); the committer is the
GitProvider's configured identity.
TEXT
