package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/worker"
	"reverser.dev/reverser/test/controlplane"
)

// A long silence: only saves (and max age) close windows in these specs.
const saveWindow = "  commit: {window: {silence: 10m, maxAge: 30m}}"

// plugin runs `kubectl reverser` as a user, as people do.
func plugin(user string, args ...string) (string, error) {
	kubeconfig := map[string]string{admin: env.KubeconfigAdmin, alice: env.KubeconfigAlice, bob: env.KubeconfigBob}[user]
	root, err := filepath.Abs("../..")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(root, pluginPath), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (f *mirrorFixture) commitRequest(name string) v1.CommitRequest {
	var cr v1.CommitRequest
	getJSON(f.t, admin, &cr, "commitrequest", "-n", f.ns, name)
	return cr
}

func (f *mirrorFixture) waitOutcome(name string) (v1.CommitRequest, *metav1.Condition) {
	f.t.Helper()
	var cr v1.CommitRequest
	eventually(f.t, 60*time.Second, "CommitRequest "+name+" decided", func() (bool, error) {
		cr = f.commitRequest(name)
		c := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
		return c != nil && c.Status != metav1.ConditionUnknown, nil
	})
	return cr, meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
}

func (f *mirrorFixture) createRequest(user, name, spec string) {
	f.t.Helper()
	kubectlOK(f.t, user, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: %s, namespace: %s}
spec:
%s`, name, f.ns, spec), "create", "-f", "-")
}

// TestSaveWithAMessage: alice edits two ConfigMaps and saves; one commit,
// hers, with her message; bob's edit of the same seconds stays out.
func TestSaveWithAMessage(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow)
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "one", "--from-literal=a=1")
	kubectlOK(t, bob, "", "create", "configmap", "-n", f.ns, "bobs", "--from-literal=b=1")
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "two", "--from-literal=a=2")
	out, err := plugin(alice, "save", "site", "-n", f.ns, "-m", "Add one and two\n\nFor the e2e suite.")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Committed: Saved as")

	log := f.authorsOf()
	require.Len(t, log, 1, "only alice's window was saved: %v", log)
	assert.Equal(t, "alice <alice@users.reverser.invalid> | Add one and two", log[0])
	files := f.files()
	assert.Contains(t, files, f.cmPath("one"))
	assert.Contains(t, files, f.cmPath("two"))
	assert.NotContains(t, files, f.cmPath("bobs"), "bob's edit is not in alice's commit")

	crs := kubectlOK(t, alice, "", "get", "commitrequests", "-n", f.ns, "-o", "name")
	name := strings.TrimPrefix(strings.TrimSpace(crs), "commitrequest.reverser.dev/")
	cr := f.commitRequest(name)
	head, err := exec.Command("git", "-C", f.bare, "rev-parse", "main").Output()
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(head)), cr.Status.Commit, "status.commit is the remote's head")
	assert.Equal(t, "main", cr.Status.Branch)
	body, err := exec.Command("git", "-C", f.bare, "log", "-1", "--format=%B", "main").Output()
	require.NoError(t, err)
	assert.Contains(t, string(body), "For the e2e suite.")
	assert.Contains(t, string(body), worker.RequestTrailer+": "+string(cr.UID))
	assert.True(t, meta.IsStatusConditionTrue(cr.Status.Conditions, v1.ConditionApplied), "no applier claim: nothing to apply")

	// kubectl wait works on the outcome.
	kubectlOK(t, alice, "", "wait", "--for=condition=Ready", "commitrequest/"+name, "-n", f.ns, "--timeout=10s")
	// The push and the save are Events on the GitTarget, the outcome one on
	// the request (#29).
	described := waitDescribed(t, 10*time.Second, "gittarget", f.ns, "site", "Normal Pushed", "Normal Saved")
	assert.Contains(t, described, "Pushed commit "+cr.Status.Commit+" to branch main")
	waitDescribed(t, 10*time.Second, "commitrequest", f.ns, name, "Normal Committed")
}

func TestSaveOutcomes(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow)

	out, err := plugin(alice, "save", "site", "-n", f.ns, "-m", "Nothing here")
	require.NoError(t, err, "NoWindow is not a failure: %s", out)
	assert.Contains(t, out, "NoWindow")

	out, err = plugin(alice, "save", "site", "-n", f.ns, "-m", "Mark the release", "--empty")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Committed")
	assert.Equal(t, []string{"alice <alice@users.reverser.invalid> | Mark the release"}, f.authorsOf(), "an empty commit")

	// A second save of alice's while the first still waits, for her next
	// window: refused, saying to try again; the first saves her next edit.
	f.createRequest(alice, "first", "  gitTargetRef: {name: site}\n  message: First\n  attach: Next\n")
	eventually(t, 30*time.Second, "the first save handed to its worker", func() (bool, error) {
		c := meta.FindStatusCondition(f.commitRequest("first").Status.Conditions, v1.ConditionReady)
		return c != nil && c.Reason == v1.ReasonSaving, nil
	})
	f.createRequest(alice, "second", "  gitTargetRef: {name: site}\n  message: Second\n")
	_, second := f.waitOutcome("second")
	assert.Equal(t, v1.ReasonSaveInProgress, second.Reason, second.Message)
	assert.Equal(t, metav1.ConditionFalse, second.Status)
	assert.Contains(t, second.Message, "try again")
	waitDescribed(t, 10*time.Second, "gittarget", f.ns, "site", "Warning SaveFailed")
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "busy", "--from-literal=a=1")
	_, first := f.waitOutcome("first")
	assert.Equal(t, v1.ReasonCommitted, first.Reason, first.Message)
}

func TestSaveForAMissingGitTarget(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow)
	f.createRequest(alice, "ghost", "  gitTargetRef: {name: ghost}\n  message: Nowhere\n  window: {attachTimeout: 1s}\n")
	_, c := f.waitOutcome("ghost")
	assert.Equal(t, v1.ReasonGitTargetNotFound, c.Reason)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Contains(t, c.Message, "ghost")
	// The plugin's exit code says it was not saved (#29).
	out, err := plugin(alice, "save", "ghost", "-n", f.ns, "-m", "Nowhere", "--timeout", "2s")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, out)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, out, "no outcome before --timeout")

	// A request made just before its GitTarget exists is served.
	f.createRequest(alice, "early", "  gitTargetRef: {name: late}\n  message: Early bird\n  whenNothingToCommit: CommitEmpty\n"+
		"  window: {attachTimeout: 20s}\n")
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: GitTarget
metadata: {name: late, namespace: %s}
spec:
  kubeProviderRef: {name: local}
  gitProviderRef: {name: repo}
  branch: main
  path: late
`, f.ns), "apply", "--server-side", "-f", "-")
	cr, c := f.waitOutcome("early")
	assert.Equal(t, v1.ReasonCommitted, c.Reason, c.Message)
	assert.NotEmpty(t, cr.Status.GitTargetUID)
}

// TestSaveSurvivesAControllerCrash: the controller is killed once the save's
// commit is on the remote, whether or not it has written the outcome yet.
// The restarted controller finds the commit by its trailer and reports it:
// Committed, with that one commit, never a second.
func TestSaveSurvivesAControllerCrash(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow)
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "crash", "--from-literal=a=1")
	f.createRequest(alice, "crashing", "  gitTargetRef: {name: site}\n  message: Across a crash\n")
	uid := strings.TrimSpace(kubectlOK(t, admin, "", "get", "commitrequest", "-n", f.ns, "crashing", "-o", "jsonpath={.metadata.uid}"))
	saved := func() []string {
		out, _ := exec.Command("git", "-C", f.bare, "log", "--format=%H", "--grep", worker.RequestTrailer+": "+uid, "main").Output()
		return strings.Fields(string(out))
	}
	eventually(t, 60*time.Second, "the save's commit is on the remote", func() (bool, error) { return len(saved()) == 1, nil })
	require.NoError(t, controlplane.Kill(env, "reverser-controller"))
	require.NoError(t, controlplane.Restart(env, "reverser-controller"))
	cr, c := f.waitOutcome("crashing")
	require.Equal(t, v1.ReasonCommitted, c.Reason, c.Message)
	assert.Equal(t, []string{cr.Status.Commit}, saved(), "one commit for the request, the one reported")
}

// TestFinishedRequestsAreDeleted: a finished request is stamped with
// reverser.dev/delete-after and deleted once it has passed.
func TestFinishedRequestsAreDeleted(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow)
	f.createRequest(alice, "short-lived", "  gitTargetRef: {name: site}\n  message: Gone soon\n")
	f.waitOutcome("short-lived")
	eventually(t, 30*time.Second, "stamped", func() (bool, error) {
		_, ok := f.commitRequest("short-lived").Annotations[v1.DeleteAfterAnnotation]
		return ok, nil
	})
	eventually(t, 90*time.Second, "deleted after the TTL", func() (bool, error) {
		_, err := kubectl(admin, "", "get", "commitrequest", "-n", f.ns, "short-lived")
		return err != nil && strings.Contains(err.Error(), "NotFound"), nil
	})
}
