package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// TestSuspendResumeAndReconcileFromThePlugin (#29): `kubectl reverser
// suspend` returns once what the GitTarget received is committed and
// pushed, however young its window; while suspended nothing is mirrored;
// `reconcile` is answered at once; `resume` commits only what changed
// meanwhile, and `get` shows every object's health.
func TestSuspendResumeAndReconcileFromThePlugin(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow) // only a suspend closes a window here
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "one", "--from-literal=a=1")

	out, err := plugin(admin, "suspend", "site", "-n", f.ns)
	require.NoError(t, err, out)
	assert.Contains(t, out, "suspended: what it received before is committed and pushed")
	assert.Contains(t, f.files(), f.cmPath("one"), "the suspend committed the open window, ten minutes before its silence")
	assert.Equal(t, "alice <alice@users.reverser.invalid>", f.lastAuthor(f.cmPath("one")))
	waitCondition(t, 10*time.Second, v1.ConditionStreamsRunning, "False", v1.ReasonSuspended, "gittarget", "-n", f.ns, "site")
	commits := len(f.authorsOf())

	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "two", "--from-literal=a=2")
	out, err = plugin(admin, "reconcile", "site", "-n", f.ns)
	require.NoError(t, err, out)
	assert.Contains(t, out, "reconciled: Ready=True Suspended")
	assert.NotEmpty(t, f.gitTarget().Status.LastHandledReconcileAt)
	assert.NotContains(t, f.files(), f.cmPath("two"), "a suspended GitTarget watches nothing")
	assert.Len(t, f.authorsOf(), commits)

	eventually(t, 30*time.Second, "kubectl reverser get: a suspended GitTarget is no failure", func() (bool, error) {
		out, err = plugin(admin, "get", "-n", f.ns)
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, out)
		}
		return true, nil
	})
	assert.Regexp(t, `GitTarget\s+`+f.ns+`\s+site\s+True \(suspended\)\s+Suspended`, out)

	out, err = plugin(admin, "resume", "site", "-n", f.ns)
	require.NoError(t, err, out)
	assert.Contains(t, out, "resumed: Ready=True")
	f.waitFile(f.cmPath("two"), func(s string) bool { return s != "" }, "two, made while suspended, committed by the resume's snapshot")
	require.Len(t, f.authorsOf(), commits+1, "one commit: what changed meanwhile, nothing already in Git")
	changed, err := exec.Command("git", "-C", f.bare, "show", "--name-only", "--format=", "main").Output()
	require.NoError(t, err)
	assert.Equal(t, f.cmPath("two"), strings.TrimSpace(string(changed)))

	eventually(t, 30*time.Second, "every object Ready in kubectl reverser get", func() (bool, error) {
		out, err = plugin(admin, "get", "-n", f.ns)
		if err != nil {
			return false, fmt.Errorf("%w: %s", err, out)
		}
		return true, nil
	})
	assert.Regexp(t, `GitTarget\s+`+f.ns+`\s+site\s+True\s+Mirroring`, out)
	assert.Regexp(t, `WatchRule\s+`+f.ns+`\s+\S+\s+True`, out)
	waitDescribed(t, 10*time.Second, "gittarget", f.ns, "site", "Normal Suspended", "Normal Mirroring")
}
