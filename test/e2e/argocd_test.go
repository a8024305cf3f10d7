package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

// The specs of this file run Argo CD v2.14's own application controller and
// repo server (hack/build-argocd.sh, started by the plane) against the
// folder Reverser mirrors, in the same repository and branch.

// argoAutomated is the Application's automated sync before any claim:
// self-heal on, so Argo CD reverts every live edit it sees within seconds.
const argoAutomated = `{"prune":false,"selfHeal":true}`

// argoFixture is a GitTarget mirroring its namespace's ConfigMaps and
// naming ArgoCDClaim "apps", and an Argo CD Application syncing the same
// folder of the same branch automatically, with self-heal. alice's
// ConfigMap "app" (color blue) is in Git and synced by Argo CD. The claim
// is not made yet.
type argoFixture struct {
	*mirrorFixture
	app string
}

func argoMirror(t *testing.T) *argoFixture {
	t.Helper()
	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, targetSpec: "  applierRef: {kind: ArgoCDClaim, name: apps}"})
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "app", "--from-literal=color=blue")
	f.waitFile(f.cmPath("app"), func(s string) bool { return strings.Contains(s, "blue") }, "the app mirrored")
	a := &argoFixture{mirrorFixture: f, app: uniqueName("apps")}
	// The mirror's layout puts documents in <folder>/<namespace>/<resource>/:
	// Argo CD reads subfolders only with recurse.
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: %s, namespace: %s}
spec:
  project: default
  source:
    repoURL: %q
    path: %s
    targetRevision: main
    directory: {recurse: true}
  destination: {server: "https://kubernetes.default.svc", namespace: %s}
  syncPolicy:
    automated: %s
`, a.app, controlplane.ArgoCDNamespace, f.url, mirrorPath, f.ns, argoAutomated), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(admin, "", "delete", "application", "-n", controlplane.ArgoCDNamespace, a.app, "--wait=false")
	})
	eventually(t, 2*time.Minute, "Argo CD synced the head", func() (bool, error) {
		return a.field(".status.sync.status") == "Synced" && a.field(".status.sync.revision") == a.head(), nil
	})
	return a
}

// newArgoClock starts an Application with self-heal as an applierClock.
func newArgoClock(t *testing.T) *applierClock {
	t.Helper()
	ns := namespace(t, "clock")
	url := createRepo(t, "clock")
	work := filepath.Join(t.TempDir(), "work")
	git(t, filepath.Dir(work), "clone", "--quiet", url, work)
	head := pushApp(t, work, "blue")
	a := &argoFixture{mirrorFixture: &mirrorFixture{t: t, ns: ns}, app: uniqueName("clock")}
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: %s, namespace: %s}
spec:
  project: default
  source: {repoURL: %q, path: apps, targetRevision: main}
  destination: {server: "https://kubernetes.default.svc", namespace: %s}
  syncPolicy:
    automated: %s
`, a.app, controlplane.ArgoCDNamespace, url, ns, argoAutomated), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(admin, "", "delete", "application", "-n", controlplane.ArgoCDNamespace, a.app, "--wait=false")
	})
	eventually(t, 2*time.Minute, "the clock's Application synced", func() (bool, error) {
		return a.field(".status.sync.status") == "Synced" && a.field(".status.sync.revision") == head && a.color("app") == "blue", nil
	})
	return &applierClock{ns: ns}
}

// field is a JSONPath of the Application.
func (a *argoFixture) field(path string) string {
	out, _ := kubectl(admin, "", "get", "application", "-n", controlplane.ArgoCDNamespace, a.app, "-o", "jsonpath={"+path+"}")
	return strings.TrimSpace(out)
}

// syncs is how many syncs Argo CD has recorded in the Application's history.
func (a *argoFixture) syncs() int {
	var history []any
	if h := a.field(".status.history"); h != "" {
		require.NoError(a.t, json.Unmarshal([]byte(h), &history))
	}
	return len(history)
}

// claim makes ArgoCDClaim "apps" for the Application and waits until it
// holds it and its Startup sync is done. It returns the automated sync the
// Application had, as Argo CD keeps it (its own writes drop false fields).
func (a *argoFixture) claim(catchUpAfter string) (automated string) {
	t := a.t
	automated = a.field(".spec.syncPolicy.automated")
	kubectlOK(t, admin, harness.ArgoCDClaim(a.ns, "apps", "local", controlplane.ArgoCDNamespace, a.app, "  catchUpAfter: "+catchUpAfter),
		"apply", "-f", "-")
	eventually(t, 2*time.Minute, "the claim held, its Startup sync done", func() (bool, error) {
		reason, op := argoClaimState(t, a.ns, "apps")
		return reason == "Holding" && op != nil && op.Reason == v1.ConvergeStartup && op.FinishedAt != nil, nil
	})
	assert.Empty(t, a.field(".spec.syncPolicy.automated"), "automated sync off while held")
	return automated
}

// argoClaimState reads the ArgoCDClaim's Ready reason and its operation.
func argoClaimState(t *testing.T, ns, name string) (reason string, op *v1.ApplierOperation) {
	t.Helper()
	var claim v1.ArgoCDClaim
	getJSON(t, admin, &claim, "argocdclaim", "-n", ns, name)
	if c := meta.FindStatusCondition(claim.Status.Conditions, v1.ConditionReady); c != nil {
		reason = c.Reason
	}
	return reason, claim.Status.Operation
}

// editUnseenByGit has alice edit the app to color, an edit the long window
// keeps out of Git, and waits until Argo CD has compared it: the
// Application is OutOfSync, so its self-heal would act now if it could.
func (a *argoFixture) editUnseenByGit(color string) {
	kubectlOK(a.t, alice, "", "patch", "configmap", "-n", a.ns, "app", "--type=merge", "-p", fmt.Sprintf(`{"data":{"color":%q}}`, color))
	eventually(a.t, time.Minute, "Argo CD compared the edit", func() (bool, error) {
		return a.field(".status.sync.status") == "OutOfSync", nil
	})
}

// TestTheRealArgoCDIsHeldByAClaim (E1, E3 against Argo CD's application
// controller): before the claim, Argo CD's self-heal reverts a live edit
// within seconds. Once the ArgoCDClaim holds the Application, automated
// sync is off and the Startup sync ran; a live edit kept in a long window
// is compared (OutOfSync) and never reverted; a save with catchUp
// AfterPush is Applied=True with the revision Argo CD reports in
// status.sync.revision; a commit pushed by hand is synced (ForeignCommit);
// the release gives automated sync back exactly, and self-heal reverts
// again.
func TestTheRealArgoCDIsHeldByAClaim(t *testing.T) {
	a := argoMirror(t)
	a.longWindow()
	a.editUnseenByGit("red")
	eventually(t, time.Minute, "Argo CD's self-heal reverted the live edit", func() (bool, error) { return a.color("app") == "blue", nil })

	automated := a.claim("0s")
	require.Contains(t, automated, `"selfHeal":true`)
	held := a.head()
	synced := a.syncs()
	a.editUnseenByGit("green")
	newArgoClock(t).runs(t, 2, "the held Application reverted the live edit", func() bool { return a.color("app") != "green" })
	assert.Equal(t, synced, a.syncs(), "Argo CD synced while held")

	a.createRequest(alice, "green", "  gitTargetRef: {name: site}\n  message: Green\n  catchUp: AfterPush\n")
	cr, ready := a.waitOutcome("green")
	require.Equal(t, v1.ReasonCommitted, ready.Reason, ready.Message)
	eventually(t, time.Minute, "Applied=True", func() (bool, error) {
		cr = a.commitRequest("green")
		c := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied)
		return c != nil && c.Status == metav1.ConditionTrue, nil
	})
	assert.Equal(t, v1.ReasonApplied, meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied).Reason)
	git(t, a.bare, "merge-base", "--is-ancestor", cr.Status.Commit, applier.CommitOf(cr.Status.AppliedRevision))
	assert.Equal(t, applier.CommitOf(cr.Status.AppliedRevision), a.field(".status.sync.revision"), "the revision Argo CD reports synced")
	assert.Equal(t, "Synced", a.field(".status.sync.status"))
	assert.Equal(t, "green", a.color("app"))

	foreign := pushByHand(t, a.url, a.cmPath("app"), "Teal, by hand", func(s string) string { return strings.Replace(s, "green", "teal", 1) })
	eventually(t, time.Minute, "the foreign commit synced", func() (bool, error) {
		_, op := argoClaimState(t, a.ns, "apps")
		return a.color("app") == "teal" && op != nil && op.Reason == v1.ConvergeForeignCommit && op.FinishedAt != nil &&
			a.field(".status.sync.revision") == foreign, nil
	})
	a.noArgoCommitsSince(held)

	kubectlOK(t, admin, "", "patch", "gittarget", "-n", a.ns, "site", "--type=json", "-p", `[{"op":"remove","path":"/spec/applierRef"}]`)
	eventually(t, time.Minute, "the claim released", func() (bool, error) {
		reason, _ := argoClaimState(t, a.ns, "apps")
		return reason == "NotNamed", nil
	})
	assert.JSONEq(t, automated, a.field(".spec.syncPolicy.automated"), "automated sync given back as it was")
	a.editUnseenByGit("olive")
	eventually(t, time.Minute, "Argo CD's self-heal reverts again", func() (bool, error) { return a.color("app") == "teal", nil })
}

// TestABurstOfSavesCostsOneArgoCDSync (E2 against Argo CD): ten saves on a
// claim whose catchUpAfter is 60s (longer than the burst) are synced by one CatchUp: Argo CD
// records one sync, of the tip after the last save, and every request
// reports it applied.
func TestABurstOfSavesCostsOneArgoCDSync(t *testing.T) {
	a := argoMirror(t)
	a.claim("60s")
	a.longWindow()
	held, synced := a.head(), a.syncs()
	a.saveBurst(10)
	assert.Equal(t, synced, a.syncs(), "no sync before catchUpAfter")
	tip := a.head()
	eventually(t, 2*time.Minute, "every save Applied", func() (bool, error) {
		for i := range 10 {
			c := meta.FindStatusCondition(a.commitRequest(fmt.Sprintf("save-%d", i)).Status.Conditions, v1.ConditionApplied)
			if c == nil || c.Status != metav1.ConditionTrue {
				return false, nil
			}
		}
		return true, nil
	})
	for i := range 10 {
		assert.Equal(t, "main@sha1:"+tip, a.commitRequest(fmt.Sprintf("save-%d", i)).Status.AppliedRevision)
	}
	assert.Equal(t, synced+1, a.syncs(), "one sync settled all ten")
	assert.Equal(t, tip, a.field(".status.sync.revision"))
	_, op := argoClaimState(t, a.ns, "apps")
	require.NotNil(t, op)
	assert.Equal(t, v1.ConvergeCatchUp, op.Reason)
	a.noArgoCommitsSince(held)
}

// noArgoCommitsSince says no commit of the branch since from is authored
// by Argo CD: its writes while held were echoes. (Before the claim, a
// revert of Argo CD's self-heal is a change like any other, committed as
// Argo CD's.)
func (a *argoFixture) noArgoCommitsSince(from string) {
	a.t.Helper()
	assert.NotContains(a.t, git(a.t, a.bare, "log", "--format=%an <%ae>", from+"..main"), "argocd", "an echo of Argo CD's became a commit")
}
