package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// Reviewer answers the controller's re-checks with SubjectAccessReviews,
// caching each answer for a while so that a resync of many objects asks
// once per question. It is what k8s.io/apiserver's delegating authorizer
// does, written here: that one links the API server's webhook machinery
// (CEL, gRPC, OpenTelemetry) into the controller, about a fifth of its
// size. The cache is safe for concurrent use; Authorize blocks on the API
// server, retrying transient failures with Backoff.
type Reviewer struct {
	Reviews authorizationclient.SubjectAccessReviewInterface
	// AllowTTL and DenyTTL are how long an allowed and a refused answer
	// stand: well under a resync, so a withdrawn right stops within one.
	AllowTTL, DenyTTL time.Duration
	// Backoff spaces the retries of a review that failed in a way that may
	// pass (no answer, 429, 5xx); zero is k8s.io/apiserver's default.
	Backoff wait.Backoff

	answers *cache.LRUExpireCache
}

// answer is a cached decision.
type answer struct {
	decision authorizer.Decision
	reason   string
}

// NewReviewer returns a Reviewer that keeps up to size answers, timed by
// clk.
func NewReviewer(reviews authorizationclient.SubjectAccessReviewInterface, allowTTL, denyTTL time.Duration, size int,
	clk clock.Clock) *Reviewer {
	return &Reviewer{Reviews: reviews, AllowTTL: allowTTL, DenyTTL: denyTTL,
		Backoff: wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
		answers: cache.NewLRUExpireCacheWithClock(size, clk)}
}

// Authorize asks whether the user of a may do what a says: Allow, Deny, or
// NoOpinion when the API server's authorizers have none.
func (r *Reviewer) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	spec := reviewSpec(a)
	raw, err := json.Marshal(spec)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", fmt.Errorf("writing a SubjectAccessReview: %w", err)
	}
	key := string(raw)
	if v, ok := r.answers.Get(key); ok {
		got := v.(answer)
		return got.decision, got.reason, nil
	}
	var review *authorizationv1.SubjectAccessReview
	err = retry.OnError(r.Backoff, mayPass, func() error {
		var err error
		review, err = r.Reviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return authorizer.DecisionNoOpinion, "", fmt.Errorf("asking a SubjectAccessReview: %w", err)
	}
	got := answer{decision: authorizer.DecisionNoOpinion, reason: review.Status.Reason}
	ttl := r.DenyTTL
	switch {
	case review.Status.Allowed:
		got.decision, ttl = authorizer.DecisionAllow, r.AllowTTL
	case review.Status.Denied:
		got.decision = authorizer.DecisionDeny
	}
	r.answers.Add(key, got, ttl)
	return got.decision, got.reason, nil
}

// mayPass says whether a failed review is worth asking again: no answer,
// or an answer that says "later" (429, 5xx); a 4xx is final.
func mayPass(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		code := status.Status().Code
		return code == 429 || code >= 500
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// reviewSpec is the SubjectAccessReview of a.
func reviewSpec(a authorizer.Attributes) authorizationv1.SubjectAccessReviewSpec {
	var spec authorizationv1.SubjectAccessReviewSpec
	if u := a.GetUser(); u != nil {
		spec.User, spec.UID, spec.Groups = u.GetName(), u.GetUID(), u.GetGroups()
		if extra := u.GetExtra(); len(extra) > 0 {
			spec.Extra = make(map[string]authorizationv1.ExtraValue, len(extra))
			for k, v := range extra {
				spec.Extra[k] = v
			}
		}
	}
	if a.IsResourceRequest() {
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: a.GetNamespace(), Verb: a.GetVerb(),
			Group: a.GetAPIGroup(), Version: a.GetAPIVersion(), Resource: a.GetResource(), Subresource: a.GetSubresource(),
			Name: a.GetName()}
	} else {
		spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.GetPath(), Verb: a.GetVerb()}
	}
	return spec
}
