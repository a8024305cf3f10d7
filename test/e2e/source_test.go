package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/commitrequest"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

// sourceFixture is a second cluster (its own etcd and kube-apiserver,
// auditing to the controller's ingress) mirrored by GitTarget <ns>/site
// through KubeProvider kp, reached with a kubeconfig Secret.
type sourceFixture struct {
	*mirrorFixture
	src *controlplane.Source
	kp  string
}

// configMapsOnly mirrors what the provider's credential may read there.
func atOK(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	out, err := at(kubeconfig, stdin, args...)
	require.NoError(t, err)
	return out
}

// newSource starts a source cluster and a KubeProvider for it serving
// CommitRequests with mode; no GitTarget uses the provider yet.
func newSource(t *testing.T, mode v1.CommitRequestsMode) *sourceFixture {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cpBin, err := output(ctx, root, "bash", "hack/build-control-plane.sh")
	require.NoError(t, err)
	kp := uniqueName("src")
	src, err := controlplane.StartSource(ctx, env, cpBin, controlplane.SourceOptions{Name: kp, AuditRoute: kp})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Stop() })

	// The mirror reads ConfigMaps there; the provider's right to serve
	// CommitRequests is granted later, by grantSaves.
	atOK(t, src.KubeconfigAdmin, `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reverser-source-mirror}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: reverser-source-mirror}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reverser-source-mirror}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: reverser-source}
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: reverser-source-rotated}
`, "apply", "-f", "-")
	kubeconfig, err := os.ReadFile(src.KubeconfigReverser)
	require.NoError(t, err)
	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", controlplane.ReverserNamespace, kp+"-kubeconfig",
		"--from-literal=kubeconfig="+string(kubeconfig))
	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", controlplane.ReverserNamespace, kp+"-audit",
		"--from-literal=token="+src.AuditToken)
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: KubeProvider
metadata: {name: %[1]s}
spec:
  kubeConfigSecretRef: {namespace: reverser-system, name: %[1]s-kubeconfig, key: kubeconfig}
  lendSameNamespaces: true
  commitRequests: %[2]s
  audit:
    enabled: true
    bearerTokenSecretRef: {namespace: reverser-system, name: %[1]s-audit, key: token}
`, kp, mode), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "kubeprovider", kp, "--wait=false") })
	return &sourceFixture{src: src, kp: kp}
}

// mirror creates GitTarget <ns>/site mirroring source namespace <ns>, the
// one the provider lends namespace <ns> by its name, with a long window:
// only saves close it. alice edits and saves there.
func (s *sourceFixture) mirror(t *testing.T) {
	t.Helper()
	s.mirrorFixture = newMirrorWith(t, mirrorOptions{rules: configMapsOnly, targetSpec: saveWindow, provider: s.kp,
		seed: func(f *mirrorFixture) {
			atOK(t, s.src.KubeconfigAdmin, "", "create", "namespace", f.ns)
			atOK(t, s.src.KubeconfigAdmin, fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: editor, namespace: %[1]s}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: ["*"]}
- {apiGroups: [reverser.dev], resources: [commitrequests], verbs: [create, get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-edits, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: editor}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
`, f.ns), "apply", "-f", "-")
		}})
}

// grantSaves binds (or, with revoke, unbinds) the rights spec.commitRequests
// needs on the source cluster to the provider's user.
func (s *sourceFixture) grantSaves(t *testing.T, user string, revoke bool) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reverser-saves, namespace: %[1]s}
rules:
- {apiGroups: [reverser.dev], resources: [commitrequests], verbs: [get, list, watch, patch, delete]}
- {apiGroups: [reverser.dev], resources: [commitrequests/status], verbs: [update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: %[2]s-saves, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reverser-saves}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: %[2]s}]
`, s.ns, user)
	if revoke {
		atOK(t, s.src.KubeconfigAdmin, "", "delete", "rolebinding", "-n", s.ns, user+"-saves")
		return
	}
	atOK(t, s.src.KubeconfigAdmin, manifest, "apply", "-f", "-")
}

// served waits for the provider's CommitRequestsServed reason and returns
// the provider.
func (s *sourceFixture) served(t *testing.T, reason string, timeout time.Duration) v1.KubeProvider {
	t.Helper()
	var kp v1.KubeProvider
	eventually(t, timeout, "CommitRequestsServed "+reason, func() (bool, error) {
		getJSON(t, admin, &kp, "kubeprovider", s.kp)
		c := meta.FindStatusCondition(kp.Status.Conditions, v1.ConditionCommitRequestsServed)
		if c == nil {
			return false, fmt.Errorf("no condition yet")
		}
		want := metav1.ConditionFalse
		if reason == commitrequest.ReasonWatching {
			want = metav1.ConditionTrue
		}
		return c.Reason == reason && c.Status == want, fmt.Errorf("%s: %s", c.Reason, c.Message)
	})
	return kp
}

// save runs `kubectl reverser save` as alice on the source cluster.
func (s *sourceFixture) save(t *testing.T, message string) (string, error) {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(root, pluginPath), "--kubeconfig", s.src.KubeconfigAlice, "save", "site", "-n", s.ns,
		"--target-namespace", s.ns, "-m", message).CombinedOutput()
	return string(out), err
}

func (s *sourceFixture) sourceRequests(t *testing.T) []v1.CommitRequest {
	var list v1.CommitRequestList
	out := atOK(t, s.src.KubeconfigAdmin, "", "get", "commitrequests", "-n", s.ns, "-o", "json")
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	return list.Items
}

// TestSaveOnASourceCluster (D4, D5, D6): a KubeProvider reaching a second
// cluster serves the CommitRequests made there, next to the edits.
func TestSaveOnASourceCluster(t *testing.T) {
	s := newSource(t, v1.CommitRequestsReconcileAndDeleteFinished)
	s.served(t, commitrequest.ReasonNothingToWatch, 30*time.Second)

	s.mirror(t)
	s.waitReady()
	kp := s.served(t, commitrequest.ReasonCRDNotInstalled, 30*time.Second)
	assert.Contains(t, conditionMessage(kp.Status.Conditions, v1.ConditionCommitRequestsServed), "kubectl apply --server-side -k artifacts/source")
	assert.Nil(t, kp.Status.CommitRequests, "nothing is watched")

	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	atOK(t, s.src.KubeconfigAdmin, "", "apply", "--server-side", "-k", filepath.Join(root, "artifacts", "source"))
	atOK(t, s.src.KubeconfigAdmin, "", "wait", "--for=condition=Established", "crd/commitrequests.reverser.dev", "--timeout=30s")
	kp = s.served(t, commitrequest.ReasonForbidden, 30*time.Second)
	assert.Contains(t, conditionMessage(kp.Status.Conditions, v1.ConditionCommitRequestsServed), "grant it")

	s.grantSaves(t, controlplane.UserReverserSource, false)
	kp = s.served(t, commitrequest.ReasonWatching, 30*time.Second)
	require.NotNil(t, kp.Status.CommitRequests)
	assert.Equal(t, []string{s.ns}, kp.Status.CommitRequests.Namespaces, "only the namespace the provider lends")
	assert.Regexp(t, `ReconcileAndDeleteFinished\s+True\s+\S+\s+Watching`, kubectlOK(t, admin, "", "get", "kubeprovider", s.kp, "-o", "wide"),
		"-o wide shows how saves are served")

	// Refused until the GitTarget grants the source namespace.
	atOK(t, s.src.KubeconfigAlice, "", "create", "configmap", "-n", s.ns, "one", "--from-literal=a=1")
	out, err := s.save(t, "Not yet")
	require.Error(t, err, out)
	assert.Contains(t, out, "NotAllowed")
	assert.Contains(t, out, "sourceNamespaces")
	kubectlOK(t, admin, "", "patch", "gittarget", "-n", s.ns, "site", "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"allowedCommitRequests":[{"sourceNamespaces":[%q]}]}}`, s.ns))
	eventually(t, 30*time.Second, "the grant reaches the controller", func() (bool, error) {
		gt := s.gitTarget()
		return len(gt.Spec.AllowedCommitRequests) == 1 && len(gt.Spec.AllowedCommitRequests[0].SourceNamespaces) == 1, nil
	})
	out, err = s.save(t, "Add one\n\nSaved on the source cluster.")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Committed: Saved as")
	log := s.authorsOf()
	require.Len(t, log, 1, "alice's one window: %v", log)
	assert.Equal(t, "alice <alice@users.reverser.invalid> | Add one", log[0], "authored from the source cluster's audit")
	assert.Contains(t, s.files(), s.cmPath("one"))

	// Two saves in a row, each Committed.
	for i, name := range []string{"two", "three"} {
		atOK(t, s.src.KubeconfigAlice, "", "create", "configmap", "-n", s.ns, name, "--from-literal=a=1")
		out, err := s.save(t, "Add "+name)
		require.NoError(t, err, "save %d: %s", i, out)
	}
	assert.Equal(t, []string{"alice <alice@users.reverser.invalid> | Add one", "alice <alice@users.reverser.invalid> | Add two",
		"alice <alice@users.reverser.invalid> | Add three"}, s.authorsOf())

	// Finished requests are stamped and deleted (--commit-request-ttl=15s).
	crs := s.sourceRequests(t)
	require.NotEmpty(t, crs)
	for _, cr := range crs {
		ready := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
		require.NotNil(t, ready, cr.Name)
		if ready.Reason == v1.ReasonCommitted {
			assert.Equal(t, "alice", cr.Status.Author.Username, "the claim recorded the author")
		}
	}
	eventually(t, 60*time.Second, "finished source requests deleted after their TTL", func() (bool, error) {
		return len(s.sourceRequests(t)) == 0, nil
	})

	// A control-cluster request for this GitTarget is refused, saying where
	// to save instead.
	out, err = kubectl(admin, commitRequestYAML(s.ns, "from-control", s.ns, "site"), "create", "-f", "-")
	require.Error(t, err)
	assert.Contains(t, out, "mirrors another cluster through KubeProvider "+s.kp+": save on that cluster")
	noPlaintext(t, s.mirrorFixture, s.credentials(t)...)
}

// credentials are the needles of the source's Secrets: its audit token and
// each kubeconfig's token or a line of its client key.
func (s *sourceFixture) credentials(t *testing.T) []string {
	t.Helper()
	needles := []string{s.src.AuditToken}
	for _, path := range []string{s.src.KubeconfigReverser, s.src.KubeconfigReverserRotated} {
		cfg, err := clientcmd.LoadFromFile(path)
		require.NoError(t, err)
		for _, a := range cfg.AuthInfos {
			if a.Token != "" {
				needles = append(needles, a.Token)
			}
			if len(a.ClientKeyData) > 0 {
				needles = append(needles, keyLine(string(a.ClientKeyData)))
			}
		}
	}
	return needles
}

// serving installs the CommitRequest CRD on the source, mirrors, grants
// the GitTarget's namespace saves from the source namespace of its name,
// and waits until the provider serves them.
func (s *sourceFixture) serving(t *testing.T) {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	atOK(t, s.src.KubeconfigAdmin, "", "apply", "--server-side", "-k", filepath.Join(root, "artifacts", "source"))
	atOK(t, s.src.KubeconfigAdmin, "", "wait", "--for=condition=Established", "crd/commitrequests.reverser.dev", "--timeout=30s")
	s.mirror(t)
	kubectlOK(t, admin, "", "patch", "gittarget", "-n", s.ns, "site", "--type=merge",
		"-p", fmt.Sprintf(`{"spec":{"allowedCommitRequests":[{"sourceNamespaces":[%q]}]}}`, s.ns))
	s.waitReady()
	s.grantSaves(t, controlplane.UserReverserSource, false)
	s.served(t, commitrequest.ReasonWatching, 30*time.Second)
}

// TestASourceClusterRecovers (D4): Forbidden when the credential loses its
// rights, Unreachable while the source kube-apiserver is down, and a
// rotated credential: each recovers on its own, and saves work after.
func TestASourceClusterRecovers(t *testing.T) {
	s := newSource(t, v1.CommitRequestsReconcile)
	s.serving(t)
	saves := 0
	// After an outage the mirror's own watch of the edit may still be in
	// its reconnect backoff, so a save then finds no window (NoWindow) and
	// the edit waits in alice's window: the next save commits it.
	saveWorks := func(name string) {
		t.Helper()
		atOK(t, s.src.KubeconfigAlice, "", "create", "configmap", "-n", s.ns, name, "--from-literal=a=1")
		eventually(t, 90*time.Second, "a save of "+name+" Committed", func() (bool, error) {
			out, err := s.save(t, "Add "+name)
			if err != nil {
				return false, fmt.Errorf("%w: %s", err, out)
			}
			return strings.Contains(out, "Committed: Saved as"), fmt.Errorf("%s", out)
		})
		saves++
		require.Len(t, s.authorsOf(), saves)
		assert.Contains(t, s.files(), s.cmPath(name))
	}
	saveWorks("first")

	// The credential loses its rights, then gets them back.
	s.grantSaves(t, controlplane.UserReverserSource, true)
	kp := s.served(t, commitrequest.ReasonForbidden, 45*time.Second)
	assert.Contains(t, conditionMessage(kp.Status.Conditions, v1.ConditionCommitRequestsServed), "commitrequests/status")
	s.grantSaves(t, controlplane.UserReverserSource, false)
	s.served(t, commitrequest.ReasonWatching, 45*time.Second)
	saveWorks("after-forbidden")

	// The source kube-apiserver stops, then starts again.
	require.NoError(t, s.src.Stop())
	kp = s.served(t, commitrequest.ReasonUnreachable, 45*time.Second)
	assert.Contains(t, conditionMessage(kp.Status.Conditions, v1.ConditionCommitRequestsServed), "check the kubeconfig's server address")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.src.Start(ctx))
	s.served(t, commitrequest.ReasonWatching, 90*time.Second)
	saveWorks("after-outage")

	// The kubeconfig Secret is rotated to another user after the old one
	// lost its rights: only the new credential can bring Watching back.
	s.grantSaves(t, controlplane.UserReverserSourceRotated, false)
	s.grantSaves(t, controlplane.UserReverserSource, true)
	s.served(t, commitrequest.ReasonForbidden, 45*time.Second)
	rotated, err := os.ReadFile(s.src.KubeconfigReverserRotated)
	require.NoError(t, err)
	secret := kubectlOK(t, admin, "", "create", "secret", "generic", "-n", controlplane.ReverserNamespace, s.kp+"-kubeconfig",
		"--from-literal=kubeconfig="+string(rotated), "--dry-run=client", "-o", "yaml")
	kubectlOK(t, admin, secret, "apply", "-f", "-")
	s.served(t, commitrequest.ReasonWatching, 45*time.Second)
	saveWorks("after-rotation")
	for _, cr := range s.sourceRequests(t) {
		assert.Empty(t, cr.Annotations[v1.DeleteAfterAnnotation], "Reconcile keeps finished requests")
	}
	noPlaintext(t, s.mirrorFixture, s.credentials(t)...)
}

// TestAForgedSourceRequestStatusSavesNobody (#27, finding 2): on the
// source cluster, whoever may write commitrequests/status (here its admin)
// makes a request while the controller is down and writes on it the
// status of one Reverser claimed for alice: the GitTarget's uid, author
// alice. Nothing of that status is believed: the request ends
// AuthorUnresolved, and no commit carries its message.
func TestAForgedSourceRequestStatusSavesNobody(t *testing.T) {
	s := newSource(t, v1.CommitRequestsReconcile)
	s.serving(t)
	uid := string(s.gitTarget().UID)

	require.NoError(t, controlplane.Kill(env, "reverser-controller"))
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = controlplane.Restart(env, "reverser-controller")
		}
	})
	atOK(t, s.src.KubeconfigAlice, "", "create", "configmap", "-n", s.ns, "alices", "--from-literal=a=1")
	forged := strings.Replace(commitRequestYAML(s.ns, "forged", s.ns, "site"), "Saved by the e2e suite", "mallory was here", 1)
	atOK(t, s.src.KubeconfigAdmin, forged, "create", "-f", "-")
	atOK(t, s.src.KubeconfigAdmin, "", "patch", "commitrequest", "-n", s.ns, "forged", "--subresource=status", "--type=merge", "-p",
		fmt.Sprintf(`{"status":{"gitTargetUID":%q,"author":{"username":"alice","groups":["system:authenticated"]},`+
			`"conditions":[{"type":"Ready","status":"Unknown","reason":"Saving","message":"claimed","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`, uid))
	require.NoError(t, controlplane.Restart(env, "reverser-controller"))
	restarted = true

	eventually(t, 90*time.Second, "the forged request ends AuthorUnresolved", func() (bool, error) {
		for _, cr := range s.sourceRequests(t) {
			if cr.Name != "forged" {
				continue
			}
			ready := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
			if ready != nil && ready.Status == metav1.ConditionFalse {
				if ready.Reason != v1.ReasonAuthorUnresolved {
					return false, fmt.Errorf("ended %s: %s", ready.Reason, ready.Message)
				}
				return true, nil
			}
			return false, fmt.Errorf("not finished: %+v", ready)
		}
		return false, fmt.Errorf("no request forged")
	})
	s.waitFile(s.cmPath("alices"), func(c string) bool { return c != "" }, "alice's edit mirrored as always")
	for _, line := range s.authorsOf() {
		assert.NotContains(t, line, "mallory was here")
	}
}

// TestARemoteProviderLendsNothingImplicitly (#27, finding 5): on a
// KubeProvider that reaches another cluster, a tenant of control namespace
// N reads nothing of the remote namespace N for its name alone: the rule
// is NotLent and nothing reaches the repository. Once the admin sets
// spec.lendSameNamespaces the ConfigMaps are mirrored, but the Secrets of
// that namespace still need a loan that says secrets: true.
func TestARemoteProviderLendsNothingImplicitly(t *testing.T) {
	s := newSource(t, v1.CommitRequestsIgnore)
	kubectlOK(t, admin, "", "patch", "kubeprovider", s.kp, "--type=merge", "-p", `{"spec":{"lendSameNamespaces":false}}`)
	s.mirror(t)
	atOK(t, s.src.KubeconfigAdmin, "", "create", "configmap", "-n", s.ns, "theirs", "--from-literal=a=1")
	msg := waitCondition(t, time.Minute, v1.ConditionReady, "False", "NotLent", "watchrule", "-n", s.ns, "rules")
	assert.Contains(t, msg, "spec.lendSameNamespaces")
	reconciled(t, s.ns, "site")
	_, reason, _ := condition(t, v1.ConditionReady, "watchrule", "-n", s.ns, "rules")
	assert.Equal(t, "NotLent", reason, "still not lent after a reconcile")
	assert.Empty(t, s.files(), "a file of the unlent namespace in Git")

	kubectlOK(t, admin, "", "patch", "kubeprovider", s.kp, "--type=merge", "-p", `{"spec":{"lendSameNamespaces":true}}`)
	waitCondition(t, time.Minute, v1.ConditionReady, "True", "Resolved", "watchrule", "-n", s.ns, "rules")
	s.waitFile(s.cmPath("theirs"), func(c string) bool { return c != "" }, "the lent namespace mirrored")

	kubectlOK(t, admin, harness.WatchRule(s.ns, "secrets", "site", "  rules:\n  - apiGroups: [\"\"]\n    resources: [secrets]"), "apply", "-f", "-")
	msg = waitCondition(t, time.Minute, v1.ConditionReady, "False", "NotLent", "watchrule", "-n", s.ns, "secrets")
	assert.Contains(t, msg, "secrets: true")
}
