package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

// TestKstatusReadsEveryKindAsDocumented (#29): kstatus, the library that
// kubectl wait's callers, Flux's health checks and Argo CD's health lean on,
// computes each Reverser kind in each lasting state as docs/api.md says:
// working objects Current, suspended ones Current, a save under way or a
// claim no GitTarget names yet InProgress, and every failure a person must
// fix Failed. The objects are
// read from the e2e plane, as those tools read them.
func TestKstatusReadsEveryKindAsDocumented(t *testing.T) {
	f := newMirror(t, configMapRule, saveWindow)
	ghost, broken := uniqueName("ghost"), uniqueName("broken")
	kubectlOK(t, admin, harness.Docs(
		harness.GitProvider(f.ns, "nosecret", f.url, "  secretRef: {name: missing}\n  allowInsecureHTTP: true"),
		harness.GitTarget(harness.Target{Namespace: f.ns, Name: "lost", KubeProvider: "local", GitProvider: "nope", Path: "lost",
			Spec: "  applierRef: {kind: FluxClaim, name: far}"}),
		harness.GitTarget(harness.Target{Namespace: f.ns, Name: "paused", KubeProvider: "local", Path: "paused", Spec: "  suspend: true"}),
		harness.WatchRule(f.ns, "orphan", "ghost", harness.ConfigMapRules),
		harness.FluxClaim(f.ns, "far", "nowhere", controlplane.FluxNamespace, "apps", ""),
		harness.FluxClaim(f.ns, "unnamed", "local", controlplane.FluxNamespace, "apps", ""),
		fmt.Sprintf("apiVersion: reverser.dev/v1alpha1\nkind: ClusterWatchRule\nmetadata: {name: %s}\nspec:\n  gitTargetRef: {namespace: %s, name: ghost}\n%s",
			ghost, f.ns, harness.ConfigMapRules),
		fmt.Sprintf("apiVersion: reverser.dev/v1alpha1\nkind: KubeProvider\nmetadata: {name: %s}\nspec:\n  kubeConfigSecretRef: {namespace: %s, name: %s, key: kubeconfig}\n",
			broken, controlplane.ReverserNamespace, broken),
	), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() {
		_, _ = kubectl(admin, "", "delete", "clusterwatchrule,kubeprovider", ghost, broken, "--ignore-not-found")
	})
	f.createRequest(alice, "done", "  gitTargetRef: {name: site}\n  message: Mark\n  whenNothingToCommit: CommitEmpty\n")
	f.createRequest(alice, "waiting", "  gitTargetRef: {name: site}\n  message: Next\n  attach: Next\n  window: {attachTimeout: 10m}\n")
	f.createRequest(alice, "nowhere", "  gitTargetRef: {name: ghost}\n  message: Nowhere\n  window: {attachTimeout: 1s}\n")

	for _, tc := range []struct {
		kind, namespace, name string
		want                  status.Status
	}{
		{"gitprovider", f.ns, "repo", status.CurrentStatus},
		{"gitprovider", f.ns, "nosecret", status.FailedStatus},      // SecretNotFound
		{"kubeprovider", "", "local", status.CurrentStatus},         // Reachable
		{"kubeprovider", "", broken, status.FailedStatus},           // SecretNotFound
		{"gittarget", f.ns, "site", status.CurrentStatus},           // Mirroring
		{"gittarget", f.ns, "lost", status.FailedStatus},            // GitProviderNotFound
		{"gittarget", f.ns, "paused", status.CurrentStatus},         // Suspended: asked for
		{"watchrule", f.ns, "rules", status.CurrentStatus},          // Resolved
		{"watchrule", f.ns, "orphan", status.FailedStatus},          // GitTargetNotFound
		{"clusterwatchrule", "", ghost, status.FailedStatus},        // GitTargetNotFound
		{"fluxclaim", f.ns, "far", status.FailedStatus},             // KubeProviderNotFound
		{"fluxclaim", f.ns, "unnamed", status.InProgressStatus},     // NotNamed: waits for a GitTarget to name it
		{"commitrequest", f.ns, "done", status.CurrentStatus},       // Committed
		{"commitrequest", f.ns, "waiting", status.InProgressStatus}, // Saving
		{"commitrequest", f.ns, "nowhere", status.FailedStatus},     // GitTargetNotFound
	} {
		what := fmt.Sprintf("%s %s/%s kstatus %s", tc.kind, tc.namespace, tc.name, tc.want)
		eventually(t, time.Minute, what, func() (bool, error) {
			args := []string{"get", tc.kind, tc.name, "-o", "json"}
			if tc.namespace != "" {
				args = append(args, "-n", tc.namespace)
			}
			out, err := kubectl(admin, "", args...)
			if err != nil {
				return false, err
			}
			obj := &unstructured.Unstructured{}
			require.NoError(t, obj.UnmarshalJSON([]byte(out)))
			res, err := status.Compute(obj)
			if err != nil {
				return false, err
			}
			if res.Status != tc.want {
				return false, fmt.Errorf("kstatus %s: %s", res.Status, res.Message)
			}
			return true, nil
		})
	}
	// kubectl wait reads the same conditions.
	kubectlOK(t, admin, "", "wait", "--for=condition=Ready", "-n", f.ns, "gittarget/site", "gitprovider/repo", "watchrule/rules",
		"commitrequest/done", "--timeout=10s")
	kubectlOK(t, admin, "", "wait", "--for=condition=Stalled", "-n", f.ns, "gittarget/lost", "commitrequest/nowhere", "--timeout=10s")
}
