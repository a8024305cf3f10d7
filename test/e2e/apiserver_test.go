package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

const (
	admin = controlplane.UserAdmin
	alice = controlplane.UserAlice
	bob   = controlplane.UserBob
)

func TestAPIGroupThroughAggregation(t *testing.T) {
	for _, user := range []string{admin, alice} {
		out := kubectlOK(t, user, "", "api-resources", "--api-group=reverser.dev", "-o", "name")
		assert.ElementsMatch(t, []string{
			"argocdclaims.reverser.dev", "clusterwatchrules.reverser.dev", "commitrequests.reverser.dev", "fluxclaims.reverser.dev",
			"gitproviders.reverser.dev", "gittargets.reverser.dev", "kubeproviders.reverser.dev", "watchrules.reverser.dev",
		}, strings.Fields(out), "discovery as %s", user)
	}
	out := kubectlOK(t, admin, "", "explain", "commitrequest.status.author")
	assert.Contains(t, out, "authenticated requester")
	out = kubectlOK(t, admin, "", "explain", "gittarget.spec.allowedCommitRequests")
	assert.Contains(t, out, "consumerNamespaces")
}

// TestAuthorIsTheRequester: the front proxy hands reverser-apiserver alice's
// identity, which is stamped on her CommitRequest whatever she claims.
func TestAuthorIsTheRequester(t *testing.T) {
	ns := namespace(t, "author")
	target := "site"
	kubectlOK(t, admin, gitTargetYAML(ns, target, ""), "apply", "--server-side", "-f", "-")
	forged := commitRequestYAML(ns, "by-alice", ns, target) + `status:
  author: {username: mallory, uid: forged, groups: ["system:masters"]}
`
	kubectlOK(t, alice, forged, "create", "-f", "-")

	var cr v1.CommitRequest
	getJSON(t, alice, &cr, "commitrequest", "-n", ns, "by-alice")
	require.NotNil(t, cr.Status.Author)
	assert.Equal(t, "alice", cr.Status.Author.Username)
	assert.Equal(t, "uid-alice", cr.Status.Author.UID)
	assert.ElementsMatch(t, []string{"devs", "system:authenticated"}, cr.Status.Author.Groups)

	out := kubectlOK(t, alice, "", "get", "commitrequests", "-n", ns)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, []string{"NAME", "TARGET", "AUTHOR", "READY", "REASON", "COMMIT", "AGE"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"by-alice", target, "alice"}, strings.Fields(lines[1])[:3])

	// An admin cannot rewrite the author either.
	_, err := kubectl(admin, "", "patch", "commitrequest", "-n", ns, "by-alice", "--subresource=status", "--type=merge",
		"-p", `{"status":{"author":{"username":"mallory"}}}`)
	require.NoError(t, err)
	getJSON(t, admin, &cr, "commitrequest", "-n", ns, "by-alice")
	assert.Equal(t, "alice", cr.Status.Author.Username)
}

// TestSaveNeedsPermission: bob is in devs but holds no save permission; a
// RoleBinding for one named GitTarget lets him save that one only.
func TestSaveNeedsPermission(t *testing.T) {
	ns := namespace(t, "save")
	for _, target := range []string{"granted", "other"} {
		kubectlOK(t, admin, gitTargetYAML(ns, target, ""), "apply", "--server-side", "-f", "-")
	}
	out, err := kubectl(bob, commitRequestYAML(ns, "bob-1", ns, "granted"), "create", "-f", "-")
	require.Error(t, err, "bob may not save")
	assert.Contains(t, out, "Forbidden")
	assert.Contains(t, out, `verb "save" on resource "gittargets"`)
	_, err = kubectl(admin, "", "get", "commitrequest", "-n", ns, "bob-1")
	require.Error(t, err, "a refused request is not stored")

	kubectlOK(t, admin, harness.UserRole(ns, "save-granted", "bob", `- apiGroups: [reverser.dev]
  resources: [gittargets]
  resourceNames: [granted]
  verbs: [save]`), "apply", "--server-side", "-f", "-")

	// RBAC changes reach the delegated authorizer after its cache expires.
	eventually(t, 30*time.Second, "bob may save granted once bound", func() (bool, error) {
		_, err := kubectl(bob, commitRequestYAML(ns, "bob-2", ns, "granted"), "create", "-f", "-")
		return err == nil, err
	})
	out, err = kubectl(bob, commitRequestYAML(ns, "bob-3", ns, "other"), "create", "-f", "-")
	require.Error(t, err, "the binding names one GitTarget only")
	assert.Contains(t, out, `verb "save"`)
}

// TestGrantsAdmitNamespaces: alice may save everywhere, but a GitTarget's
// grants decide which namespaces' requests it takes.
func TestGrantsAdmitNamespaces(t *testing.T) {
	targetNS := namespace(t, "grants")
	teamNS := namespace(t, "team", "reverser-e2e/team=b")
	kubectlOK(t, admin, gitTargetYAML(targetNS, "shared", ""), "apply", "--server-side", "-f", "-")

	out, err := kubectl(alice, commitRequestYAML(teamNS, "default", targetNS, "shared"), "create", "-f", "-")
	require.Error(t, err, "the default grant admits only the GitTarget's own namespace")
	assert.Contains(t, out, fmt.Sprintf("no grant in spec.allowedCommitRequests admits CommitRequests from namespace %q", teamNS))

	// A selector grant is checked against the namespace's labels in kube-apiserver.
	kubectlOK(t, admin, gitTargetYAML(targetNS, "shared", `  allowedCommitRequests:
  - consumerNamespaces:
      from: Selector
      selector: {matchLabels: {reverser-e2e/team: b}}
`), "apply", "--server-side", "-f", "-")
	kubectlOK(t, alice, commitRequestYAML(teamNS, "selected", targetNS, "shared"), "create", "-f", "-")

	kubectlOK(t, admin, gitTargetYAML(targetNS, "shared", `  allowedCommitRequests:
  - consumerNamespaces: {from: Names, names: [somewhere-else]}
`), "apply", "--server-side", "-f", "-")
	out, err = kubectl(alice, commitRequestYAML(teamNS, "not-named", targetNS, "shared"), "create", "-f", "-")
	require.Error(t, err)
	assert.Contains(t, out, "does not admit this request")
}

// TestRestartUnderLoad restarts reverser-apiserver while objects are being
// created through kube-apiserver: every acknowledged object survives and the
// APIService becomes Available again.
func TestRestartUnderLoad(t *testing.T) {
	ns := namespace(t, "restart")
	var created sync.Map
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("load-%d", i)
			if _, err := kubectl(admin, gitTargetYAML(ns, name, ""), "create", "-f", "-"); err == nil {
				created.Store(name, true)
				ok.Add(1)
			} else {
				failed.Add(1)
			}
		}
	}()
	eventually(t, 60*time.Second, "some objects exist before the restart", func() (bool, error) { return ok.Load() >= 5, nil })

	require.NoError(t, controlplane.Restart(env, "reverser-apiserver"))
	require.NoError(t, controlplane.WaitAPIServiceAvailable(context.Background(), env))
	before := ok.Load()
	eventually(t, 60*time.Second, "creates succeed after the restart", func() (bool, error) { return ok.Load() >= before+5, nil })
	close(stop)
	wg.Wait()
	t.Logf("created %d objects, %d creates failed during the restart", ok.Load(), failed.Load())

	out := kubectlOK(t, admin, "", "get", "gittargets", "-n", ns, "-o", "name")
	have := map[string]bool{}
	for _, l := range strings.Fields(out) {
		have[strings.TrimPrefix(l, "gittarget.reverser.dev/")] = true
	}
	created.Range(func(k, _ any) bool {
		assert.True(t, have[k.(string)], "acknowledged object %s lost across the restart", k)
		return true
	})
}
