package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

// fluxSync creates, in flux-system, a GitRepository on url's branch main and
// a Kustomization applying its folder path into namespace ns, both at
// interval, and returns the Kustomization's name.
func fluxSync(t *testing.T, url, path, ns, interval string) string {
	t.Helper()
	return fluxSyncWith(t, url, path, ns, interval, "")
}

// fluxSyncWith is fluxSync with more of the Kustomization's spec.
func fluxSyncWith(t *testing.T, url, path, ns, interval, kustomizationSpec string) string {
	t.Helper()
	name := uniqueName("apps")
	kubectlOK(t, controlplane.UserAdmin, harness.FluxSync(controlplane.FluxNamespace, name, url, path, ns, interval, kustomizationSpec), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(controlplane.UserAdmin, "", "delete", "-n", controlplane.FluxNamespace, "kustomization,gitrepository", name, "--wait=false")
	})
	return name
}

// TestFluxAppliesFromTheLocalGitServer: the control plane runs the real
// Flux controllers, which fetch from the local Git server and apply what
// they find, as the applier tests need.
func TestFluxAppliesFromTheLocalGitServer(t *testing.T) {
	ns, _, _, _ := fluxApp(t, "flux", "24h")
	out := kubectlOK(t, controlplane.UserAdmin, "", "get", "configmap", "-n", ns, "app", "-o", "jsonpath={.data.color}")
	require.Equal(t, "blue", out)
	managers := kubectlOK(t, controlplane.UserAdmin, "", "get", "configmap", "-n", ns, "app", "--show-managed-fields",
		"-o", "jsonpath={.metadata.managedFields[*].manager}")
	require.Contains(t, managers, "kustomize-controller", "applied by Flux, as Flux")
}

// fluxApp sets up what the Flux tests start from: a namespace, a repository
// whose apps/app.yaml is a ConfigMap "app" of color blue, cloned in work,
// and a Kustomization at interval that has applied it into the namespace.
func fluxApp(t *testing.T, prefix, interval string) (ns, work, kustomization, first string) {
	t.Helper()
	ns = namespace(t, prefix)
	url := createRepo(t, prefix)
	work = filepath.Join(t.TempDir(), "work")
	git(t, filepath.Dir(work), "clone", "--quiet", url, work)
	first = pushApp(t, work, "blue")
	kustomization = fluxSync(t, url, "./apps", ns, interval)
	waitApplied(t, kustomization, first)
	return ns, work, kustomization, first
}

// pushApp commits apps/app.yaml with color to the repository cloned in work
// and returns the commit.
func pushApp(t *testing.T, work, color string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(work, "apps"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(work, "apps", "app.yaml"), []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data: {color: `+color+`}
`), 0o644))
	git(t, work, "add", "-A")
	git(t, work, "commit", "--quiet", "-m", "The app is "+color)
	git(t, work, "push", "--quiet", "origin", "HEAD:main")
	return git(t, work, "rev-parse", "HEAD")
}

// waitApplied waits until the Kustomization name reports sha applied.
func waitApplied(t *testing.T, name, sha string) {
	t.Helper()
	eventually(t, 2*time.Minute, "Flux applied "+sha, func() (bool, error) {
		return strings.HasSuffix(fluxField(t, "kustomization", name, ".status.lastAppliedRevision"), sha), nil
	})
}

func fluxField(t *testing.T, resource, name, path string) string {
	t.Helper()
	out, _ := kubectl(controlplane.UserAdmin, "", "get", resource, "-n", controlplane.FluxNamespace, name, "-o", "jsonpath={"+path+"}")
	return strings.TrimSpace(out)
}

// TestFluxScheduleTakenOverAndConverged (E1) drives the real Flux with
// pkg/applier: once its schedule is held, Flux neither reverts a live edit
// nor fetches a new commit on its own 5s interval; a converge fetches and
// applies the new commit and reports its revision; the release gives the
// 5s interval back.
func TestFluxScheduleTakenOverAndConverged(t *testing.T) {
	ctx := context.Background()
	ns, work, name, _ := fluxApp(t, "fluxclaim", "5s")
	clock := newFluxClock(t, "5s")

	cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAdmin)
	require.NoError(t, err)
	flux := &applier.Flux{Client: dynamic.NewForConfigOrDie(cfg)}
	ks := applier.Ref{Namespace: controlplane.FluxNamespace, Name: name}
	require.NoError(t, flux.TakeOver(ctx, ks, "e2e/claim", nil))
	t.Cleanup(func() { _ = flux.Release(ctx, ks, "e2e/claim") })
	// Changing spec.interval makes both reconcile once more; after that
	// only Reverser's requests do.
	eventually(t, time.Minute, "Flux saw the held intervals", func() (bool, error) {
		return fluxField(t, "kustomization", name, ".status.observedGeneration") == fluxField(t, "kustomization", name, ".metadata.generation") &&
			fluxField(t, "gitrepository", name, ".status.observedGeneration") == fluxField(t, "gitrepository", name, ".metadata.generation"), nil
	})

	kubectlOK(t, controlplane.UserAdmin, "", "patch", "configmap", "-n", ns, "app", "--type=merge", "-p", `{"data":{"color":"red"}}`)
	second := pushApp(t, work, "green")
	clock.runs(t, 2, "Flux reverted the live edit or fetched on its own schedule", func() bool {
		color := kubectlOK(t, controlplane.UserAdmin, "", "get", "configmap", "-n", ns, "app", "-o", "jsonpath={.data.color}")
		return color != "red" || strings.HasSuffix(fluxField(t, "gitrepository", name, ".status.artifact.revision"), second)
	})

	c, err := flux.Request(ctx, ks, time.Now().UTC().Format(time.RFC3339Nano))
	require.NoError(t, err)
	var p applier.Progress
	eventually(t, 2*time.Minute, "the converge done", func() (bool, error) {
		p, err = flux.Follow(ctx, ks, c, nil)
		return p.Done, err
	})
	assert.Empty(t, p.Failure)
	assert.Equal(t, "main@sha1:"+second, p.Applied)
	assert.Equal(t, "green", kubectlOK(t, controlplane.UserAdmin, "", "get", "configmap", "-n", ns, "app", "-o", "jsonpath={.data.color}"))

	require.NoError(t, flux.Release(ctx, ks, "e2e/claim"))
	assert.Equal(t, "5s", fluxField(t, "kustomization", name, ".spec.interval"))
	assert.Equal(t, "5s", fluxField(t, "gitrepository", name, ".spec.interval"))
}

// claimState reads the FluxClaim's Ready reason and the operation it
// reports.
func claimState(t *testing.T, ns, name string) (reason string, op *v1.ApplierOperation, finalizers []string) {
	t.Helper()
	var claim v1.FluxClaim
	out, err := kubectl(admin, "", "get", "fluxclaim", "-n", ns, name, "-o", "json")
	if err != nil || json.Unmarshal([]byte(out), &claim) != nil {
		return "", nil, nil
	}
	if c := meta.FindStatusCondition(claim.Status.Conditions, v1.ConditionReady); c != nil {
		reason = c.Reason
	}
	return reason, claim.Status.Operation, claim.Finalizers
}

// TestAFluxClaimHoldsTheScheduleWhileAGitTargetNamesIt (E1): a FluxClaim
// that a GitTarget names holds the Kustomization's and its GitRepository's
// schedules and runs the Startup converge to the branch's head; it gives
// the schedules back once no GitTarget names it; deleting it afterwards
// leaves nothing behind.
func TestAFluxClaimHoldsTheScheduleWhileAGitTargetNamesIt(t *testing.T) {
	c := claimedMirror(t, "0s")
	assert.Equal(t, applier.HeldInterval, fluxField(t, "gitrepository", c.ks, ".spec.interval"))
	_, op, finalizers := claimState(t, c.ns, "apps")
	assert.Equal(t, "main@sha1:"+c.head(), op.Revision, "the Startup converge asked for the head")
	assert.Equal(t, c.head(), c.applied())
	assert.Contains(t, finalizers, "reverser.dev/release-applier")
	var claim v1.FluxClaim
	getJSON(t, admin, &claim, "fluxclaim", "-n", c.ns, "apps")
	assert.Equal(t, "main@sha1:"+c.head(), claim.Status.LastAppliedRevision)
	assert.True(t, meta.IsStatusConditionTrue(claim.Status.Conditions, "Held"))

	kubectlOK(t, admin, "", "patch", "gittarget", "-n", c.ns, "site", "--type=json", "-p", `[{"op":"remove","path":"/spec/applierRef"}]`)
	eventually(t, time.Minute, "the claim released once no GitTarget names it", func() (bool, error) {
		reason, _, finalizers := claimState(t, c.ns, "apps")
		return reason == "NotNamed" && len(finalizers) == 0, nil
	})
	assert.Equal(t, "5s", fluxField(t, "kustomization", c.ks, ".spec.interval"), "the schedule is given back as it was")
	assert.Equal(t, "5s", fluxField(t, "gitrepository", c.ks, ".spec.interval"))
	assert.Empty(t, fluxField(t, "kustomization", c.ks, `.metadata.annotations.reverser\.dev/claimed-by`))
	kubectlOK(t, admin, "", "delete", "fluxclaim", "-n", c.ns, "apps", "--timeout=60s")
}

// applierClock is an unheld applier (a Flux Kustomization or an Argo CD
// Application with self-heal) of a ConfigMap "app" of color blue, on a
// repository of its own: what an applier's schedule would have done shows
// on it, so a check that a held one did nothing waits for its runs, not
// for a fixed time.
type applierClock struct{ ns string }

// newFluxClock starts a Kustomization at interval as an applierClock.
func newFluxClock(t *testing.T, interval string) *applierClock {
	t.Helper()
	ns, _, _, _ := fluxApp(t, "clock", interval)
	return &applierClock{ns: ns}
}

// runs returns once the clock's applier has run n times on its own
// (each time its ConfigMap is drifted and the applier puts it back),
// failing the test at once if broken ever holds meanwhile.
func (c *applierClock) runs(t *testing.T, n int, what string, broken func() bool) {
	t.Helper()
	for i := range n {
		kubectlOK(t, controlplane.UserAdmin, "", "patch", "configmap", "-n", c.ns, "app", "--type=merge", "-p", `{"data":{"color":"drifted"}}`)
		err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			if broken() {
				return false, errors.New(what)
			}
			color := kubectlOK(t, controlplane.UserAdmin, "", "get", "configmap", "-n", c.ns, "app", "-o", "jsonpath={.data.color}")
			return color == "blue", nil
		})
		require.NoError(t, err, "run %d of an unheld applier", i+1)
	}
}
