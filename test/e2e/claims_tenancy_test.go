package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// The attacks of this file are made through claims, by bob as a namespace
// tenant (tenancy_test.go) who may also write Flux objects and FluxClaims
// in his namespace, as a team that runs its own Kustomizations does.

// fluxTenantRole lets bob write Flux objects and FluxClaims in ns.
func fluxTenantRole(ns string) string {
	return harness.UserRole(ns, "flux-tenant", "bob", `- apiGroups: [kustomize.toolkit.fluxcd.io, source.toolkit.fluxcd.io]
  resources: [kustomizations, gitrepositories]
  verbs: ["*"]
- apiGroups: [reverser.dev]
  resources: [fluxclaims]
  verbs: [get, list, watch, create, update, patch, delete]`)
}

// claimFlux sets up bob's side of a claim: rights on Flux objects in his
// namespace, his GitTarget "site" naming FluxClaim "apps", and, as bob, a
// Kustomization "apps" fed by the GitRepository source ("namespace/name")
// and the FluxClaim on it through the tenant's KubeProvider.
func (tn *tenant) claimFlux(source string) {
	t := tn.t
	t.Helper()
	kubectlOK(t, admin, fluxTenantRole(tn.ns), "apply", "-f", "-")
	tn.mirror("", ownConfigMaps)
	kubectlOK(t, bob, "", "patch", "gittarget", "-n", tn.ns, "site", "--type=merge", "-p", `{"spec":{"applierRef":{"kind":"FluxClaim","name":"apps"}}}`)
	srcNS, srcName := splitRef(source)
	kubectlOK(t, bob, fmt.Sprintf(`apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: %[1]s}
spec:
  sourceRef: {kind: GitRepository, name: %[3]s, namespace: %[2]s}
  path: ./%[5]s
  targetNamespace: %[1]s
  prune: true
  interval: 10m
---
apiVersion: reverser.dev/v1alpha1
kind: FluxClaim
metadata: {name: apps, namespace: %[1]s}
spec:
  kubeProviderRef: {name: %[4]s}
  kustomizationRef: {namespace: %[1]s, name: apps}
`, tn.ns, srcNS, srcName, tn.provider, mirrorPath), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(admin, "", "delete", "fluxclaim", "-n", tn.ns, "apps", "--timeout=60s")
	})
}

func splitRef(ref string) (namespace, name string) {
	for i := range ref {
		if ref[i] == '/' {
			return ref[:i], ref[i+1:]
		}
	}
	return "", ref
}

// fluxObjectIn reads a field of a Flux object in namespace ns.
func fluxObjectIn(t *testing.T, resource, ns, name, path string) string {
	t.Helper()
	return kubectlOK(t, admin, "", "get", resource, "-n", ns, name, "-o", "jsonpath={"+path+"}")
}

// TestATenantCannotFreezeAnotherTeamsFluxSource (#27, finding 1): bob's
// Kustomization is fed by the platform team's GitRepository in
// flux-system, which bob may not patch. His claim on it is refused,
// naming the source, and neither the source nor his Kustomization is
// touched: every Kustomization the platform source feeds keeps applying.
func TestATenantCannotFreezeAnotherTeamsFluxSource(t *testing.T) {
	tn := newTenant(t, "")
	platform := uniqueName("platform")
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: %s, namespace: %s}
spec:
  url: %s
  ref: {branch: main}
  interval: 1m
`, platform, controlplane.FluxNamespace, createRepo(t, "platform")), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(admin, "", "delete", "gitrepository", "-n", controlplane.FluxNamespace, platform, "--wait=false")
	})

	tn.claimFlux(controlplane.FluxNamespace + "/" + platform)
	msg := waitCondition(t, time.Minute, "Ready", "False", "NotAuthorized", "fluxclaim", "-n", tn.ns, "apps")
	assert.Contains(t, msg, `user "bob" may not hand this applier to Reverser`)
	assert.Contains(t, msg, "patch gitrepositories.source.toolkit.fluxcd.io "+controlplane.FluxNamespace+"/"+platform)
	// The barrier: bob changes his claim, and the controller handles the
	// change, refusing again; had any handling held something, it shows.
	kubectlOK(t, bob, "", "patch", "fluxclaim", "-n", tn.ns, "apps", "--type=merge", "-p", `{"spec":{"catchUpAfter":"1m"}}`)
	eventually(t, time.Minute, "the changed claim handled", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "fluxclaim", "-n", tn.ns, "apps", "-o",
			`jsonpath={.status.observedGeneration} {.metadata.generation} {.status.conditions[?(@.type=="Ready")].reason}`)
		f := strings.Fields(out)
		return err == nil && len(f) == 3 && f[0] == f[1] && f[2] == "NotAuthorized", nil
	})
	assert.Equal(t, "1m", fluxObjectIn(t, "gitrepository", controlplane.FluxNamespace, platform, ".spec.interval"), "the platform source held")
	assert.Empty(t, fluxObjectIn(t, "gitrepository", controlplane.FluxNamespace, platform, `.metadata.annotations.reverser\.dev/claimed-by`))
	assert.Equal(t, "10m", fluxObjectIn(t, "kustomization", tn.ns, "apps", ".spec.interval"), "bob's Kustomization held")
	assert.Empty(t, fluxObjectIn(t, "kustomization", tn.ns, "apps", `.metadata.annotations.reverser\.dev/claimed-by`))
}

// TestAClaimObeysItsKubeProvidersConsumerNamespaces (#27, finding 6): the
// admin's KubeProvider admits bob's namespace, and bob's claim on his own
// Kustomization is held; once the provider stops admitting it, the claim
// is released within a resync and Flux's schedule is given back.
func TestAClaimObeysItsKubeProvidersConsumerNamespaces(t *testing.T) {
	tn := newTenant(t, "")
	admit := func(ns string) {
		kubectlOK(t, admin, "", "patch", "kubeprovider", tn.provider, "--type=merge", "-p",
			fmt.Sprintf(`{"spec":{"consumerNamespaces":{"from":"Names","names":[%q]}}}`, ns))
	}
	admit(tn.ns)
	kubectlOK(t, admin, fluxTenantRole(tn.ns), "apply", "-f", "-")
	kubectlOK(t, bob, fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: mine, namespace: %s}
spec:
  url: %s
  ref: {branch: main}
  interval: 1m
`, tn.ns, tn.url), "apply", "-f", "-")
	tn.claimFlux(tn.ns + "/mine")
	waitCondition(t, time.Minute, "Held", "True", "Holding", "fluxclaim", "-n", tn.ns, "apps")
	assert.Equal(t, applier.HeldInterval, fluxObjectIn(t, "gitrepository", tn.ns, "mine", ".spec.interval"))

	admit("somebody-else")
	msg := waitCondition(t, time.Minute, "Ready", "False", "KubeProviderNotLent", "fluxclaim", "-n", tn.ns, "apps")
	assert.Contains(t, msg, "spec.consumerNamespaces")
	assert.Equal(t, "10m", fluxObjectIn(t, "kustomization", tn.ns, "apps", ".spec.interval"), "Flux's schedule given back")
	assert.Equal(t, "1m", fluxObjectIn(t, "gitrepository", tn.ns, "mine", ".spec.interval"))
	assert.Empty(t, fluxObjectIn(t, "kustomization", tn.ns, "apps", `.metadata.annotations.reverser\.dev/claimed-by`))
	// The hold's start and end are Events on the claim (#29).
	waitDescribed(t, 10*time.Second, "fluxclaim", tn.ns, "apps", "Normal Held", "Warning Released")
}

// TestAGitProviderCannotSendASecretItsWriterMayNotRead (#27, finding 4):
// bob may write Reverser's objects in his namespace but not get its
// Secrets. His GitProvider naming Secret db-creds, sending it to a host of
// his, is refused by name; so is his change of the URL of the admin's
// GitProvider that names it. Nothing reaches his host.
func TestAGitProviderCannotSendASecretItsWriterMayNotRead(t *testing.T) {
	ns := namespace(t, "creds")
	var mu sync.Mutex
	var reached []string
	host := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached = append(reached, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(host.Close)
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: db-creds, namespace: %[1]s}
stringData: {username: db, password: s3cret}
---
`, ns)+harness.UserRole(ns, "reverser-only", "bob", `- apiGroups: [reverser.dev]
  resources: [gitproviders, gittargets, watchrules]
  verbs: [get, list, watch, create, update, patch, delete]`), "apply", "-f", "-")
	provider := func(name, url string) string {
		insecure := strings.HasPrefix(url, "http://")
		return fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: GitProvider
metadata: {name: %s, namespace: %s}
spec:
  url: %s
  secretRef: {name: db-creds}
  allowInsecureHTTP: %t
`, name, ns, url, insecure)
	}
	out, err := kubectl(bob, provider("mine", host.URL+"/x.git"), "apply", "-f", "-")
	require.Error(t, err, "bob's GitProvider naming a Secret he may not read")
	assert.Contains(t, out, `user "bob" may not have Reverser use these Secrets: it lacks get secrets `+ns+"/db-creds")
	_, err = kubectl(admin, "", "get", "gitprovider", "-n", ns, "mine")
	require.Error(t, err, "not created")

	kubectlOK(t, admin, provider("team", "https://git.invalid/team.git"), "apply", "-f", "-")
	out, err = kubectl(bob, "", "patch", "gitprovider", "-n", ns, "team", "--type=merge", "-p",
		fmt.Sprintf(`{"spec":{"url":%q,"allowInsecureHTTP":true}}`, host.URL+"/x.git"))
	require.Error(t, err, "bob may not point the admin's credentials at his host")
	assert.Contains(t, out, "get secrets "+ns+"/db-creds")
	assert.Equal(t, "https://git.invalid/team.git", kubectlOK(t, admin, "", "get", "gitprovider", "-n", ns, "team", "-o", "jsonpath={.spec.url}"))
	assert.Equal(t, controlplane.UserAdmin, kubectlOK(t, admin, "", "get", "gitprovider", "-n", ns, "team", "-o", "jsonpath={.status.authorizedBy.username}"))
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, reached, "nothing reached bob's host")
}

// TestARuleWrittenUnderSystemMastersKeepsNoRight (#27, finding 3): carol
// holds no right in the namespace but writes a rule through a
// system:masters identity (a break-glass certificate, impersonation). The
// API server lets it in, records carol without the group, and the first
// re-check refuses it: nothing of the namespace is mirrored for it.
func TestARuleWrittenUnderSystemMastersKeepsNoRight(t *testing.T) {
	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly})
	f.waitReady()
	kubectlOK(t, admin, harness.WatchRule(f.ns, "masters", "site", "  rules:\n  - apiGroups: [\"\"]\n    resources: [services]"), "apply", "-f", "-", "--as=carol", "--as-group=system:masters")
	assert.Equal(t, "carol", kubectlOK(t, admin, "", "get", "watchrule", "-n", f.ns, "masters", "-o", "jsonpath={.status.authorizedBy.username}"))
	assert.NotContains(t, kubectlOK(t, admin, "", "get", "watchrule", "-n", f.ns, "masters", "-o", "jsonpath={.status.authorizedBy.groups}"),
		"system:masters", "never recorded")
	msg := waitCondition(t, time.Minute, v1.ConditionReady, "False", "NotAuthorized", "watchrule", "-n", f.ns, "masters")
	assert.Contains(t, msg, `user "carol" may not read what the rule selects`)
	kubectlOK(t, admin, "", "create", "service", "clusterip", "-n", f.ns, "web", "--tcp=80:80")
	// A ConfigMap created after the Service and committed: had a stream of
	// Services run for the rule, the Service, written by the same user
	// within the same silence, would have been committed with it or before.
	f.barrier()
	assert.False(t, slices.ContainsFunc(f.files(), func(p string) bool { return strings.Contains(p, "/services/") }),
		"a Service mirrored for carol's rule")
}

// TestAConflictingFolderTellsNoOtherTenantsTarget (#27, finding 8): the
// platform team mirrors folder team/apps of a repository. bob points a
// GitProvider of his namespace at the same repository spelt in capitals
// and a GitTarget at folder team, which contains theirs. Case makes no
// other repository: his target is PathConflict, and its message names
// neither their namespace nor their target or folder. Nothing of his
// namespace reaches the repository.
func TestAConflictingFolderTellsNoOtherTenantsTarget(t *testing.T) {
	platform := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, path: "team/apps"})
	platform.waitReady()
	kubectlOK(t, admin, "", "create", "configmap", "-n", platform.ns, "theirs", "--from-literal=a=1")
	theirs := "team/apps/" + platform.ns + "/configmaps/theirs.yaml"
	platform.waitFile(theirs, exists, "the platform's ConfigMap mirrored")
	before := platform.files()

	tn := newTenant(t, "")
	slash := strings.LastIndex(platform.url, "/")
	tn.url = platform.url[:slash] + strings.ToUpper(platform.url[slash:])
	require.NotEqual(t, platform.url, tn.url)
	tn.path = "team"
	tn.mirror("", ownConfigMaps)
	kubectlOK(t, bob, "", "create", "configmap", "-n", tn.ns, "bobs", "--from-literal=b=1")
	msg := waitCondition(t, time.Minute, v1.ConditionReady, "False", "PathConflict", "gittarget", "-n", tn.ns, "site")
	assert.Contains(t, msg, "a GitTarget of another namespace")
	assert.NotContains(t, msg, platform.ns)
	assert.NotContains(t, msg, "team/apps")
	stalled, _, _ := condition(t, v1.ConditionStalled, "gittarget", "-n", tn.ns, "site")
	assert.Equal(t, "True", stalled)
	reconciled(t, tn.ns, "site")
	_, reason, _ := condition(t, v1.ConditionReady, "gittarget", "-n", tn.ns, "site")
	assert.Equal(t, "PathConflict", reason, "still in conflict after a reconcile")
	assert.Equal(t, before, platform.files(), "the repository as the platform team left it")
}

// TestFormatCharactersNeitherHideNorForgeAnAuthor (#27, finding 8): a user
// whose name carries a right-to-left override and a zero-width space (here
// by impersonation; an identity provider may name people so) edits and
// saves with a message carrying them too. The commit names the author with
// those characters percent-encoded and keeps the message without them, so
// no log or review reads otherwise than what was done.
func TestFormatCharactersNeitherHideNorForgeAnAuthor(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow)
	const user = "alice\u202eevil\u200b"
	as := []string{"--as=" + user, "--as-group=" + controlplane.GroupDevs}
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: saver, namespace: %s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reverser-saver}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %q}
`, f.ns, user), "apply", "-f", "-")
	kubectlOK(t, admin, "", append([]string{"create", "configmap", "-n", f.ns, "bidi", "--from-literal=a=1"}, as...)...)
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: bidi, namespace: %s}
spec:
  gitTargetRef: {name: site}
  message: "Rotate \u202egnp.exe\u202c and\u200b more"
`, f.ns), append([]string{"create", "-f", "-"}, as...)...)
	_, ready := f.waitOutcome("bidi")
	require.Equal(t, v1.ReasonCommitted, ready.Reason, ready.Message)

	log := git(t, f.bare, "log", "-1", "--format=%an%n%B", "main")
	assert.True(t, strings.HasPrefix(log, "alice%E2%80%AEevil%E2%80%8B\nRotate gnp.exe and more\n"), "%q", log)
	assert.NotContains(t, log, "\u202e")
	assert.NotContains(t, log, "\u200b")
	assert.Contains(t, f.files(), f.cmPath("bidi"))
}

// TestASquatterWithoutPushRightsHoldsNoFolder (#27, finding 8): the
// platform team's repository is public (anyone fetches, only its robot
// pushes). bob gets there first: a GitTarget at folder team of it, with a
// GitProvider of no credentials. His target stops at once, PushNotAllowed,
// and holds nothing: the platform's target at team/apps, made after his,
// mirrors; nothing of bob's namespace reaches the repository.
func TestASquatterWithoutPushRightsHoldsNoFolder(t *testing.T) {
	robot := uniqueName("robot")
	password := "e2e-push-password-" + robot
	creds, err := os.OpenFile(filepath.Join(env.GitRoot, gitserver.CredentialsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = fmt.Fprintf(creds, "%s:%s\n", robot, password)
	require.NoError(t, err)
	require.NoError(t, creds.Close())
	public := func(url string) string {
		return strings.Replace(url, gitserver.PathPrefix+"/", gitserver.PublicPrefix+"/", 1)
	}

	var tn *tenant
	platform := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, path: "team/apps",
		providerSpec: "  secretRef: {name: git-credentials}\n  allowInsecureHTTP: true",
		remote:       func(name string) string { return public(env.GitBaseURL + "/" + name + ".git") },
		seed: func(f *mirrorFixture) {
			kubectlOK(t, admin, "", "create", "secret", "generic", "-n", f.ns, "git-credentials",
				"--from-literal=username="+robot, "--from-literal=password="+password)
			tn = newTenant(t, "")
			tn.url, tn.path = public(f.url), "team"
			tn.mirror("", ownConfigMaps)
			kubectlOK(t, bob, "", "create", "configmap", "-n", tn.ns, "bobs", "--from-literal=b=1")
			msg := waitCondition(t, time.Minute, v1.ConditionReady, "False", "PushNotAllowed", "gittarget", "-n", tn.ns, "site")
			assert.Contains(t, msg, "give GitProvider repo credentials that may push to branch main")
		}})
	platform.waitReady()
	kubectlOK(t, admin, "", "create", "configmap", "-n", platform.ns, "theirs", "--from-literal=a=1")
	platform.waitFile("team/apps/"+platform.ns+"/configmaps/theirs.yaml", exists, "the platform's ConfigMap mirrored")
	reconciled(t, tn.ns, "site")
	_, reason, _ := condition(t, v1.ConditionReady, "gittarget", "-n", tn.ns, "site")
	assert.Equal(t, "PushNotAllowed", reason, "still stopped after a reconcile")
	assert.False(t, slices.ContainsFunc(platform.files(), func(p string) bool { return strings.Contains(p, tn.ns) }),
		"bob's ConfigMap in the platform's repository")
	noPlaintext(t, platform, password)
}
