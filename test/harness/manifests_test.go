package harness

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// Every builder writes YAML the API types take strictly (no unknown or
// duplicate field), with the values it was given.
func TestManifestsDecodeStrictlyIntoTheAPITypes(t *testing.T) {
	stream := Docs(
		AuditedKubeProvider("local"),
		GitProvider("ns", "repo", "http://127.0.0.1/r.git", "  allowInsecureHTTP: true\n"),
		GitTarget(Target{Namespace: "ns", KubeProvider: "local", Path: "mirror", Silence: "200ms", MaxAge: "5s",
			Spec: "  applierRef: {kind: FluxClaim, name: apps}"}),
		"---\n"+WatchRule("ns", "rules", "site", ConfigMapRules),
		FluxClaim("ns", "apps", "local", "flux-system", "apps", "  catchUpAfter: 0s"),
		ArgoCDClaim("ns", "argo", "local", "argocd", "app", ""),
	)
	docs := strings.Split(stream, "---\n")
	require.Len(t, docs, 6, "one document each, no empty one:\n%s", stream)

	var kp v1.KubeProvider
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &kp))
	assert.Equal(t, "audit-local", kp.Spec.Audit.BearerTokenSecretRef.Name)
	assert.True(t, kp.Spec.InCluster)

	var gp v1.GitProvider
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &gp))
	assert.Equal(t, "http://127.0.0.1/r.git", gp.Spec.URL)
	assert.True(t, gp.Spec.AllowInsecureHTTP)

	var gt v1.GitTarget
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[2]), &gt))
	assert.Equal(t, "site", gt.Name)
	assert.Equal(t, "repo", gt.Spec.GitProviderRef.Name)
	assert.Equal(t, "200ms", gt.Spec.Commit.Window.Silence.Duration.String())
	assert.Equal(t, "apps", gt.Spec.ApplierRef.Name)

	var wr v1.WatchRule
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[3]), &wr))
	assert.Equal(t, []string{"configmaps"}, wr.Spec.Rules[0].Resources)

	var fc v1.FluxClaim
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[4]), &fc))
	assert.Equal(t, "flux-system", fc.Spec.KustomizationRef.Namespace)
	var ac v1.ArgoCDClaim
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[5]), &ac))
	assert.Equal(t, "app", ac.Spec.ApplicationRef.Name)

	// Without a window the GitTarget keeps the default one.
	var plain v1.GitTarget
	require.NoError(t, yaml.UnmarshalStrict([]byte(GitTarget(Target{Namespace: "ns", KubeProvider: "local", Path: "p"})), &plain))
	assert.Nil(t, plain.Spec.Commit.Window.Silence)
}

func TestUserRoleBindsTheRoleToTheUser(t *testing.T) {
	docs := strings.Split(UserRole("ns", "editor", "alice", "- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]"), "---\n")
	require.Len(t, docs, 2)
	var role, binding map[string]any
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[0]), &role))
	require.NoError(t, yaml.UnmarshalStrict([]byte(docs[1]), &binding))
	assert.Equal(t, "Role", role["kind"])
	assert.Equal(t, "RoleBinding", binding["kind"])
	assert.Equal(t, map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "editor"}, binding["roleRef"])
	assert.Equal(t, []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}}, binding["subjects"])
}
