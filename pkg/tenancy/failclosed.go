package tenancy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// FailClosed is the controller's authorizer for its re-checks (rules,
// claims, GitProviders' Secrets, saves): while SubjectAccessReviews fail,
// a check is an error, which leaves things as they are, but once they have
// failed without a break for Grace, every check is a refusal, so a right
// withdrawn during an outage of the authorizer stops within Grace plus a
// resync (#27, finding 8). A success ends the outage.
//
// mu guards failingSince; Next is called without it.
type FailClosed struct {
	Next  authorizer.Authorizer
	Grace time.Duration
	Clock clock.PassiveClock

	mu           sync.Mutex
	failingSince time.Time
}

var _ authorizer.Authorizer = &FailClosed{}

// Authorize asks Next, turning its errors into refusals once the outage
// has lasted Grace.
func (f *FailClosed) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	decision, reason, err := f.Next.Authorize(ctx, a)
	now := f.Clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil || decision == authorizer.DecisionAllow {
		f.failingSince = time.Time{}
		return decision, reason, err
	}
	if f.failingSince.IsZero() {
		f.failingSince = now
	}
	if since := now.Sub(f.failingSince); since >= f.Grace {
		klog.FromContext(ctx).Error(err, "SubjectAccessReviews have failed for longer than the grace; the check counts as a refusal",
			"failingFor", since.Round(time.Second), "user", a.GetUser().GetName())
		return authorizer.DecisionDeny, fmt.Sprintf("authorization has failed for %s: refused until it answers", since.Round(time.Second)), nil
	}
	return decision, reason, err
}

// ConditionsAwareAuthorize is Authorize as a decision.
func (f *FailClosed) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(f.Authorize(ctx, a))
}

// EvaluateConditions supports no conditions, and refuses.
func (f *FailClosed) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
