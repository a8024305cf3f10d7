package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// The attacks of this file are made by bob as a namespace tenant: he may do
// anything with Reverser's objects, ConfigMaps, Secrets and Services of his
// own namespace, and holds no right elsewhere beyond the shared reverser-user
// role every developer has (read reverser.dev, write ConfigMaps).

// tenant is bob's namespace, with a KubeProvider of its own (inCluster, no
// audit: changes are authored by the committer, at once), so that what a test
// lends or withdraws touches no other test.
type tenant struct {
	*mirrorFixture
	provider string
	// path is the folder of the tenant's GitTarget "site".
	path string
}

// tenantRole lets bob write Reverser's namespaced kinds (all but save),
// ConfigMaps, Secrets and Services in ns.
func tenantRole(ns string) string {
	// Not "*" on reverser.dev: on gittargets that would include the verb save.
	return harness.UserRole(ns, "tenant", "bob", `- apiGroups: [reverser.dev]
  resources: [gitproviders, gittargets, watchrules, commitrequests]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [configmaps, secrets, services]
  verbs: ["*"]`)
}

func newTenant(t *testing.T, providerSpec string) *tenant {
	t.Helper()
	ns := namespace(t, "tenant")
	name := uniqueName("tenant-repo")
	bare, err := gitserver.CreateRepo(env.GitRoot, name)
	require.NoError(t, err)
	tn := &tenant{
		mirrorFixture: &mirrorFixture{t: t, ns: ns, url: env.GitBaseURL + "/" + name + ".git", bare: bare, target: "site"},
		provider:      uniqueName("kp"),
		path:          mirrorPath,
	}
	kubectlOK(t, admin, harness.Docs(tenantRole(ns), harness.KubeProvider(tn.provider, providerSpec)), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "kubeprovider", tn.provider) })
	return tn
}

// apply applies objects in the tenant's namespace as user.
func (tn *tenant) apply(user, yaml string) (string, error) {
	return kubectl(user, yaml, "apply", "--server-side", "-n", tn.ns, "-f", "-")
}

// mirror sets up, as bob, a GitProvider to his repository, the GitTarget
// "site" and the WatchRule "rules" whose spec is ruleSpec.
func (tn *tenant) mirror(providerSpec, ruleSpec string) {
	tn.t.Helper()
	kubectlOK(tn.t, bob, harness.Docs(harness.GitProvider(tn.ns, "repo", tn.url, providerSpec),
		harness.GitTarget(harness.Target{Namespace: tn.ns, KubeProvider: tn.provider, Path: tn.path, Silence: "200ms", MaxAge: "5s"}),
		harness.WatchRule(tn.ns, "rules", "site", ruleSpec)), "apply", "--server-side", "-f", "-")
}

// ownConfigMaps is a WatchRule spec selecting its namespace's ConfigMaps.
const ownConfigMaps = harness.ConfigMapRules

// condition reads a condition of an object as admin.
func condition(t *testing.T, typ string, args ...string) (status, reason, message string) {
	out, err := kubectl(admin, "", append(append([]string{"get"}, args...), "-o",
		fmt.Sprintf(`jsonpath={.status.conditions[?(@.type==%q)].status}|{.status.conditions[?(@.type==%q)].reason}|{.status.conditions[?(@.type==%q)].message}`,
			typ, typ, typ))...)
	if err != nil {
		return "", "", err.Error()
	}
	parts := strings.SplitN(out, "|", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	return parts[0], parts[1], parts[2]
}

// waitCondition waits until a condition has the given status and reason, and
// returns its message.
func waitCondition(t *testing.T, timeout time.Duration, typ, status, reason string, args ...string) string {
	t.Helper()
	var message string
	eventually(t, timeout, fmt.Sprintf("%s %s=%s %s", strings.Join(args, " "), typ, status, reason), func() (bool, error) {
		s, r, m := condition(t, typ, args...)
		message = m
		if s == status && r == reason {
			return true, nil
		}
		return false, fmt.Errorf("%s=%s %s: %s", typ, s, r, m)
	})
	return message
}

// waitDescribed waits until `kubectl describe` of the object lists an
// Event of each reason ("Normal Pushed"), and returns the description.
func waitDescribed(t *testing.T, timeout time.Duration, kind, namespace, name string, events ...string) string {
	t.Helper()
	var out string
	eventually(t, timeout, fmt.Sprintf("Events %v on %s %s/%s", events, kind, namespace, name), func() (bool, error) {
		var err error
		out, err = kubectl(admin, "", "describe", kind, "-n", namespace, name)
		if err != nil {
			return false, err
		}
		_, listed, _ := strings.Cut(out, "\nEvents:")
		for _, e := range events {
			typ, reason, _ := strings.Cut(e, " ")
			if !regexp.MustCompile(`(?m)^\s+` + typ + `\s+` + reason + `\s`).MatchString(listed) {
				return false, fmt.Errorf("no %s Event in:\n%s", e, listed)
			}
		}
		return true, nil
	})
	return out
}

// reconciled is the barrier of a stopped GitTarget: it asks the controller
// to reconcile ns/name now and returns once the answer is in its status
// (kubectl reverser reconcile). Only a reconcile starts a worker, so a
// target still stopped after it has run none that could have written a
// change made before the request.
func reconciled(t *testing.T, ns, name string) {
	t.Helper()
	out, err := plugin(admin, "reconcile", name, "-n", ns, "--timeout", "1m")
	require.NoError(t, err, out)
}

// noFileContains fails when any file of the repository's main branch has
// substr in its path.
func (f *mirrorFixture) noFileContains(substr string) {
	f.t.Helper()
	for _, p := range f.files() {
		assert.NotContains(f.t, p, substr)
	}
}

// TestTenantCannotMirrorWhatTheyCannotRead (finding 1): bob mirrors
// kube-system into his own repository.
func TestTenantCannotMirrorWhatTheyCannotRead(t *testing.T) {
	tn := newTenant(t, "")

	// He may not read kube-system's Roles: the API server refuses the rule.
	out, err := tn.apply(bob, harness.WatchRule(tn.ns, "steal", "site", `  sourceNamespace: kube-system
  rules:
  - apiGroups: ["", rbac.authorization.k8s.io]
    resources: [configmaps, roles, rolebindings]`))
	require.Error(t, err)
	assert.Contains(t, out, `user "bob" may not read what the rule selects: it lacks `)
	assert.Contains(t, out, `list roles.rbac.authorization.k8s.io in namespace kube-system`)

	// ConfigMaps he may read, but the provider lends his namespace only itself.
	tn.mirror("", ownConfigMaps)
	kubectlOK(t, bob, harness.WatchRule(tn.ns, "steal", "site", "  sourceNamespace: kube-system\n"+ownConfigMaps), "apply", "--server-side", "-f", "-")
	msg := waitCondition(t, 30*time.Second, v1.ConditionReady, "False", "NotLent", "watchrule", "-n", tn.ns, "steal")
	assert.Contains(t, msg, `does not lend source namespace "kube-system" to namespace "`+tn.ns+`"`)

	// A ClusterWatchRule aimed at his target by someone else is not taken
	// unless the target accepts it.
	cwr := uniqueName("feed")
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: ClusterWatchRule
metadata: {name: %s}
spec:
  gitTargetRef: {namespace: %s, name: site}
  rules:
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [clusterroles]
`, cwr, tn.ns), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "clusterwatchrule", cwr) })
	waitCondition(t, 30*time.Second, v1.ConditionReady, "False", "NotAccepted", "clusterwatchrule", cwr)

	tn.barrier()
	tn.noFileContains("kube-system")
	tn.noFileContains("_cluster")
	// The controller may list ConfigMaps everywhere, so the one informer his
	// stream reads holds kube-system's too: his stream hands on his own only.
	for _, p := range tn.files() {
		assert.True(t, strings.HasPrefix(p, mirrorPath+"/"+tn.ns+"/"), "%s is not of his namespace", p)
	}
	gt := tn.gitTarget()
	assert.Equal(t, int32(1), gt.Status.Streams.Desired, "only his own namespace's ConfigMaps are watched")
	assert.Contains(t, conditionMessage(gt.Status.Conditions, v1.ConditionStreamsRunning), "WatchRule steal:")

	// What the admin lends explicitly is mirrored.
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: KubeProvider
metadata: {name: %s}
spec:
  inCluster: true
  lend:
  - sourceNamespaces: [kube-system]
    to: {from: Names, names: [%s]}
`, tn.provider, tn.ns), "apply", "--server-side", "-f", "-")
	waitCondition(t, 30*time.Second, v1.ConditionReady, "True", "Resolved", "watchrule", "-n", tn.ns, "steal")
	tn.waitFile(filepath.Join(mirrorPath, "kube-system", "configmaps", "extension-apiserver-authentication.yaml"),
		func(s string) bool { return s != "" }, "the lent namespace mirrored")
}

// TestWorkersKeepTheirOwnCredentials (finding 2): bob points a GitProvider
// of his own at another team's private repository, without credentials,
// hoping to push with theirs, and then at their folder.
func TestWorkersKeepTheirOwnCredentials(t *testing.T) {
	user := uniqueName("robot")
	creds, err := os.OpenFile(filepath.Join(env.GitRoot, gitserver.CredentialsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	password := "e2e-their-password-" + user
	_, err = fmt.Fprintf(creds, "%s:%s\n", user, password)
	require.NoError(t, err)
	require.NoError(t, creds.Close())

	victim := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, private: true,
		providerSpec: "  secretRef: {name: git-credentials}\n  allowInsecureHTTP: true"})
	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", victim.ns, "git-credentials",
		"--from-literal=username="+user, "--from-literal=password="+password)
	victim.waitReady()
	victim.barrier()

	tn := newTenant(t, "")
	tn.url = strings.Replace(victim.url, gitserver.PathPrefix+"/", gitserver.PrivatePrefix+"/", 1)
	tn.bare = victim.bare
	tn.path = "bob"
	tn.mirror("", ownConfigMaps)
	kubectlOK(t, bob, "", "create", "configmap", "-n", tn.ns, "bobs", "--from-literal=a=1")
	// The remote refuses his (absent) credentials for a push: his target
	// stops before it mirrors anything (#27 finding 8).
	msg := waitCondition(t, 60*time.Second, v1.ConditionGitReachable, "False", "PushNotAllowed", "gittarget", "-n", tn.ns, "site")
	assert.Contains(t, strings.ToLower(msg), "authentication")
	victim.barrier()
	assert.Equal(t, "True", conditionStatus(victim.gitTarget().Status.Conditions, v1.ConditionReady),
		"the other team's mirror does not see bob's failures")
	tn.noFileContains(tn.ns)

	// His GitTarget at their folder, with their repository, is refused.
	kubectlOK(t, bob, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: GitTarget
metadata: {name: overlap, namespace: %s}
spec:
  kubeProviderRef: {name: %s}
  gitProviderRef: {name: repo}
  branch: main
  path: %s/%s
`, tn.ns, tn.provider, mirrorPath, victim.ns), "apply", "--server-side", "-f", "-")
	// Credentials that cannot push hold no folder: refused before the
	// folder is even compared, and naming nobody.
	msg = waitCondition(t, 30*time.Second, v1.ConditionReady, "False", "PushNotAllowed", "gittarget", "-n", tn.ns, "overlap")
	assert.NotContains(t, msg, victim.ns, "who mirrors where is the other team's to tell (#27 finding 8)")
	victim.barrier()
	assert.Equal(t, "True", conditionStatus(victim.gitTarget().Status.Conditions, v1.ConditionReady), "their mirror runs on")
	noPlaintext(t, victim, password)
}

func conditionStatus(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return string(c.Status)
	}
	return ""
}

// TestRevocationStopsTheMirror (finding 3): each precondition withdrawn
// while bob's mirror runs stops it within a resync; an edit after that
// never reaches Git.
func TestRevocationStopsTheMirror(t *testing.T) {
	configMap := func(ns string) func(t *testing.T, tn *tenant, name string) {
		return func(t *testing.T, tn *tenant, name string) {
			kubectlOK(t, admin, "", "create", "configmap", "-n", ns+tn.ns, name, "--from-literal=a=1")
		}
	}
	cases := []struct {
		name string
		// ruleReason is set when the rule, not the target, is refused.
		reason, ruleReason string
		rules              func(tn *tenant) string
		providerSpec       string
		setup, revoke      func(t *testing.T, tn *tenant)
		// edit makes an object named name that the rules select.
		edit func(t *testing.T, tn *tenant, name string)
	}{
		{name: "rights", ruleReason: "NotAuthorized",
			rules: func(*tenant) string {
				return "  rules:\n  - apiGroups: [\"\"]\n    resources: [services]"
			},
			revoke: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "delete", "rolebinding", "-n", tn.ns, "tenant")
			},
			edit: func(t *testing.T, tn *tenant, name string) {
				kubectlOK(t, admin, "", "create", "service", "clusterip", "-n", tn.ns, name, "--tcp=80:80")
			}},
		{name: "lending", ruleReason: "NotLent",
			rules: func(tn *tenant) string { return "  sourceNamespace: shared-" + tn.ns + "\n" + ownConfigMaps },
			setup: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "create", "namespace", "shared-"+tn.ns)
				t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "namespace", "shared-"+tn.ns, "--wait=false") })
				kubectlOK(t, admin, "", "patch", "kubeprovider", tn.provider, "--type=merge", "-p",
					fmt.Sprintf(`{"spec":{"lend":[{"sourceNamespaces":["shared-%s"],"to":{"from":"Names","names":["%s"]}}]}}`, tn.ns, tn.ns))
			},
			revoke: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "patch", "kubeprovider", tn.provider, "--type=json", "-p", `[{"op":"remove","path":"/spec/lend"}]`)
			},
			edit: configMap("shared-")},
		{name: "provider", reason: "KubeProviderNotFound",
			revoke: func(t *testing.T, tn *tenant) { kubectlOK(t, admin, "", "delete", "kubeprovider", tn.provider) }},
		{name: "consumer", reason: "KubeProviderNotLent",
			revoke: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "patch", "kubeprovider", tn.provider, "--type=merge", "-p",
					`{"spec":{"consumerNamespaces":{"from":"Names","names":["somebody-else"]}}}`)
			}},
		// Namespace labels come from the controller's informer: a label
		// taken away withdraws the consumer as a spec change does.
		{name: "label", reason: "KubeProviderNotLent",
			setup: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "label", "namespace", tn.ns, "reverser-consumer=yes")
				kubectlOK(t, admin, "", "patch", "kubeprovider", tn.provider, "--type=merge", "-p",
					`{"spec":{"consumerNamespaces":{"from":"Selector","selector":{"matchLabels":{"reverser-consumer":"yes"}}}}}`)
			},
			revoke: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "label", "namespace", tn.ns, "reverser-consumer-")
			}},
		{name: "gitprovider", reason: "GitProviderNotFound",
			revoke: func(t *testing.T, tn *tenant) { kubectlOK(t, admin, "", "delete", "gitprovider", "-n", tn.ns, "repo") }},
		{name: "credentials", reason: "SecretNotFound", providerSpec: "  secretRef: {name: git-credentials}\n  allowInsecureHTTP: true",
			setup: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "create", "secret", "generic", "-n", tn.ns, "git-credentials",
					"--from-literal=username=robot", "--from-literal=password="+revokedPassword)
			},
			revoke: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "delete", "secret", "-n", tn.ns, "git-credentials")
			}},
		{name: "branch", reason: "BranchNotAllowed",
			revoke: func(t *testing.T, tn *tenant) {
				kubectlOK(t, admin, "", "patch", "gitprovider", "-n", tn.ns, "repo", "--type=merge", "-p", `{"spec":{"allowedBranches":["release"]}}`)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTenant(t, "")
			tn.t = t
			if tc.setup != nil {
				tc.setup(t, tn)
			}
			rules, edit := ownConfigMaps, configMap("")
			if tc.rules != nil {
				rules = tc.rules(tn)
			}
			if tc.edit != nil {
				edit = tc.edit
			}
			tn.mirror(tc.providerSpec, rules)
			// The GitProvider's own status (#28): its one writer asks the
			// remote with its credentials.
			waitCondition(t, time.Minute, v1.ConditionReady, "True", "Ready", "gitprovider", "-n", tn.ns, "repo")
			edit(t, tn, "before")
			eventually(t, 60*time.Second, "the mirror runs before the withdrawal", func() (bool, error) {
				return slices.ContainsFunc(tn.files(), func(p string) bool { return strings.HasSuffix(p, "/before.yaml") }), nil
			})

			tc.revoke(t, tn)
			// Within one resync (10s here) plus the authorizer's cache.
			if tc.ruleReason != "" {
				waitCondition(t, 25*time.Second, v1.ConditionReady, "False", tc.ruleReason, "watchrule", "-n", tn.ns, "rules")
				waitCondition(t, 25*time.Second, v1.ConditionStreamsRunning, "False", "RulesRefused", "gittarget", "-n", tn.ns, "site")
				// The refusal is an Event where users look (#29).
				described := waitDescribed(t, 10*time.Second, "gittarget", tn.ns, "site", "Normal Pushed", "Warning RuleRefused")
				assert.Contains(t, described, "WatchRule rules:")
			} else {
				waitCondition(t, 25*time.Second, v1.ConditionReady, "False", tc.reason, "gittarget", "-n", tn.ns, "site")
				waitCondition(t, 25*time.Second, v1.ConditionStreamsRunning, "False", "Stopped", "gittarget", "-n", tn.ns, "site")
				if tc.name == "credentials" {
					// Its watch of the Secret hears the delete at once.
					waitCondition(t, 25*time.Second, v1.ConditionReady, "False", "SecretNotFound", "gitprovider", "-n", tn.ns, "repo")
					waitCondition(t, 25*time.Second, v1.ConditionStalled, "True", "SecretNotFound", "gitprovider", "-n", tn.ns, "repo")
				}
			}
			edit(t, tn, "after")
			reconciled(t, tn.ns, "site")
			running, _, _ := condition(t, v1.ConditionStreamsRunning, "gittarget", "-n", tn.ns, "site")
			assert.Equal(t, "False", running, "still stopped after a reconcile")
			assert.False(t, slices.ContainsFunc(tn.files(), func(p string) bool { return strings.HasSuffix(p, "/after.yaml") }),
				"a commit after the precondition was withdrawn")
			noPlaintext(t, tn.mirrorFixture, revokedPassword)
		})
	}
}

// revokedPassword is the Git password of a revocation case's Secret.
const revokedPassword = "e2e-revoked-git-password"

// TestTenantInputsAreRefused (finding 5): bob's inputs that would alias or
// escape a folder, leak or misuse credentials, or forge a save.
func TestTenantInputsAreRefused(t *testing.T) {
	tn := newTenant(t, "")
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"dot segment aliases a folder", gitTargetYAML(tn.ns, "dot", `  path: ./x`), "spec.path"},
		{".git in another case", gitTargetYAML(tn.ns, "dotgit", `  path: apps/.GIT/hooks`), "spec.path"},
		{"a bidi control", gitTargetYAML(tn.ns, "bidi", "  path: \"apps/\u202eevil\""), "spec.path"},
		{"a token in the URL", harness.GitProvider(tn.ns, "leak", "https://s3cret-token@git.example/org/repo.git", ""), "spec.url"},
		{"credentials over plain http", harness.GitProvider(tn.ns, "clear", "http://git.example/org/repo.git", "  secretRef: {name: creds}"),
			"allowInsecureHTTP"},
		{"a signing key of another namespace", harness.GitProvider(tn.ns, "signer", "https://git.example/org/repo.git",
			"  signing: {sshKeySecretRef: {namespace: kube-system, name: keys, key: id}}"), "spec.signing.sshKeySecretRef.namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := kubectl(bob, tc.yaml, "create", "-f", "-")
			require.Error(t, err, "accepted: %s", out)
			assert.Contains(t, out, tc.want)
			assert.NotContains(t, out, "s3cret", "a refusal never echoes a credential")
		})
	}
	request := func(name, extra string) string {
		return fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: %s, namespace: %s}
spec:
  gitTargetRef: {name: site}
%s`, name, tn.ns, extra)
	}
	for _, tc := range []struct{ name, spec, want string }{
		{"our trailer", "  message: \"Looks harmless\\n\\nReverser-Commit-Request: 1234\"", "spec.message"},
		{"a carriage return", "  message: \"one\\rtwo\"", "spec.message"},
		{"an attach that waits an hour", "  message: ok\n  window: {attachTimeout: 1h}", "spec.window.attachTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := kubectl(alice, request(uniqueName("cr"), tc.spec), "create", "-f", "-")
			require.Error(t, err, "accepted: %s", out)
			assert.Contains(t, out, tc.want)
		})
	}

	// save is checked again when the request is claimed: bob may save when
	// he asks, for a GitTarget that does not exist yet, and has lost the
	// right by the time it does.
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: saver, namespace: %s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reverser-saver}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
`, tn.ns), "apply", "--server-side", "-f", "-")
	kubectlOK(t, bob, request("late", "  message: saved later\n  window: {attachTimeout: 2m}"), "create", "-f", "-")
	kubectlOK(t, admin, "", "delete", "rolebinding", "-n", tn.ns, "saver")
	tn.mirror("", ownConfigMaps)
	msg := waitCondition(t, 60*time.Second, v1.ConditionReady, "False", v1.ReasonNotAllowed, "commitrequest", "-n", tn.ns, "late")
	assert.Contains(t, msg, `user "bob" may no longer save GitTarget `+tn.ns+`/site`)
}

// TestAKubeProviderWithABrokenKubeconfigSaysSo (#29): a KubeProvider whose
// kubeconfig Secret is missing is Ready=False and Stalled=True naming it,
// not Unknown NotUsed; once the Secret holds a kubeconfig, Stalled goes.
func TestAKubeProviderWithABrokenKubeconfigSaysSo(t *testing.T) {
	name := uniqueName("broken")
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: KubeProvider
metadata: {name: %[1]s}
spec:
  kubeConfigSecretRef: {namespace: %[2]s, name: %[1]s, key: kubeconfig}
`, name, controlplane.ReverserNamespace), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(admin, "", "delete", "kubeprovider", name)
		_, _ = kubectl(admin, "", "delete", "secret", "-n", controlplane.ReverserNamespace, name)
	})
	msg := waitCondition(t, time.Minute, v1.ConditionReady, "False", "SecretNotFound", "kubeprovider", name)
	assert.Contains(t, msg, "create it or fix the reference")
	waitCondition(t, time.Minute, v1.ConditionStalled, "True", "SecretNotFound", "kubeprovider", name)

	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", controlplane.ReverserNamespace, name, "--from-literal=kubeconfig=not yaml: [")
	waitCondition(t, time.Minute, v1.ConditionReady, "False", "InvalidKubeconfig", "kubeprovider", name)

	kubeconfig, err := os.ReadFile(env.KubeconfigAdmin)
	require.NoError(t, err)
	kubectlOK(t, admin, "", "delete", "secret", "-n", controlplane.ReverserNamespace, name)
	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", controlplane.ReverserNamespace, name, "--from-literal=kubeconfig="+string(kubeconfig))
	waitCondition(t, time.Minute, v1.ConditionReady, "Unknown", "NotUsed", "kubeprovider", name)
	eventually(t, time.Minute, "Stalled gone", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "kubeprovider", name, "-o", `jsonpath={.status.conditions[?(@.type=="Stalled")].status}`)
		return err == nil && out == "", err
	})
}
