package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/test/harness"
)

// Argo CD's controllers cannot be built from the module proxy here (see
// docs/appliers.md), so the ArgoCDClaim specs run against the real
// Application CRD and contractArgoCD, a test applier that follows Argo CD's
// documented contract. Their names say so.

const argoNamespace = "argocd"

// contractArgoCD plays Argo CD's application controller for one
// Application, by the contract Reverser relies on: with
// spec.syncPolicy.automated it syncs the target revision every interval; a
// written .operation moves into status.operationState (phase Running), is
// synced, and ends Succeeded with status.operationState.syncResult.revision
// and status.sync.revision. A sync applies the Application's folder at the
// branch's head with kubectl, server-side, as field manager
// argocd-controller and as the service account Argo CD runs as.
type contractArgoCD struct {
	t          *testing.T
	client     dynamic.Interface
	kubeconfig string
	bare, name string
	interval   time.Duration

	mu    sync.Mutex
	syncs int
}

// startContractArgoCD creates Argo CD's service account (cluster-admin, as
// Argo CD installs it), and runs the test applier as it until the test ends.
func startContractArgoCD(t *testing.T, bare, app string, interval time.Duration) *contractArgoCD {
	t.Helper()
	_, _ = kubectl(admin, "", "create", "namespace", argoNamespace)
	_, _ = kubectl(admin, "", "create", "serviceaccount", "-n", argoNamespace, "argocd-application-controller")
	_, _ = kubectl(admin, "", "create", "clusterrolebinding", "argocd-application-controller", "--clusterrole=cluster-admin",
		"--serviceaccount="+argoNamespace+":argocd-application-controller")
	token := strings.TrimSpace(kubectlOK(t, admin, "", "create", "token", "-n", argoNamespace, "argocd-application-controller", "--duration=1h"))
	cfg, err := clientcmd.LoadFromFile(env.KubeconfigAdmin)
	require.NoError(t, err)
	for _, auth := range cfg.AuthInfos {
		auth.Token, auth.ClientCertificate, auth.ClientKey, auth.ClientCertificateData, auth.ClientKeyData = token, "", "", nil, nil
	}
	kubeconfig := filepath.Join(t.TempDir(), "argocd.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, kubeconfig))
	rest, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	a := &contractArgoCD{t: t, client: dynamic.NewForConfigOrDie(rest), kubeconfig: kubeconfig, bare: bare, name: app, interval: interval}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		a.run(ctx)
	}()
	return a
}

func (a *contractArgoCD) run(ctx context.Context) {
	apps := a.client.Resource(v1.ArgoCDApplications).Namespace(argoNamespace)
	var lastAuto time.Time
	// Every 200ms: the test applier's own reconcile period.
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		obj, err := apps.Get(ctx, a.name, metav1.GetOptions{})
		if err != nil {
			return
		}
		op, hasOp, _ := unstructured.NestedMap(obj.Object, "operation")
		_, automated, _ := unstructured.NestedMap(obj.Object, "spec", "syncPolicy", "automated")
		switch {
		case hasOp:
			unstructured.RemoveNestedField(obj.Object, "operation")
			_ = unstructured.SetNestedMap(obj.Object, map[string]any{"operation": op, "phase": "Running",
				"startedAt": time.Now().UTC().Format(time.RFC3339)}, "status", "operationState")
			if obj, err = apps.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				return
			}
			a.sync(ctx, apps, obj, op)
		case automated && time.Since(lastAuto) >= a.interval:
			lastAuto = time.Now()
			a.sync(ctx, apps, obj, map[string]any{"initiatedBy": map[string]any{"automated": true}, "sync": map[string]any{}})
		}
	}, 200*time.Millisecond)
}

// sync applies the folder at the branch's head and reports it.
func (a *contractArgoCD) sync(ctx context.Context, apps dynamic.ResourceInterface, obj *unstructured.Unstructured, op map[string]any) {
	path, _, _ := unstructured.NestedString(obj.Object, "spec", "source", "path")
	sha, err := exec.Command("git", "-C", a.bare, "rev-parse", "main").Output()
	if err != nil {
		return
	}
	revision := strings.TrimSpace(string(sha))
	dir, err := os.MkdirTemp("", "contract-argocd")
	if err != nil {
		return
	}
	defer os.RemoveAll(dir)
	phase, message := "Succeeded", "successfully synced"
	defer func() {
		if phase != "Succeeded" {
			a.t.Logf("the test applier's sync failed: %s", message)
		}
	}()
	out, err := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s %s | tar -x -C %q && kubectl --kubeconfig %q apply --server-side "+
		"--field-manager=%s --force-conflicts -R -f %q", a.bare, revision, path, dir, a.kubeconfig, applier.ArgoCDManager,
		filepath.Join(dir, path))).CombinedOutput()
	if err != nil {
		phase, message = "Failed", strings.TrimSpace(string(out))
	}
	started, found, _ := unstructured.NestedString(obj.Object, "status", "operationState", "startedAt")
	if !found {
		started = time.Now().UTC().Format(time.RFC3339)
	}
	_ = unstructured.SetNestedMap(obj.Object, map[string]any{"operation": op, "phase": phase, "message": message, "startedAt": started,
		"finishedAt": time.Now().UTC().Format(time.RFC3339), "syncResult": map[string]any{"revision": revision}}, "status", "operationState")
	syncStatus := "Synced"
	if phase != "Succeeded" {
		syncStatus = "OutOfSync"
	}
	_ = unstructured.SetNestedMap(obj.Object, map[string]any{"status": syncStatus, "revision": revision}, "status", "sync")
	if _, err := apps.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		if ctx.Err() != nil {
			return // the test is over
		}
		a.t.Logf("the test applier could not report its sync: %v", err)
		return
	}
	a.mu.Lock()
	a.syncs++
	a.mu.Unlock()
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

// TestAnArgoCDClaimWithTheContractTestApplier (E1, E3 against Argo CD's
// contract): an Application with automated sync reverts a live edit; once
// an ArgoCDClaim that the GitTarget names holds it, automated sync is off,
// the Startup sync runs, a live edit survives, and a save with catchUp
// AfterPush is Applied=True with the revision synced, a commit pushed by
// hand is synced (ForeignCommit); the release gives the automated sync back
// as it was.
func TestAnArgoCDClaimWithTheContractTestApplier(t *testing.T) {
	f := newMirrorWith(t, mirrorOptions{rules: configMapsOnly, targetSpec: "  applierRef: {kind: ArgoCDClaim, name: apps}"})
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "app", "--from-literal=color=blue")
	f.waitFile(f.cmPath("app"), func(s string) bool { return strings.Contains(s, "blue") }, "the app mirrored")
	app := uniqueName("apps")
	argo := startContractArgoCD(t, f.bare, app, 2*time.Second)
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: %s, namespace: %s}
spec:
  project: default
  source: {repoURL: %q, path: %s, targetRevision: main}
  destination: {server: "https://kubernetes.default.svc", namespace: %s}
  syncPolicy:
    automated: {prune: false, selfHeal: true}
`, app, argoNamespace, f.url, mirrorPath, f.ns), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "application", "-n", argoNamespace, app, "--wait=false") })
	color := func() string {
		out, _ := kubectl(admin, "", "get", "configmap", "-n", f.ns, "app", "-o", "jsonpath={.data.color}")
		return strings.TrimSpace(out)
	}

	kubectlOK(t, alice, "", "patch", "configmap", "-n", f.ns, "app", "--type=merge", "-p", `{"data":{"color":"red"}}`)
	f.waitFile(f.cmPath("app"), func(s string) bool { return strings.Contains(s, "red") }, "the edit mirrored")
	argo.mu.Lock()
	before := argo.syncs
	argo.mu.Unlock()
	eventually(t, time.Minute, "the test applier's automated sync applied the branch", func() (bool, error) {
		argo.mu.Lock()
		defer argo.mu.Unlock()
		return argo.syncs > before, nil
	})

	kubectlOK(t, admin, harness.ArgoCDClaim(f.ns, "apps", "local", argoNamespace, app, ""), "apply", "-f", "-")
	eventually(t, 2*time.Minute, "the claim held, its Startup sync done", func() (bool, error) {
		reason, op := argoClaimState(t, f.ns, "apps")
		return reason == "Holding" && op != nil && op.Reason == v1.ConvergeStartup && op.FinishedAt != nil, nil
	})
	automated := kubectlOK(t, admin, "", "get", "application", "-n", argoNamespace, app, "-o", "jsonpath={.spec.syncPolicy.automated}")
	assert.Empty(t, strings.TrimSpace(automated), "automated sync off while held")

	kubectlOK(t, alice, "", "patch", "configmap", "-n", f.ns, "app", "--type=merge", "-p", `{"data":{"color":"green"}}`)
	never(t, 8*time.Second, "the held Application reverted the live edit", func() bool { return color() != "green" })

	kubectlOK(t, alice, "", "patch", "configmap", "-n", f.ns, "app", "--type=merge", "-p", `{"data":{"color":"purple"}}`)
	f.createRequest(alice, "purple", "  gitTargetRef: {name: site}\n  message: Purple\n  catchUp: AfterPush\n")
	eventually(t, time.Minute, "Applied=True", func() (bool, error) {
		a := meta.FindStatusCondition(f.commitRequest("purple").Status.Conditions, v1.ConditionApplied)
		return a != nil && a.Status == metav1.ConditionTrue, nil
	})
	cr := f.commitRequest("purple")
	assert.Equal(t, v1.ReasonApplied, meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied).Reason)
	git(t, f.bare, "merge-base", "--is-ancestor", cr.Status.Commit, applier.CommitOf(cr.Status.AppliedRevision))
	assert.Equal(t, applier.CommitOf(cr.Status.AppliedRevision),
		kubectlOK(t, admin, "", "get", "application", "-n", argoNamespace, app, "-o", "jsonpath={.status.sync.revision}"))
	assert.Equal(t, "purple", color())

	// A commit pushed by hand is synced: ForeignCommit.
	pushByHand(t, f.url, f.cmPath("app"), "Teal, by hand", func(s string) string { return strings.Replace(s, "purple", "teal", 1) })
	eventually(t, time.Minute, "the foreign commit synced", func() (bool, error) {
		_, op := argoClaimState(t, f.ns, "apps")
		return color() == "teal" && op != nil && op.Reason == v1.ConvergeForeignCommit && op.FinishedAt != nil, nil
	})

	kubectlOK(t, admin, "", "patch", "gittarget", "-n", f.ns, "site", "--type=json", "-p", `[{"op":"remove","path":"/spec/applierRef"}]`)
	eventually(t, time.Minute, "the claim released", func() (bool, error) {
		reason, _ := argoClaimState(t, f.ns, "apps")
		return reason == "NotNamed", nil
	})
	assert.JSONEq(t, `{"prune":false,"selfHeal":true}`,
		kubectlOK(t, admin, "", "get", "application", "-n", argoNamespace, app, "-o", "jsonpath={.spec.syncPolicy.automated}"),
		"automated sync given back as it was")
}
