package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

// The specs of this file run the real Flux against the folder Reverser
// mirrors, in the same repository and branch: what users of GitOps run.

// configMapsOnly is a rule (an item of a WatchRule's rules) selecting
// ConfigMaps.
const configMapsOnly = harness.ConfigMapRule

// claimedFixture is a GitTarget mirroring its namespace's ConfigMaps, a
// Flux Kustomization applying the same folder of the same branch on a 5s
// interval, and a FluxClaim the GitTarget names, held, its Startup
// converge done. alice's ConfigMap "app" (color blue) is in Git and on the
// cluster.
type claimedFixture struct {
	*mirrorFixture
	ks string
}

func claimedMirror(t *testing.T, catchUpAfter string) *claimedFixture {
	t.Helper()
	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, targetSpec: "  applierRef: {kind: FluxClaim, name: apps}"})
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "app", "--from-literal=color=blue")
	f.waitFile(f.cmPath("app"), func(s string) bool { return strings.Contains(s, "blue") }, "the app mirrored")
	c := &claimedFixture{mirrorFixture: f, ks: fluxSync(t, f.url, "./"+mirrorPath, f.ns, "5s")}
	waitApplied(t, c.ks, c.head())
	kubectlOK(t, admin, harness.FluxClaim(f.ns, "apps", "local", controlplane.FluxNamespace, c.ks, "  catchUpAfter: "+catchUpAfter),
		"apply", "-f", "-")
	eventually(t, 2*time.Minute, "the claim held, its Startup converge done and the head applied", func() (bool, error) {
		reason, op, _ := claimState(t, f.ns, "apps")
		return reason == "Holding" && op != nil && op.Reason == v1.ConvergeStartup && op.FinishedAt != nil &&
			op.Revision == "main@sha1:"+c.head() && c.applied() == c.head(), nil
	})
	eventually(t, time.Minute, "Flux saw the held interval", func() (bool, error) {
		return fluxField(t, "kustomization", c.ks, ".spec.interval") == applier.HeldInterval &&
			fluxField(t, "kustomization", c.ks, ".status.observedGeneration") == fluxField(t, "kustomization", c.ks, ".metadata.generation"), nil
	})
	return c
}

// longWindow keeps live edits in the GitTarget site's commit window until
// a save, from the time it returns.
func (f *mirrorFixture) longWindow() {
	kubectlOK(f.t, admin, "", "patch", "gittarget", "-n", f.ns, "site", "--type=merge", "-p",
		`{"spec":{"commit":{"window":{"silence":"10m","maxAge":"30m"}}}}`)
	reconciled(f.t, f.ns, "site")
}

// head is the branch's tip.
func (f *mirrorFixture) head() string { return git(f.t, f.bare, "rev-parse", "main") }

// color is the live ConfigMap name's data.color.
func (f *mirrorFixture) color(name string) string {
	out, _ := kubectl(admin, "", "get", "configmap", "-n", f.ns, name, "-o", "jsonpath={.data.color}")
	return strings.TrimSpace(out)
}

func (c *claimedFixture) applied() string {
	return applier.CommitOf(fluxField(c.t, "kustomization", c.ks, ".status.lastAppliedRevision"))
}

// noFluxCommits says no commit of the branch is authored by Flux: its
// writes were echoes.
func (c *claimedFixture) noFluxCommits() {
	c.t.Helper()
	out := git(c.t, c.bare, "log", "--format=%an <%ae>", "main")
	assert.NotContains(c.t, out, "kustomize-controller", "an echo of Flux's became a commit")
}

// pushByHand commits, as somebody else, the file p of the repository at url
// with edit applied to its content ("" when absent), and returns the commit.
func pushByHand(t *testing.T, url, p, message string, edit func(string) string) string {
	t.Helper()
	work := filepath.Join(t.TempDir(), "work")
	git(t, filepath.Dir(work), "clone", "--quiet", url, work)
	content, _ := os.ReadFile(filepath.Join(work, p))
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(work, p)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(work, p), []byte(edit(string(content))), 0o644))
	git(t, work, "add", "-A")
	git(t, work, "commit", "--quiet", "-m", message)
	git(t, work, "push", "--quiet", "origin", "HEAD:main")
	return git(t, work, "rev-parse", "HEAD")
}

// editDuringApply pauses kustomize-controller, pushes a foreign commit,
// waits until the worker's ForeignCommit converge has asked the
// Kustomization to apply, and has alice edit the app to orange meanwhile,
// until her edit is in Git. Flux stays paused; the caller resumes it.
func (c *claimedFixture) editDuringApply() {
	t := c.t
	before := fluxField(t, "kustomization", c.ks, `.metadata.annotations.reconcile\.fluxcd\.io/requestedAt`)
	require.NoError(t, controlplane.Signal(env, "flux-kustomize-controller", syscall.SIGSTOP))
	t.Cleanup(func() { _ = controlplane.Signal(env, "flux-kustomize-controller", syscall.SIGCONT) })
	pushByHand(t, c.url, filepath.Join(mirrorPath, "README.md"), "A README, by hand", func(string) string { return "Applied by Flux.\n" })
	eventually(t, time.Minute, "the Kustomization asked to apply the foreign commit", func() (bool, error) {
		at := fluxField(t, "kustomization", c.ks, `.metadata.annotations.reconcile\.fluxcd\.io/requestedAt`)
		return at != "" && at != before, nil
	})
	kubectlOK(t, alice, "", "patch", "configmap", "-n", c.ns, "app", "--type=merge", "-p", `{"data":{"color":"orange"}}`)
	c.waitFile(c.cmPath("app"), func(s string) bool { return strings.Contains(s, "orange") }, "alice's edit in Git")
}

// TestALiveEditSurvivesFluxAndASaveAppliesIt (E1, E3): with the claim held,
// Flux never reverts alice's live edit, not after any number of its
// intervals; her save with catchUp AfterPush is Committed and Applied=True
// with a revision that holds the commit.
func TestALiveEditSurvivesFluxAndASaveAppliesIt(t *testing.T) {
	c := claimedMirror(t, "0s")
	clock := newFluxClock(t, "5s") // the claimed Kustomization's interval before the claim
	// The edit stays in an open window until the save: Git lacks it, so
	// Flux, were the claim not holding it, would put blue back on its next
	// run.
	c.longWindow()
	kubectlOK(t, alice, "", "patch", "configmap", "-n", c.ns, "app", "--type=merge", "-p", `{"data":{"color":"red"}}`)
	clock.runs(t, 2, "Flux reverted the live edit", func() bool { return c.color("app") != "red" })
	assert.Contains(t, c.file(c.cmPath("app")), "blue", "Git held the edit: the check above proves nothing")

	kubectlOK(t, alice, "", "patch", "configmap", "-n", c.ns, "app", "--type=merge", "-p", `{"data":{"color":"green"}}`)
	c.createRequest(alice, "green", "  gitTargetRef: {name: site}\n  message: Green\n  catchUp: AfterPush\n")
	cr, ready := c.waitOutcome("green")
	require.Equal(t, v1.ReasonCommitted, ready.Reason, ready.Message)
	eventually(t, time.Minute, "Applied=True", func() (bool, error) {
		cr = c.commitRequest("green")
		a := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied)
		return a != nil && a.Status == metav1.ConditionTrue, nil
	})
	a := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied)
	assert.Equal(t, v1.ReasonApplied, a.Reason, a.Message)
	git(t, c.bare, "merge-base", "--is-ancestor", cr.Status.Commit, applier.CommitOf(cr.Status.AppliedRevision))
	assert.Equal(t, applier.CommitOf(cr.Status.AppliedRevision), c.applied(), "what Flux reports applied")
	assert.Equal(t, v1.ReasonCommitted, meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady).Reason, "Ready is unchanged")
	assert.Equal(t, "green", c.color("app"))
	eventually(t, 30*time.Second, "the claim reports the CatchUp", func() (bool, error) {
		_, op, _ := claimState(t, c.ns, "apps")
		return op != nil && op.Reason == v1.ConvergeCatchUp && op.FinishedAt != nil, nil
	})

	// The same from the plugin, which waits for the apply (#29).
	kubectlOK(t, alice, "", "patch", "configmap", "-n", c.ns, "app", "--type=merge", "-p", `{"data":{"color":"yellow"}}`)
	out, err := plugin(alice, "save", "site", "-n", c.ns, "-m", "Yellow", "--catch-up", "AfterPush", "--wait-applied")
	require.NoError(t, err, out)
	assert.Contains(t, out, "Committed: Saved as")
	assert.Contains(t, out, "Applied Applied:")
	assert.Equal(t, "yellow", c.color("app"))

	// A suspended claim gives Flux its schedule back, and takes it again
	// when resumed (#29).
	kubectlOK(t, admin, "", "patch", "fluxclaim", "-n", c.ns, "apps", "--type=merge", "-p", `{"spec":{"suspend":true}}`)
	waitCondition(t, 30*time.Second, "Held", "False", v1.ReasonSuspended, "fluxclaim", "-n", c.ns, "apps")
	assert.NotEqual(t, applier.HeldInterval, fluxField(t, "kustomization", c.ks, ".spec.interval"))
	waitDescribed(t, 10*time.Second, "fluxclaim", c.ns, "apps", "Normal Released")
	kubectlOK(t, admin, "", "patch", "fluxclaim", "-n", c.ns, "apps", "--type=merge", "-p", `{"spec":{"suspend":null}}`)
	waitCondition(t, 30*time.Second, "Held", "True", "Holding", "fluxclaim", "-n", c.ns, "apps")
	assert.Equal(t, applier.HeldInterval, fluxField(t, "kustomization", c.ks, ".spec.interval"))
	c.noFluxCommits()
}

// TestAForeignCommitIsAppliedByFlux (E1): a commit somebody pushes into the
// folder is applied by a ForeignCommit converge, neither reverted in Git nor
// left unapplied.
func TestAForeignCommitIsAppliedByFlux(t *testing.T) {
	c := claimedMirror(t, "0s")
	foreign := pushByHand(t, c.url, c.cmPath("app"), "Purple, by hand", func(s string) string { return strings.Replace(s, "blue", "purple", 1) })

	// Flux's first apply after a fetch may report the older revision (its
	// cache of the GitRepository lags); the worker asks again until Flux
	// reports the foreign commit applied.
	eventually(t, time.Minute, "Flux applied the foreign commit", func() (bool, error) {
		_, op, _ := claimState(t, c.ns, "apps")
		return c.color("app") == "purple" && c.applied() == foreign && op != nil && op.FinishedAt != nil &&
			op.Revision == "main@sha1:"+foreign, nil
	})
	_, op, _ := claimState(t, c.ns, "apps")
	assert.Equal(t, v1.ConvergeForeignCommit, op.Reason)
	c.barrier()
	assert.Empty(t, git(t, c.bare, "log", "--format=%H %s", foreign+"..main", "--", c.cmPath("app")), "the foreign commit was reverted")
	assert.Contains(t, c.file(c.cmPath("app")), "purple")
	c.noFluxCommits()
}

// TestABurstOfSavesCostsOneApply (E2): ten saves on a claim whose
// catchUpAfter is 40s are applied by one CatchUp converge: every request
// reports the same applied revision, the tip after the last save.
func TestABurstOfSavesCostsOneApply(t *testing.T) {
	c := claimedMirror(t, "40s")
	kubectlOK(t, admin, "", "patch", "gittarget", "-n", c.ns, "site", "--type=merge", "-p",
		`{"spec":{"commit":{"window":{"silence":"10m","maxAge":"30m"}}}}`)
	start := c.applied()
	c.saveBurst(10)
	assert.Equal(t, start, c.applied(), "no apply before catchUpAfter")
	tip := c.head()
	revisions := map[string]bool{}
	eventually(t, 2*time.Minute, "every save Applied", func() (bool, error) {
		clear(revisions)
		for i := range 10 {
			cr := c.commitRequest(fmt.Sprintf("save-%d", i))
			a := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied)
			if a == nil || a.Status != metav1.ConditionTrue {
				return false, nil
			}
			revisions[cr.Status.AppliedRevision] = true
		}
		return true, nil
	})
	assert.Equal(t, map[string]bool{"main@sha1:" + tip: true}, revisions, "one apply, of the tip, settled all ten")
	eventually(t, 30*time.Second, "the claim reports the CatchUp of the tip", func() (bool, error) {
		_, op, _ := claimState(t, c.ns, "apps")
		return op != nil && op.Reason == v1.ConvergeCatchUp && op.Revision == "main@sha1:"+tip && op.FinishedAt != nil, nil
	})
}

// saveBurst has alice edit the app and save it, n times, each save
// Committed ("save-0" ...) before the next edit.
func (f *mirrorFixture) saveBurst(n int) {
	t := f.t
	t.Helper()
	for i := range n {
		kubectlOK(t, alice, "", "patch", "configmap", "-n", f.ns, "app", "--type=merge", "-p", fmt.Sprintf(`{"data":{"n":"%d"}}`, i))
		name := fmt.Sprintf("save-%d", i)
		f.createRequest(alice, name, "  gitTargetRef: {name: site}\n  message: Save "+name+"\n")
		_, ready := f.waitOutcome(name)
		require.Equal(t, v1.ReasonCommitted, ready.Reason, ready.Message)
	}
}

// TestAnEditFluxRevertsDuringAnApplyIsRepaired (E4): kustomize-controller
// is paused once a ForeignCommit converge has asked it to apply; alice edits
// meanwhile and her edit reaches Git; resumed, Flux applies the older
// revision and reverts her. That write is an echo: Git keeps her edit, a
// Repair converge puts it back on the cluster, the barrier is met, and no
// write of Flux's becomes a commit.
func TestAnEditFluxRevertsDuringAnApplyIsRepaired(t *testing.T) {
	c := claimedMirror(t, "0s")
	collisions := metric(t, "reverser_apply_window_collisions_total")
	met := metric(t, `reverser_apply_window_barriers_total{outcome="met"}`)
	c.editDuringApply()
	require.NoError(t, controlplane.Signal(env, "flux-kustomize-controller", syscall.SIGCONT))

	eventually(t, 2*time.Minute, "a Repair put alice's edit back", func() (bool, error) {
		_, op, _ := claimState(t, c.ns, "apps")
		return op != nil && op.Reason == v1.ConvergeRepair && op.FinishedAt != nil && c.color("app") == "orange", nil
	})
	assert.Greater(t, metric(t, "reverser_apply_window_collisions_total"), collisions, "Flux's revert was withheld")
	eventually(t, 30*time.Second, "the barrier met", func() (bool, error) {
		return metric(t, `reverser_apply_window_barriers_total{outcome="met"}`) > met, nil
	})
	assert.Contains(t, c.file(c.cmPath("app")), "orange", "Git kept the edit")
	c.noFluxCommits()
	out, err := exec.Command("git", "-C", c.bare, "log", "--format=%an|%s", "main").Output()
	require.NoError(t, err)
	assert.Contains(t, string(out), "alice|", "alice authored her edit")
}

// TestAControllerKilledMidApplyLosesNothing (the mirror invariant across a
// restart): the controller is killed while Flux, paused, holds a converge;
// resumed, Flux reverts alice's saved edit while nobody watches. The
// restarted controller keeps her edit in Git (Flux wrote the object last,
// by its managedFields) and its Startup converge puts it back: Git and the
// cluster agree, her edit committed once, nothing by Flux.
func TestAControllerKilledMidApplyLosesNothing(t *testing.T) {
	c := claimedMirror(t, "0s")
	c.editDuringApply()

	require.NoError(t, controlplane.Kill(env, "reverser-controller"))
	require.NoError(t, controlplane.Signal(env, "flux-kustomize-controller", syscall.SIGCONT))
	eventually(t, time.Minute, "Flux reverted the edit while nobody watched", func() (bool, error) { return c.color("app") == "blue", nil })
	require.NoError(t, controlplane.Restart(env, "reverser-controller"))

	eventually(t, 2*time.Minute, "the edit back on the cluster", func() (bool, error) { return c.color("app") == "orange", nil })
	c.barrier()
	assert.Equal(t, "orange", c.color("app"), "the cluster lost the edit")
	assert.Contains(t, c.file(c.cmPath("app")), "orange", "Git lost the edit")
	c.noFluxCommits()
	out, err := exec.Command("git", "-C", c.bare, "log", "--format=%an", "-G", "orange", "main", "--", c.cmPath("app")).Output()
	require.NoError(t, err)
	assert.Equal(t, "alice", strings.TrimSpace(string(out)), "her edit committed once, by her")
}

// TestACatchUpYieldsToALiveEditBeforeFluxApplies (E2): a CatchUp is sent
// (the GitRepository asked to fetch) while source-controller is paused;
// alice edits meanwhile. Once the fetch is handled the converge yields
// before Flux applies: the Kustomization is never asked for it, her edit is
// never reverted, and a fresh catchUpAfter later Flux applies the tip with
// her edit.
func TestACatchUpYieldsToALiveEditBeforeFluxApplies(t *testing.T) {
	c := claimedMirror(t, "5s")
	abandoned := metric(t, `reverser_converges_total{outcome="abandoned",reason="CatchUp"}`)
	requested := func(kind string) string {
		return fluxField(t, kind, c.ks, `.metadata.annotations.reconcile\.fluxcd\.io/requestedAt`)
	}
	beforeRepo, beforeKs := requested("gitrepository"), requested("kustomization")
	require.NoError(t, controlplane.Signal(env, "flux-source-controller", syscall.SIGSTOP))
	t.Cleanup(func() { _ = controlplane.Signal(env, "flux-source-controller", syscall.SIGCONT) })
	kubectlOK(t, alice, "", "patch", "configmap", "-n", c.ns, "app", "--type=merge", "-p", `{"data":{"color":"red"}}`)
	c.waitFile(c.cmPath("app"), func(s string) bool { return strings.Contains(s, "red") }, "the first edit in Git")
	eventually(t, time.Minute, "the CatchUp asked the GitRepository to fetch", func() (bool, error) {
		at := requested("gitrepository")
		return at != "" && at != beforeRepo, nil
	})
	kubectlOK(t, alice, "", "patch", "configmap", "-n", c.ns, "app", "--type=merge", "-p", `{"data":{"color":"orange"}}`)
	c.waitFile(c.cmPath("app"), func(s string) bool { return strings.Contains(s, "orange") }, "the edit made after the send in Git")
	require.NoError(t, controlplane.Signal(env, "flux-source-controller", syscall.SIGCONT))

	eventually(t, time.Minute, "the CatchUp yielded", func() (bool, error) {
		return metric(t, `reverser_converges_total{outcome="abandoned",reason="CatchUp"}`) > abandoned, nil
	})
	assert.Equal(t, beforeKs, requested("kustomization"), "the Kustomization was never asked for the yielded converge")
	eventually(t, time.Minute, "a fresh CatchUp applied the tip", func() (bool, error) { return c.applied() == c.head(), nil })
	assert.Equal(t, "orange", c.color("app"), "never reverted")
	c.noFluxCommits()
}

// TestAFolderFluxHasNeverAppliedIsAdoptedWhole (R3): a GitTarget, its
// rules, a Flux GitRepository and Kustomization and the FluxClaim they
// share are applied at once over a folder holding two ConfigMaps that
// Flux has never applied, their file leaving the namespace to Flux's
// targetNamespace. Nothing is deleted from Git, the cluster ends with the
// folder's objects, and the GitTarget is Ready only once Git equals the
// cluster: before, it says NotApplied and names what the cluster lacks.
func TestAFolderFluxHasNeverAppliedIsAdoptedWhole(t *testing.T) {
	const settings = `# the app's settings, applied by Flux
apiVersion: v1
kind: ConfigMap
metadata:
  name: colors
data:
  primary: blue
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: sizes
data:
  large: "10"
`
	file := mirrorPath + "/settings.yaml"
	var seeded string
	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, targetSpec: "  applierRef: {kind: FluxClaim, name: apps}",
		seed: func(f *mirrorFixture) {
			seeded = pushByHand(t, f.url, file, "The app's settings", func(string) string { return settings })
		}})
	ks := uniqueName("apps")
	kubectlOK(t, admin, harness.Docs(harness.FluxSync(controlplane.FluxNamespace, ks, f.url, "./"+mirrorPath, f.ns, "1m", ""),
		harness.FluxClaim(f.ns, "apps", "local", controlplane.FluxNamespace, ks, "")), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(admin, "", "delete", "-n", f.ns, "fluxclaim", "apps", "--wait=false")
		_, _ = kubectl(admin, "", "delete", "-n", controlplane.FluxNamespace, "kustomization,gitrepository", ks, "--wait=false")
	})

	sawNotApplied := ""
	eventually(t, 3*time.Minute, "the GitTarget Ready", func() (bool, error) {
		gt := f.gitTarget()
		ready := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionReady)
		if ready == nil || ready.Status != metav1.ConditionTrue {
			if ready != nil && ready.Reason == v1.ReasonNotApplied {
				sawNotApplied = ready.Message
			}
			return false, fmt.Errorf("Ready: %+v", ready)
		}
		// Ready: the cluster holds what Git holds, now and from then on.
		names := kubectlOK(t, admin, "", "get", "configmaps", "-n", f.ns, "-o", "jsonpath={.items[*].metadata.name}")
		assert.Contains(t, names, "colors", "Ready while the cluster lacks ConfigMap colors")
		assert.Contains(t, names, "sizes", "Ready while the cluster lacks ConfigMap sizes")
		return true, nil
	})
	t.Logf("before Ready, the GitTarget said: %s", sawNotApplied)
	if sawNotApplied != "" {
		assert.Contains(t, sawNotApplied, "ConfigMap/colors", "NotApplied names what the cluster lacks")
	}
	assert.Equal(t, "blue", kubectlOK(t, admin, "", "get", "configmap", "-n", f.ns, "colors", "-o", "jsonpath={.data.primary}"))
	assert.Equal(t, settings, git(t, f.bare, "show", "main:"+file)+"\n", "the folder's file as its author wrote it")
	assert.Empty(t, git(t, f.bare, "log", "--diff-filter=D", "--name-only", "--format=", seeded+"..main"), "nothing deleted from Git")
	assert.Equal(t, "True", kubectlOK(t, admin, "", "get", "fluxclaim", "-n", f.ns, "apps", "-o", `jsonpath={.status.conditions[?(@.type=="Held")].status}`))
}
