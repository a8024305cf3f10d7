package commitrequest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// TestASaveCheckedLateCountsGroupsOnlyAsLongAsConfigured: a save that
// waited (for its GitTarget, its window) is checked with the groups
// recorded at its create only within --recorded-groups-max-age, the
// controller's setting, not the built-in default.
func TestASaveCheckedLateCountsGroupsOnlyAsLongAsConfigured(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	var asked [][]string // the groups of each check
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = append(asked, a.GetUser().GetGroups())
		if slices.Contains(a.GetUser().GetGroups(), "savers") {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	c := &Controller{cfg: Config{Clock: clk, Authorizer: authz, RecordedGroupsMaxAge: time.Hour}}
	a := &v1.Author{Username: "alice", Groups: []string{"savers"}, RecordedAt: &metav1.Time{Time: clk.Now()}}
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site"}}

	refusal, err := c.maySave(t.Context(), a, gt)
	require.NoError(t, err)
	assert.Empty(t, refusal, "fresh groups count")

	clk.Step(2 * time.Hour)
	refusal, err = c.maySave(t.Context(), a, gt)
	require.NoError(t, err)
	assert.Contains(t, refusal, `user "alice" may no longer save GitTarget team/site`)
	assert.Contains(t, refusal, "savers, no longer count")
	assert.NotContains(t, asked[len(asked)-1], "savers", "asked without the stale group")
}
