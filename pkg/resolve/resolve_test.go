package resolve

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func served() Served {
	rw := []string{"get", "list", "watch", "create", "update", "delete"}
	group := func(name, pref string) *metav1.APIGroup {
		return &metav1.APIGroup{Name: name, PreferredVersion: metav1.GroupVersionForDiscovery{Version: pref}}
	}
	return NewServed(
		[]*metav1.APIGroup{group("", "v1"), group("apps", "v1"), group("rbac.authorization.k8s.io", "v1"), group("reverser.dev", "v1alpha1")},
		[]*metav1.APIResourceList{
			{GroupVersion: "v1", APIResources: []metav1.APIResource{
				{Name: "configmaps", Namespaced: true, Verbs: rw},
				{Name: "secrets", Namespaced: true, Verbs: rw},
				{Name: "events", Namespaced: true, Verbs: rw},
				{Name: "namespaces", Namespaced: false, Verbs: rw},
				{Name: "pods/log", Namespaced: true, Verbs: []string{"get"}},
				{Name: "bindings", Namespaced: true, Verbs: []string{"create"}},
			}},
			{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{{Name: "deployments", Namespaced: true, Verbs: rw}}},
			{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{
				{Name: "clusterroles", Namespaced: false, Verbs: rw}, {Name: "roles", Namespaced: true, Verbs: rw}}},
			{GroupVersion: "reverser.dev/v1alpha1", APIResources: []metav1.APIResource{{Name: "commitrequests", Namespaced: true, Verbs: rw}}},
		})
}

func gvr(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}

func TestResolve(t *testing.T) {
	cases := []struct {
		name       string
		rules      []v1.ResourceRule
		namespaced bool
		want       []schema.GroupVersionResource
		unresolved []string
	}{
		{"named core resource", []v1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}, true,
			[]schema.GroupVersionResource{gvr("", "v1", "configmaps")}, nil},
		{"wildcards skip runtime kinds, our own group and wrong scope", []v1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}}}, true,
			[]schema.GroupVersionResource{gvr("", "v1", "configmaps"), gvr("apps", "v1", "deployments"), gvr("rbac.authorization.k8s.io", "v1", "roles"), gvr("", "v1", "secrets")}, nil},
		{"cluster-scoped wildcard", []v1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}}}, false,
			[]schema.GroupVersionResource{gvr("rbac.authorization.k8s.io", "v1", "clusterroles"), gvr("", "v1", "namespaces")}, nil},
		{"unknown names are reported", []v1.ResourceRule{
			{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}},
			{APIGroups: []string{"apps"}, APIVersions: []string{"v1beta1"}, Resources: []string{"deployments"}},
			{APIGroups: []string{""}, Resources: []string{"nothing", "events", "namespaces"}},
		}, true, nil, []string{
			`apps/v1beta1 is not served`,
			`events.v1 is runtime state and never mirrored`,
			`group "example.com" is not served`,
			`namespaces.v1 is cluster-scoped: use a ClusterWatchRule`,
			`nothing.v1 is not served`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Rules(tc.rules, served(), tc.namespaced)
			assert.Equal(t, tc.want, got.GVRs)
			assert.Equal(t, tc.unresolved, got.Unresolved)
		})
	}
}

func TestResolveCollectsCredentialFields(t *testing.T) {
	rules := []v1.ResourceRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, CredentialFields: []v1.CredentialField{{Path: "data.password"}}},
		{APIGroups: []string{"*"}, Resources: []string{"*"}, CredentialFields: []v1.CredentialField{{Path: "spec.token"}}},
	}
	got := Rules(rules, served(), true)
	assert.Equal(t, []v1.CredentialField{{Path: "data.password"}, {Path: "spec.token"}}, got.Credentials[gvr("", "v1", "configmaps")])
	assert.Equal(t, []v1.CredentialField{{Path: "spec.token"}}, got.Credentials[gvr("apps", "v1", "deployments")])
}
