package tenancy

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func consumers(from v1.NamespacesFrom, names ...string) v1.CommitRequestGrant {
	return v1.CommitRequestGrant{ConsumerNamespaces: &v1.NamespaceSelection{From: from, Names: names}}
}

func selector(match map[string]string) v1.CommitRequestGrant {
	return v1.CommitRequestGrant{ConsumerNamespaces: &v1.NamespaceSelection{
		From: v1.NamespacesFromSelector, Selector: &metav1.LabelSelector{MatchLabels: match}}}
}

func TestAdmitsConsumer(t *testing.T) {
	nsLabels := func(_ context.Context, name string) (labels.Set, error) {
		return map[string]labels.Set{"team-b": {"team": "b"}}[name], nil
	}
	cases := []struct {
		name      string
		grants    []v1.CommitRequestGrant
		requestNS string
		want      bool
	}{
		{"same admits the target's namespace", []v1.CommitRequestGrant{consumers(v1.NamespacesFromSame)}, "demo", true},
		{"same refuses another", []v1.CommitRequestGrant{consumers(v1.NamespacesFromSame)}, "team-b", false},
		{"names admits a listed one", []v1.CommitRequestGrant{consumers(v1.NamespacesFromNames, "x", "team-b")}, "team-b", true},
		{"names refuses an unlisted one", []v1.CommitRequestGrant{consumers(v1.NamespacesFromNames, "x")}, "team-b", false},
		{"all admits anyone", []v1.CommitRequestGrant{consumers(v1.NamespacesFromAll)}, "anything", true},
		{"selector matches labels", []v1.CommitRequestGrant{selector(map[string]string{"team": "b"})}, "team-b", true},
		{"selector refuses other labels", []v1.CommitRequestGrant{selector(map[string]string{"team": "c"})}, "team-b", false},
		{"source grants never admit control-cluster requests", []v1.CommitRequestGrant{{SourceNamespaces: []string{"*"}}}, "demo", false},
		{"no grants admit nobody", nil, "demo", false},
		{"any grant suffices", []v1.CommitRequestGrant{consumers(v1.NamespacesFromNames, "x"), consumers(v1.NamespacesFromSame)}, "demo", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := AdmitsConsumer(context.Background(), tc.grants, "demo", tc.requestNS, nsLabels)
			require.NoError(t, err)
			assert.Equal(t, tc.want, d.Allowed)
			if !tc.want {
				assert.Contains(t, d.Reason, `from namespace "`+tc.requestNS+`"`)
			}
		})
	}
}

func TestAdmitsConsumerWithoutNamespaceLabels(t *testing.T) {
	d, err := AdmitsConsumer(context.Background(), []v1.CommitRequestGrant{selector(map[string]string{"a": "b"})}, "demo", "x", nil)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Contains(t, d.Reason, "cannot be checked without a kube-apiserver")
}

func TestAdmitsConsumerLabelError(t *testing.T) {
	failing := func(context.Context, string) (labels.Set, error) { return nil, errors.New("boom") }
	_, err := AdmitsConsumer(context.Background(), []v1.CommitRequestGrant{selector(map[string]string{"a": "b"})}, "demo", "x", failing)
	assert.ErrorContains(t, err, "boom")
}
