package tenancy

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func labelsOf(ctx context.Context, ns string) (labels.Set, error) {
	switch ns {
	case "team-a":
		return labels.Set{"tier": "apps"}, nil
	case "team-b":
		return labels.Set{}, nil
	}
	return nil, errors.New("namespace " + ns + " not found")
}

func TestLends(t *testing.T) {
	local := &v1.KubeProvider{Spec: v1.KubeProviderSpec{InCluster: true}}
	remote := &v1.KubeProvider{}
	sameNames := &v1.KubeProvider{Spec: v1.KubeProviderSpec{LendSameNamespaces: true}}
	loans := []v1.NamespaceLoan{
		{SourceNamespaces: []string{"shared"}, To: v1.NamespaceSelection{From: v1.NamespacesFromNames, Names: []string{"team-b"}}},
		{SourceNamespaces: []string{"*"}, To: v1.NamespaceSelection{From: v1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "apps"}}}},
		{SourceNamespaces: []string{"vault"}, To: v1.NamespaceSelection{From: v1.NamespacesFromNames, Names: []string{"team-b"}}, Secrets: true},
	}
	lending := &v1.KubeProvider{Spec: v1.KubeProviderSpec{Lend: loans}}
	for _, tc := range []struct {
		name             string
		kp               *v1.KubeProvider
		consumer, source string
		secrets          bool
		want             bool
	}{
		{"this cluster: the own namespace, as RBAC allows", local, "team-a", "team-a", true, true},
		{"this cluster: nothing else by default", local, "team-a", "kube-system", false, false},
		// #27, finding 5: another cluster's namespaces share names by chance.
		{"remote: not even the namespace of the same name by default", remote, "team-a", "team-a", false, false},
		{"remote: the same name when the admin says so", sameNames, "team-a", "team-a", false, true},
		{"remote: but never its Secrets", sameNames, "team-a", "team-a", true, false},
		{"a named loan", lending, "team-b", "shared", false, true},
		{"a named loan lends only what it names", lending, "team-b", "kube-system", false, false},
		{"a selector loan of every namespace", lending, "team-a", "kube-system", false, true},
		{"remote Secrets need a loan that says so", lending, "team-a", "kube-system", true, false},
		{"a loan with secrets: true lends them", lending, "team-b", "vault", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Lends(context.Background(), tc.kp, tc.consumer, tc.source, tc.secrets, labelsOf)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := Lends(context.Background(), lending, "gone", "kube-system", false, labelsOf)
	assert.Error(t, err, "a namespace whose labels cannot be read is an error, not a loan")
}

func TestConsumer(t *testing.T) {
	for _, tc := range []struct {
		name string
		sel  *v1.NamespaceSelection
		ns   string
		want bool
	}{
		{"omitted admits all", nil, "team-b", true},
		{"names", &v1.NamespaceSelection{From: v1.NamespacesFromNames, Names: []string{"team-a"}}, "team-b", false},
		{"selector", &v1.NamespaceSelection{From: v1.NamespacesFromSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "apps"}}}, "team-a", true},
		{"Same has no holder on a cluster-scoped provider", &v1.NamespaceSelection{From: v1.NamespacesFromSame}, "team-a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Consumer(context.Background(), &v1.KubeProvider{Spec: v1.KubeProviderSpec{ConsumerNamespaces: tc.sel}}, tc.ns, labelsOf)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRuleAccessAndMissing(t *testing.T) {
	gvrs := []schema.GroupVersionResource{
		{Version: "v1", Resource: "configmaps"}, {Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "apps", Version: "v1beta1", Resource: "deployments"},
	}
	need := RuleAccess(gvrs, "team-a")
	assert.Equal(t, []Access{
		{Verb: "list", Resource: "configmaps", Namespace: "team-a"}, {Verb: "watch", Resource: "configmaps", Namespace: "team-a"},
		{Verb: "list", Group: "apps", Resource: "deployments", Namespace: "team-a"},
		{Verb: "watch", Group: "apps", Resource: "deployments", Namespace: "team-a"},
	}, need, "each resource once, whatever its version")

	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetResource() == "configmaps" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	missing, err := Missing(context.Background(), authz, &user.DefaultInfo{Name: "bob"}, need)
	require.NoError(t, err)
	assert.Equal(t, need[2:], missing)
	assert.Equal(t, `user "bob" may not read what the rule selects: it lacks list deployments.apps in namespace team-a, `+
		`watch deployments.apps in namespace team-a; a rule reads only what its author may read`, Denied("bob", missing))

	failing := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "", errors.New("webhook down")
	})
	_, err = Missing(context.Background(), failing, &user.DefaultInfo{Name: "bob"}, need)
	assert.ErrorContains(t, err, "webhook down", "a failing authorizer is an error, not a refusal")
}

// TestMissingToRead: who may read a resource everywhere may read it in any
// namespace, asked once for all of them; a namespace tenant is checked in
// its namespace and gets nothing more (attack: bob, with rights in team-a
// only, reading kube-system).
func TestMissingToRead(t *testing.T) {
	cm := []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}}
	var asked []string
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = append(asked, a.GetUser().GetName()+" "+a.GetVerb()+" "+a.GetNamespace())
		switch {
		case a.GetUser().GetName() == "admin":
			return authorizer.DecisionAllow, "", nil
		case a.GetUser().GetName() == "bob" && a.GetNamespace() == "team-a":
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	ctx := context.Background()
	admin, bob := &user.DefaultInfo{Name: "admin"}, &user.DefaultInfo{Name: "bob"}

	missing, err := MissingToRead(ctx, authz, admin, cm, "team-a")
	require.NoError(t, err)
	assert.Empty(t, missing)
	assert.Equal(t, []string{"admin list ", "admin watch "}, asked, "asked for every namespace at once")

	asked = nil
	missing, err = MissingToRead(ctx, authz, bob, cm, "team-a")
	require.NoError(t, err)
	assert.Empty(t, missing)
	assert.Equal(t, []string{"bob list ", "bob watch ", "bob list team-a", "bob watch team-a"}, asked, "then in the namespace")

	missing, err = MissingToRead(ctx, authz, bob, cm, "kube-system")
	require.NoError(t, err)
	assert.Equal(t, RuleAccess(cm, "kube-system"), missing, "what it lacks is named in the namespace asked")

	missing, err = MissingToRead(ctx, authz, bob, cm, "")
	require.NoError(t, err)
	assert.Equal(t, RuleAccess(cm, ""), missing, "cluster-wide: asked once")
}
