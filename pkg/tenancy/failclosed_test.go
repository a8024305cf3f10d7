package tenancy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	testclock "k8s.io/utils/clock/testing"
)

// TestAuthorizationFailsClosedAfterTheGrace (#27, finding 8): while
// SubjectAccessReviews fail, a check is an error (nothing changes) for the
// grace, then a refusal; an answer ends the outage.
func TestAuthorizationFailsClosedAfterTheGrace(t *testing.T) {
	down := true
	next := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		if down {
			return authorizer.DecisionNoOpinion, "", errors.New("connection refused")
		}
		return authorizer.DecisionAllow, "", nil
	})
	clk := testclock.NewFakePassiveClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	f := &FailClosed{Next: next, Grace: 5 * time.Minute, Clock: clk}
	ask := func() []Access {
		missing, err := Missing(context.Background(), f, &user.DefaultInfo{Name: "alice"}, []Access{{Verb: "list", Resource: "configmaps", Namespace: "team"}})
		if err != nil {
			return nil
		}
		return missing
	}
	_, err := Missing(context.Background(), f, &user.DefaultInfo{Name: "alice"}, []Access{{Verb: "list", Resource: "configmaps", Namespace: "team"}})
	require.Error(t, err, "at first an outage is an error: nothing is withdrawn on a blip")
	clk.SetTime(clk.Now().Add(5*time.Minute - time.Second))
	assert.Nil(t, ask(), "still within the grace")
	clk.SetTime(clk.Now().Add(time.Second))
	assert.Len(t, ask(), 1, "past the grace: refused")

	down = false
	assert.Empty(t, ask(), "it answers again")
	down = true
	_, err = Missing(context.Background(), f, &user.DefaultInfo{Name: "alice"}, []Access{{Verb: "list", Resource: "configmaps", Namespace: "team"}})
	assert.Error(t, err, "a new outage starts a new grace")
}
