package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/apiserver"
)

// TestAPI runs the API's behaviours against one server.
func TestAPI(t *testing.T) {
	authz := newTestAuthz()
	s := startServer(t, serverSetup{dir: t.TempDir(), authz: authz})
	t.Run("Defaults", func(t *testing.T) { testDefaults(t, s) })
	t.Run("Validation", func(t *testing.T) { testValidation(t, s) })
	t.Run("Immutability", func(t *testing.T) { testImmutability(t, s) })
	t.Run("AuthorFromRequest", func(t *testing.T) { testAuthor(t, s, authz) })
	t.Run("SaveVerb", func(t *testing.T) { testSaveVerb(t, s, authz) })
	t.Run("Grants", func(t *testing.T) { testGrants(t, s, authz) })
	t.Run("StatusValidation", func(t *testing.T) { testStatusValidation(t, s) })
	t.Run("FieldSelector", func(t *testing.T) { testFieldSelector(t, s) })
	t.Run("Table", func(t *testing.T) { testTable(t, s, authz) })
	t.Run("RuleAuthorization", func(t *testing.T) { testRuleAuthorization(t, s, authz) })
	t.Run("ClaimAuthorization", func(t *testing.T) { testClaimAuthorization(t, s, authz) })
}

// testClaimAuthorization (attack): a namespace tenant may not hand Reverser
// an applier she may not change herself, such as flux-system's: holding it
// would rewrite its schedule with Reverser's rights. Whoever may is recorded
// in status.authorizedBy, which nobody can write.
func testClaimAuthorization(t *testing.T, s *testServer, authz *testAuthz) {
	ctx := ctxT(t)
	eve := s.as("eve", "tenants")
	claim := fluxClaim("eve-claim")
	_, err := eve.FluxClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "a tenant may not claim flux-system's Kustomization: %v", err)
	assert.Contains(t, err.Error(), `user "eve" may not hand this applier to Reverser: it lacks `+
		`get kustomizations.kustomize.toolkit.fluxcd.io flux-system/apps, patch kustomizations.kustomize.toolkit.fluxcd.io flux-system/apps`)

	_, err = eve.ArgoCDClaims(ns).Create(ctx, argoCDClaim("eve-argo"), metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "nor an Argo CD Application: %v", err)
	assert.Contains(t, err.Error(), "patch applications.argoproj.io")

	authz.grant("eve", "get", "flux-system", "kustomizations", "apps")
	authz.grant("eve", "patch", "flux-system", "kustomizations", "apps")
	created, err := eve.FluxClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	require.NoError(t, err, "she may change that Kustomization herself")
	require.NotNil(t, created.Status.AuthorizedBy)
	assert.Equal(t, "eve", created.Status.AuthorizedBy.Username)

	forged := created.DeepCopy()
	forged.Status.AuthorizedBy = &v1.Author{Username: "system:admin"}
	updated, err := s.adminClient().FluxClaims(ns).UpdateStatus(ctx, forged, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "eve", updated.Status.AuthorizedBy.Username, "a status write cannot change who authorised the claim")

	moved := updated.DeepCopy()
	moved.Spec.KustomizationRef.Name = "infra"
	_, err = eve.FluxClaims(ns).Update(ctx, moved, metav1.UpdateOptions{})
	invalid(t, err, "spec.kustomizationRef", nil) // another applier is another claim

	mallory := s.as("mallory", "tenants")
	updated.Spec.CatchUpAfter = &metav1.Duration{Duration: 5 * time.Minute}
	_, err = mallory.FluxClaims(ns).Update(ctx, updated, metav1.UpdateOptions{})
	require.True(t, apierrors.IsForbidden(err), "a spec change is checked like a create, for whoever makes it: %v", err)
}

// testRuleAuthorization: whoever writes a rule's spec must be allowed to
// list and watch what it selects, and is recorded in status.authorizedBy,
// which nobody can write.
func testRuleAuthorization(t *testing.T, s *testServer, authz *testAuthz) {
	ctx := ctxT(t)
	eve := s.as("eve", "tenants")
	rule := watchRule("eve-rule")
	rule.Spec.SourceNamespace = "kube-system"
	_, err := eve.WatchRules(ns).Create(ctx, rule, metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "a tenant may not mirror a namespace she cannot read: %v", err)
	assert.Contains(t, err.Error(), `user "eve" may not read what the rule selects: it lacks list configmaps in namespace kube-system`)

	rule.Spec.SourceNamespace = ""
	_, err = eve.WatchRules(ns).Create(ctx, rule, metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "not even her own namespace without list and watch: %v", err)

	authz.grantRead("eve", ns, "configmaps")
	created, err := eve.WatchRules(ns).Create(ctx, rule, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotNil(t, created.Status.AuthorizedBy)
	assert.Equal(t, "eve", created.Status.AuthorizedBy.Username)

	forged := created.DeepCopy()
	forged.Status.AuthorizedBy = &v1.Author{Username: "system:admin"}
	updated, err := s.adminClient().WatchRules(ns).UpdateStatus(ctx, forged, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "eve", updated.Status.AuthorizedBy.Username, "a status write cannot change who authorised the rule")

	updated.Labels = map[string]string{"team": "a"}
	updated, err = s.adminClient().WatchRules(ns).Update(ctx, updated, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "eve", updated.Status.AuthorizedBy.Username, "a metadata change keeps the author")

	updated.Spec.SourceNamespace = "kube-system"
	_, err = eve.WatchRules(ns).Update(ctx, updated, metav1.UpdateOptions{})
	require.True(t, apierrors.IsForbidden(err), "an update is checked like a create: %v", err)
	updated, err = s.adminClient().WatchRules(ns).Update(ctx, updated, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, apiserver.AdminUser, updated.Status.AuthorizedBy.Username, "a spec change is authorised by whoever made it")

	_, err = eve.ClusterWatchRules().Create(ctx, clusterWatchRule("eve-cluster"), metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "cluster-wide reads need cluster-wide rights: %v", err)
	assert.Contains(t, err.Error(), "list clusterroles.rbac.authorization.k8s.io (cluster-wide)")
}

func testDefaults(t *testing.T, s *testServer) {
	ctx, c := ctxT(t), s.adminClient()

	gp, err := c.GitProviders(ns).Create(ctx, gitProvider("defaults"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"*"}, gp.Spec.AllowedBranches)
	assert.Equal(t, v1.Committer{Name: "Reverser", Email: "reverser@reverser.dev"}, gp.Spec.Committer)

	kp, err := c.KubeProviders().Create(ctx, kubeProvider("defaults"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, v1.CommitRequestsIgnore, kp.Spec.CommitRequests)
	assert.Equal(t, &v1.NamespaceSelection{From: v1.NamespacesFromAll}, kp.Spec.ConsumerNamespaces)
	assert.Empty(t, kp.Spec.Lend, "a provider lends each consumer namespace only itself unless it says more")

	gt, err := c.GitTargets(ns).Create(ctx, gitTarget("defaults"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, []v1.CommitRequestGrant{{ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromSame}}},
		gt.Spec.AllowedCommitRequests)
	assert.Equal(t, v1.PruneAlways, gt.Spec.Prune)
	assert.Equal(t, 5*time.Second, gt.Spec.Commit.Window.Silence.Duration)
	assert.Equal(t, time.Minute, gt.Spec.Commit.Window.MaxAge.Duration)

	// An explicit empty list admits nobody and stays empty: it is not
	// mistaken for "omitted" when read back.
	closed := gitTarget("closed")
	closed.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{}
	_, err = c.GitTargets(ns).Create(ctx, closed, metav1.CreateOptions{})
	require.NoError(t, err)
	closedRead, err := c.GitTargets(ns).Get(ctx, "closed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotNil(t, closedRead.Spec.AllowedCommitRequests)
	assert.Empty(t, closedRead.Spec.AllowedCommitRequests)

	cr, err := c.CommitRequests(ns).Create(ctx, commitRequest("defaults", "defaults"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, cr.Spec.Window.AttachTimeout.Duration)
	assert.Equal(t, v1.AttachCurrent, cr.Spec.Attach)
	assert.Equal(t, v1.NothingToCommitSkip, cr.Spec.WhenNothingToCommit)
	assert.Equal(t, v1.CatchUpAsDefinedOnClaim, cr.Spec.CatchUp)
	assert.Equal(t, ns, cr.Spec.GitTargetRef.Namespace, "gitTargetRef.namespace defaults to the request's namespace")

	fc, err := c.FluxClaims(ns).Create(ctx, fluxClaim("defaults"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, time.Minute, fc.Spec.CatchUpAfter.Duration)
	off := fluxClaim("off")
	off.Spec.CatchUpAfter = &metav1.Duration{}
	fcOff, err := c.FluxClaims(ns).Create(ctx, off, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), fcOff.Spec.CatchUpAfter.Duration, "an explicit 0s turns catch-up off")

	acd, err := c.ArgoCDClaims(ns).Create(ctx, argoCDClaim("defaults"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotNil(t, acd.Spec.CatchUpAfter)
	assert.Equal(t, time.Duration(0), acd.Spec.CatchUpAfter.Duration)
}

// invalid asserts a 422 whose causes name field, and that nothing was stored.
func invalid(t *testing.T, err error, field string, get func() error) {
	t.Helper()
	require.Error(t, err)
	require.True(t, apierrors.IsInvalid(err), "want 422 Invalid, got %v", err)
	var fields []string
	if st, ok := err.(apierrors.APIStatus); ok && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			fields = append(fields, c.Field)
		}
	}
	assert.Contains(t, fields, field, "error %q", err)
	if get != nil {
		assert.True(t, apierrors.IsNotFound(get()), "an invalid object was stored")
	}
}

func testValidation(t *testing.T, s *testServer) {
	ctx, c := ctxT(t), s.adminClient()
	createGT := func(name string, mut func(*v1.GitTarget)) (func() error, error) {
		o := gitTarget(name)
		mut(o)
		_, err := c.GitTargets(ns).Create(ctx, o, metav1.CreateOptions{})
		return func() error { _, err := c.GitTargets(ns).Get(ctx, name, metav1.GetOptions{}); return err }, err
	}
	gtCases := []struct {
		name, field string
		mut         func(*v1.GitTarget)
	}{
		{"absolute-path", "spec.path", func(o *v1.GitTarget) { o.Spec.Path = "/etc" }},
		{"dotdot-path", "spec.path", func(o *v1.GitTarget) { o.Spec.Path = "a/../../b" }},
		{"no-branch", "spec.branch", func(o *v1.GitTarget) { o.Spec.Branch = "" }},
		{"bad-branch", "spec.branch", func(o *v1.GitTarget) { o.Spec.Branch = "feature..x" }},
		{"no-provider", "spec.gitProviderRef.name", func(o *v1.GitTarget) { o.Spec.GitProviderRef.Name = "" }},
		{"grant-both", "spec.allowedCommitRequests[0]", func(o *v1.GitTarget) {
			o.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{{
				ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromAll}, SourceNamespaces: []string{"*"}}}
		}},
		{"grant-neither", "spec.allowedCommitRequests[0]", func(o *v1.GitTarget) {
			o.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{{}}
		}},
		{"grant-names-missing", "spec.allowedCommitRequests[0].consumerNamespaces.names", func(o *v1.GitTarget) {
			o.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{{ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromNames}}}
		}},
		{"grant-bad-from", "spec.allowedCommitRequests[0].consumerNamespaces.from", func(o *v1.GitTarget) {
			o.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{{ConsumerNamespaces: &v1.NamespaceSelection{From: "Some"}}}
		}},
		{"negative-silence", "spec.commit.window.silence", func(o *v1.GitTarget) {
			o.Spec.Commit.Window.Silence = &metav1.Duration{Duration: -time.Second}
		}},
		{"bad-prune", "spec.prune", func(o *v1.GitTarget) { o.Spec.Prune = "Sometimes" }},
	}
	for _, tc := range gtCases {
		t.Run("GitTarget/"+tc.name, func(t *testing.T) {
			get, err := createGT("bad-"+tc.name, tc.mut)
			invalid(t, err, tc.field, get)
		})
	}

	crCases := []struct {
		name, field string
		mut         func(*v1.CommitRequest)
	}{
		{"empty-message", "spec.message", func(o *v1.CommitRequest) { o.Spec.Message = "" }},
		{"long-message", "spec.message", func(o *v1.CommitRequest) { o.Spec.Message = strings.Repeat("é", 1025) }},
		{"control-character", "spec.message", func(o *v1.CommitRequest) { o.Spec.Message = "bell\a" }},
		{"no-target", "spec.gitTargetRef.name", func(o *v1.CommitRequest) { o.Spec.GitTargetRef.Name = "" }},
		{"bad-attach", "spec.attach", func(o *v1.CommitRequest) { o.Spec.Attach = "Later" }},
	}
	for _, tc := range crCases {
		t.Run("CommitRequest/"+tc.name, func(t *testing.T) {
			o := commitRequest("bad-"+tc.name, "site")
			tc.mut(o)
			_, err := c.CommitRequests(ns).Create(ctx, o, metav1.CreateOptions{})
			invalid(t, err, tc.field, func() error {
				_, err := c.CommitRequests(ns).Get(ctx, o.Name, metav1.GetOptions{})
				return err
			})
		})
	}
	t.Run("CommitRequest/longest-message", func(t *testing.T) {
		o := commitRequest("longest", "site")
		o.Spec.Message = strings.Repeat("é", 1024)
		_, err := c.CommitRequests(ns).Create(ctx, o, metav1.CreateOptions{})
		require.NoError(t, err, "1024 characters are allowed, however many bytes")
	})

	t.Run("KubeProvider", func(t *testing.T) {
		kpCases := []struct {
			name, field string
			spec        v1.KubeProviderSpec
		}{
			{"neither", "spec.kubeConfigSecretRef", v1.KubeProviderSpec{}},
			{"both", "spec.inCluster", v1.KubeProviderSpec{InCluster: true,
				KubeConfigSecretRef: &v1.SecretKeyReference{Namespace: "a", Name: "b", Key: "c"}}},
			{"reconcile-in-cluster", "spec.commitRequests", v1.KubeProviderSpec{InCluster: true, CommitRequests: v1.CommitRequestsReconcile}},
			{"secret-without-namespace", "spec.kubeConfigSecretRef.namespace", v1.KubeProviderSpec{
				KubeConfigSecretRef: &v1.SecretKeyReference{Name: "b", Key: "c"}}},
			{"consumers-same", "spec.consumerNamespaces.from", v1.KubeProviderSpec{InCluster: true,
				ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromSame}}},
			{"audit-unauthenticated", "spec.audit.bearerTokenSecretRef", v1.KubeProviderSpec{InCluster: true,
				Audit: v1.AuditSpec{Enabled: true}}},
		}
		for _, tc := range kpCases {
			name := "bad-" + tc.name
			_, err := c.KubeProviders().Create(ctx, &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: tc.spec}, metav1.CreateOptions{})
			invalid(t, err, tc.field, func() error { _, err := c.KubeProviders().Get(ctx, name, metav1.GetOptions{}); return err })
		}
		ok := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "remote"}, Spec: v1.KubeProviderSpec{
			KubeConfigSecretRef: &v1.SecretKeyReference{Namespace: "reverser-system", Name: "remote", Key: "value"},
			CommitRequests:      v1.CommitRequestsReconcileAndDeleteFinished}}
		_, err := c.KubeProviders().Create(ctx, ok, metav1.CreateOptions{})
		require.NoError(t, err, "a kubeconfig provider may serve CommitRequests")
	})

	t.Run("GitProvider", func(t *testing.T) {
		for name, tc := range map[string]struct {
			field string
			mut   func(*v1.GitProvider)
		}{
			"no-url":         {"spec.url", func(o *v1.GitProvider) { o.Spec.URL = "" }},
			"ftp-url":        {"spec.url", func(o *v1.GitProvider) { o.Spec.URL = "ftp://example.com/repo" }},
			"password-url":   {"spec.url", func(o *v1.GitProvider) { o.Spec.URL = "https://me:secret@example.com/repo" }},
			"bad-email":      {"spec.committer.email", func(o *v1.GitProvider) { o.Spec.Committer.Email = "nobody" }},
			"bad-branch-pat": {"spec.allowedBranches[0]", func(o *v1.GitProvider) { o.Spec.AllowedBranches = []string{"rel[ease"} }},
		} {
			o := gitProvider("bad-" + name)
			tc.mut(o)
			_, err := c.GitProviders(ns).Create(ctx, o, metav1.CreateOptions{})
			invalid(t, err, tc.field, func() error { _, err := c.GitProviders(ns).Get(ctx, o.Name, metav1.GetOptions{}); return err })
		}
		scp := gitProvider("scp")
		scp.Spec.URL = "git@git.example.com:org/repo.git"
		_, err := c.GitProviders(ns).Create(ctx, scp, metav1.CreateOptions{})
		require.NoError(t, err, "the scp form of an SSH remote is accepted")
	})

	t.Run("WatchRule", func(t *testing.T) {
		o := watchRule("bad-rules")
		o.Spec.Rules = nil
		_, err := c.WatchRules(ns).Create(ctx, o, metav1.CreateOptions{})
		invalid(t, err, "spec.rules", nil)
		o = watchRule("bad-subresource")
		o.Spec.Rules[0].Resources = []string{"pods/log"}
		_, err = c.WatchRules(ns).Create(ctx, o, metav1.CreateOptions{})
		invalid(t, err, "spec.rules[0].resources[0]", nil)
		cw := clusterWatchRule("bad-target")
		cw.Spec.GitTargetRef.Namespace = ""
		_, err = c.ClusterWatchRules().Create(ctx, cw, metav1.CreateOptions{})
		invalid(t, err, "spec.gitTargetRef.namespace", nil)
	})

	t.Run("Claims", func(t *testing.T) {
		fc := fluxClaim("bad")
		fc.Spec.KustomizationRef.Namespace = ""
		_, err := c.FluxClaims(ns).Create(ctx, fc, metav1.CreateOptions{})
		invalid(t, err, "spec.kustomizationRef.namespace", nil)
		acd := argoCDClaim("bad")
		acd.Spec.CatchUpAfter = &metav1.Duration{Duration: -time.Minute}
		_, err = c.ArgoCDClaims(ns).Create(ctx, acd, metav1.CreateOptions{})
		invalid(t, err, "spec.catchUpAfter", nil)
	})
}

func testImmutability(t *testing.T, s *testServer) {
	ctx, c := ctxT(t), s.adminClient()
	_, err := c.GitTargets(ns).Create(ctx, gitTarget("fixed"), metav1.CreateOptions{})
	require.NoError(t, err)
	for field, mut := range map[string]func(*v1.GitTarget){
		"spec.branch":          func(o *v1.GitTarget) { o.Spec.Branch = "other" },
		"spec.path":            func(o *v1.GitTarget) { o.Spec.Path = "elsewhere" },
		"spec.kubeProviderRef": func(o *v1.GitTarget) { o.Spec.KubeProviderRef.Name = "other" },
		"spec.gitProviderRef":  func(o *v1.GitTarget) { o.Spec.GitProviderRef.Name = "other" },
	} {
		o, err := c.GitTargets(ns).Get(ctx, "fixed", metav1.GetOptions{})
		require.NoError(t, err)
		mut(o)
		_, err = c.GitTargets(ns).Update(ctx, o, metav1.UpdateOptions{})
		invalid(t, err, field, nil)
	}
	stored, err := c.GitTargets(ns).Get(ctx, "fixed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, gitTarget("fixed").Spec.Branch, stored.Spec.Branch)
	assert.Equal(t, gitTarget("fixed").Spec.Path, stored.Spec.Path)

	_, err = c.CommitRequests(ns).Create(ctx, commitRequest("frozen", "fixed"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.CommitRequests(ns).Patch(ctx, "frozen", "application/merge-patch+json",
		[]byte(`{"spec":{"message":"rewritten"}}`), metav1.PatchOptions{})
	invalid(t, err, "spec", nil)
	_, err = c.CommitRequests(ns).Patch(ctx, "frozen", "application/merge-patch+json",
		[]byte(`{"spec":{"window":{"attachTimeout":"1m"}}}`), metav1.PatchOptions{})
	invalid(t, err, "spec", nil)
}

func testAuthor(t *testing.T, s *testServer, authz *testAuthz) {
	ctx := ctxT(t)
	authz.grantSave("alice", ns, "*")
	alice := s.as("alice", "devs")

	forged := commitRequest("by-alice", "site")
	forged.Status.Author = &v1.Author{Username: "mallory", UID: "m-1", Groups: []string{"system:masters"}}
	before := metav1.Now().Rfc3339Copy()
	created, err := alice.CommitRequests(ns).Create(ctx, forged, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotNil(t, created.Status.Author.RecordedAt, "when the identity was recorded (#27 finding 3)")
	assert.False(t, created.Status.Author.RecordedAt.Before(&before))
	want := &v1.Author{Username: "alice", Groups: []string{"devs", "system:authenticated"}, RecordedAt: created.Status.Author.RecordedAt}
	assert.Equal(t, want, created.Status.Author, "the author is the authenticated requester")

	// A request of a system:masters identity is recorded without the group.
	admin := s.as("root", "system:masters")
	masters, err := admin.CommitRequests(ns).Create(ctx, commitRequest("by-root", "site"), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"system:authenticated"}, masters.Status.Author.Groups)

	// Neither the main resource nor the status subresource can change it.
	created.Status.Author = &v1.Author{Username: "mallory"}
	created.Labels = map[string]string{"edited": "yes"}
	updated, err := s.adminClient().CommitRequests(ns).Update(ctx, created, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, want, updated.Status.Author)

	updated.Status.Author = &v1.Author{Username: "mallory"}
	updated.Status.Conditions = []metav1.Condition{readyCondition("Committed")}
	statused, err := s.adminClient().CommitRequests(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, want, statused.Status.Author)
	assert.Equal(t, "Committed", statused.Status.Conditions[0].Reason, "the rest of the status is written")

	_, err = s.adminClient().CommitRequests(ns).Patch(ctx, "by-alice", "application/merge-patch+json",
		[]byte(`{"status":{"author":null}}`), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	read, err := alice.CommitRequests(ns).Get(ctx, "by-alice", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, want, read.Status.Author, "a status patch cannot clear the author")
}

func testSaveVerb(t *testing.T, s *testServer, authz *testAuthz) {
	ctx := ctxT(t)
	admin := s.adminClient()
	for _, name := range []string{"granted", "other"} {
		_, err := admin.GitTargets(ns).Create(ctx, gitTarget(name), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	bob := s.as("bob", "devs")

	_, err := bob.CommitRequests(ns).Create(ctx, commitRequest("bob-1", "granted"), metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "want 403, got %v", err)
	assert.Contains(t, err.Error(), `verb "save" on resource "gittargets"`)
	assert.Contains(t, err.Error(), `user "bob"`)
	_, err = admin.CommitRequests(ns).Get(ctx, "bob-1", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a refused request was stored")

	authz.grantSave("bob", ns, "granted")
	_, err = bob.CommitRequests(ns).Create(ctx, commitRequest("bob-2", "granted"), metav1.CreateOptions{})
	require.NoError(t, err, "save on the named GitTarget is enough")
	_, err = bob.CommitRequests(ns).Create(ctx, commitRequest("bob-3", "other"), metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "save on one name does not cover another: %v", err)

	// A GitTarget that does not exist yet is not refused at create: the
	// controller reports GitTargetNotFound after attachTimeout.
	authz.grantSave("bob", ns, "later")
	_, err = bob.CommitRequests(ns).Create(ctx, commitRequest("bob-4", "later"), metav1.CreateOptions{})
	require.NoError(t, err)
}

func testGrants(t *testing.T, s *testServer, authz *testAuthz) {
	ctx := ctxT(t)
	admin := s.adminClient()
	carol := s.as("carol", "devs")
	authz.grantSave("carol", ns, "shared")
	_, err := admin.GitTargets(ns).Create(ctx, gitTarget("shared"), metav1.CreateOptions{})
	require.NoError(t, err)

	fromTeam := func(name string) error {
		o := commitRequest(name, "shared")
		o.Namespace = "team-b"
		o.Spec.GitTargetRef.Namespace = ns
		_, err := carol.CommitRequests("team-b").Create(ctx, o, metav1.CreateOptions{})
		return err
	}
	err = fromTeam("default-grant")
	require.True(t, apierrors.IsForbidden(err), "the default grant admits only the GitTarget's namespace: %v", err)
	assert.Contains(t, err.Error(), `no grant in spec.allowedCommitRequests admits CommitRequests from namespace "team-b"`)

	setGrants := func(g ...v1.CommitRequestGrant) {
		gt, err := admin.GitTargets(ns).Get(ctx, "shared", metav1.GetOptions{})
		require.NoError(t, err)
		gt.Spec.AllowedCommitRequests = g
		_, err = admin.GitTargets(ns).Update(ctx, gt, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	setGrants(v1.CommitRequestGrant{ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromNames, Names: []string{"team-b"}}})
	require.NoError(t, fromTeam("named"), "a grant naming the namespace admits it at once")

	setGrants(v1.CommitRequestGrant{SourceNamespaces: []string{"*"}})
	err = fromTeam("source-only")
	require.True(t, apierrors.IsForbidden(err), "sourceNamespaces grants are for source-cluster requests: %v", err)

	setGrants(v1.CommitRequestGrant{ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}})
	err = fromTeam("selector")
	require.True(t, apierrors.IsForbidden(err), "standalone mode cannot read namespace labels: %v", err)
	assert.Contains(t, err.Error(), "without a kube-apiserver")

	setGrants(v1.CommitRequestGrant{ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromAll}})
	require.NoError(t, fromTeam("all"))

	setGrants([]v1.CommitRequestGrant{}...)
	o := commitRequest("same-ns-closed", "shared")
	_, err = carol.CommitRequests(ns).Create(ctx, o, metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "an empty grant list admits nobody: %v", err)
}

func testStatusValidation(t *testing.T, s *testServer) {
	ctx, c := ctxT(t), s.adminClient()
	gt, err := c.GitTargets(ns).Create(ctx, gitTarget("status-checked"), metav1.CreateOptions{})
	require.NoError(t, err)
	gt.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: "Maybe", LastTransitionTime: metav1.Now()}}
	_, err = c.GitTargets(ns).UpdateStatus(ctx, gt, metav1.UpdateOptions{})
	invalid(t, err, "status.conditions[0].status", nil)
	gt.Status.Conditions = nil
	gt.Status.ObservedGeneration = -1
	_, err = c.GitTargets(ns).UpdateStatus(ctx, gt, metav1.UpdateOptions{})
	invalid(t, err, "status.observedGeneration", nil)
}

func testFieldSelector(t *testing.T, s *testServer) {
	ctx, c := ctxT(t), s.adminClient()
	for _, n := range []string{"fs-a1", "fs-a2"} {
		_, err := c.CommitRequests(ns).Create(ctx, commitRequest(n, "fs-a"), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := c.CommitRequests(ns).Create(ctx, commitRequest("fs-b1", "fs-b"), metav1.CreateOptions{})
	require.NoError(t, err)

	list, err := c.CommitRequests(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.gitTargetRef.name=fs-a"})
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"fs-a1", "fs-a2"}, names(t, list))

	_, err = c.CommitRequests(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.message=x"})
	require.True(t, apierrors.IsBadRequest(err), "an unsupported field selector is refused: %v", err)
}

func testTable(t *testing.T, s *testServer, authz *testAuthz) {
	ctx := ctxT(t)
	authz.grantSave("dave", ns, "*")
	_, err := s.as("dave", "devs").CommitRequests(ns).Create(ctx, commitRequest("tabled", "site"), metav1.CreateOptions{})
	require.NoError(t, err)

	table := getTable(ctx, t, s.admin, "/apis/reverser.dev/v1alpha1/namespaces/"+ns+"/commitrequests/tabled")
	assert.Equal(t, []string{"Name", "Target", "Author", "Ready", "Reason", "Commit", "Message", "Age"}, columnNames(table))
	require.Len(t, table.Rows, 1)
	assert.Equal(t, []any{"tabled", "site", "dave", "", "", ""}, table.Rows[0].Cells[:6])

	table = getTable(ctx, t, s.admin, "/apis/reverser.dev/v1alpha1/namespaces/"+ns+"/gittargets")
	assert.Equal(t, []string{"Name", "Provider", "Branch", "Path", "Ready", "Last Commit", "Source", "Streams", "Reason", "Age"},
		columnNames(table))
	assert.NotEmpty(t, table.Rows)
}

func getTable(ctx context.Context, t *testing.T, cfg *rest.Config, path string) *metav1.Table {
	t.Helper()
	client, err := rest.RESTClientFor(withDefaults(cfg))
	require.NoError(t, err)
	raw, err := client.Get().AbsPath(path).SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Raw()
	require.NoError(t, err)
	var table metav1.Table
	require.NoError(t, json.Unmarshal(raw, &table))
	require.Equal(t, "Table", table.Kind, "server answered %s", http.DetectContentType(raw))
	return &table
}

func columnNames(t *metav1.Table) []string {
	var out []string
	for _, c := range t.ColumnDefinitions {
		out = append(out, c.Name)
	}
	return out
}
