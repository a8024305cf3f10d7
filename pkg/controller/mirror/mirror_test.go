package mirror

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/watch"
)

func TestBranchAllowed(t *testing.T) {
	gp := &v1.GitProvider{Spec: v1.GitProviderSpec{AllowedBranches: []string{"main", "release/*"}}}
	assert.True(t, branchAllowed(gp, "main"))
	assert.True(t, branchAllowed(gp, "release/1.0"))
	assert.False(t, branchAllowed(gp, "release/1.0/hotfix"), "a glob does not cross '/'")
	assert.False(t, branchAllowed(gp, "dev"))
	assert.True(t, branchAllowed(&v1.GitProvider{Spec: v1.GitProviderSpec{AllowedBranches: []string{"*"}}}, "a/b"))
	assert.False(t, branchAllowed(&v1.GitProvider{Spec: v1.GitProviderSpec{AllowedBranches: []string{}}}, "main"), "an empty list allows nothing")
}

func TestProviderLending(t *testing.T) {
	kube := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{"tier": "apps"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
	c := &Controller{cfg: Config{Kube: kube}}
	allowed := func(kp *v1.KubeProvider, ns string) bool {
		ok, err := c.consumerAllowed(context.Background(), kp, ns)
		require.NoError(t, err)
		return ok
	}
	kp := &v1.KubeProvider{Spec: v1.KubeProviderSpec{SourceNamespaces: []string{"a"},
		ConsumerNamespaces: &v1.NamespaceSelection{From: v1.NamespacesFromNames, Names: []string{"team"}}}}
	assert.True(t, namespaceLent(kp, "a"))
	assert.False(t, namespaceLent(kp, "b"))
	assert.True(t, allowed(kp, "team"))
	assert.False(t, allowed(kp, "other"))
	kp.Spec.ConsumerNamespaces = &v1.NamespaceSelection{From: v1.NamespacesFromSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "apps"}}}
	assert.True(t, allowed(kp, "team"), "a selector matches the namespace's labels")
	assert.False(t, allowed(kp, "other"))
	_, err := c.consumerAllowed(context.Background(), kp, "missing")
	assert.Error(t, err, "a namespace that cannot be read is an error, not an admission")
	kp.Spec.SourceNamespaces = []string{"*"}
	kp.Spec.ConsumerNamespaces = &v1.NamespaceSelection{From: v1.NamespacesFromAll}
	assert.True(t, namespaceLent(kp, "b"))
	assert.True(t, allowed(kp, "other"))
}

func TestAsProblemKeepsReasons(t *testing.T) {
	p := asProblem(problemf("SecretNotFound", "Secret a/b does not exist"), "GitUnreachable")
	assert.Equal(t, "SecretNotFound", p.reason)
	p = asProblem(errors.New("dial tcp: refused"), "GitUnreachable")
	assert.Equal(t, "GitUnreachable", p.reason)
	assert.Equal(t, "dial tcp: refused", p.message)
}

func TestRuleStatus(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	s := ruleStatus(v1.WatchRuleStatus{}, 4, watch.Resolution{GVRs: []schema.GroupVersionResource{cm}})
	assert.Equal(t, int64(4), s.ObservedGeneration)
	assert.Equal(t, []string{"configmaps.v1"}, s.Resolved)
	assert.True(t, meta.IsStatusConditionTrue(s.Conditions, v1.ConditionReady))

	s = ruleStatus(s, 5, watch.Resolution{GVRs: []schema.GroupVersionResource{cm}, Unresolved: []string{"widgets.v1 is not served"}})
	c := meta.FindStatusCondition(s.Conditions, v1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, "Unresolved", c.Reason)
	assert.Contains(t, c.Message, "widgets.v1 is not served")
	assert.Contains(t, c.Message, "The rest is mirrored")
}
