package tenancy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testclock "k8s.io/utils/clock/testing"
)

// reviews is a fake API server's SubjectAccessReviews: answer decides, and
// asked records every review sent.
type reviews struct {
	asked  []authorizationv1.SubjectAccessReviewSpec
	answer func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error)
}

func (r *reviews) reviewer(clk *testclock.FakeClock) *Reviewer {
	kube := kubefake.NewClientset()
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		r.asked = append(r.asked, sar.Spec)
		status, err := r.answer(sar.Spec)
		sar.Status = status
		return true, sar, err
	})
	rv := NewReviewer(kube.AuthorizationV1().SubjectAccessReviews(), 10*time.Second, 5*time.Second, 100, clk)
	rv.Backoff = wait.Backoff{Duration: time.Millisecond, Steps: 3}
	return rv
}

var alice = &user.DefaultInfo{Name: "alice", UID: "uid-alice", Groups: []string{"team", "system:authenticated"},
	Extra: map[string][]string{"scopes": {"a"}}}

// TestAReviewAsksWhatTheAttributesSayAndCachesTheAnswer: the review names
// the user, groups, uid, extra and the resource (or path) asked about;
// an allowed answer stands for AllowTTL, a refusal for DenyTTL, on the
// clock, then the API server is asked again.
func TestAReviewAsksWhatTheAttributesSayAndCachesTheAnswer(t *testing.T) {
	allowed := true
	r := &reviews{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Denied: !allowed, Reason: "rbac says so"}, nil
	}}
	clk := testclock.NewFakeClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	rv := r.reviewer(clk)
	ctx := context.Background()
	list := authorizer.AttributesRecord{User: alice, Verb: "list", Namespace: "team", APIGroup: "apps", APIVersion: "v1",
		Resource: "deployments", Subresource: "scale", Name: "web", ResourceRequest: true}

	d, reason, err := rv.Authorize(ctx, list)
	require.NoError(t, err)
	assert.Equal(t, authorizer.DecisionAllow, d)
	assert.Equal(t, "rbac says so", reason)
	require.Len(t, r.asked, 1)
	assert.Equal(t, authorizationv1.SubjectAccessReviewSpec{User: "alice", UID: "uid-alice", Groups: alice.Groups,
		Extra:              map[string]authorizationv1.ExtraValue{"scopes": {"a"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "team", Verb: "list", Group: "apps", Version: "v1", Resource: "deployments", Subresource: "scale", Name: "web"},
	}, r.asked[0])

	allowed = false
	clk.Step(10 * time.Second)
	d, _, _ = rv.Authorize(ctx, list)
	assert.Equal(t, authorizer.DecisionAllow, d, "the allowed answer stands for AllowTTL")
	assert.Len(t, r.asked, 1)
	clk.Step(time.Millisecond)
	d, _, _ = rv.Authorize(ctx, list)
	assert.Equal(t, authorizer.DecisionDeny, d, "then the API server is asked again: the right was withdrawn")
	assert.Len(t, r.asked, 2)

	allowed = true
	clk.Step(5 * time.Second)
	d, _, _ = rv.Authorize(ctx, list)
	assert.Equal(t, authorizer.DecisionDeny, d, "a refusal stands for DenyTTL")
	clk.Step(time.Millisecond)
	d, _, _ = rv.Authorize(ctx, list)
	assert.Equal(t, authorizer.DecisionAllow, d)
	assert.Len(t, r.asked, 3)

	// Another user is another question.
	other := list
	other.User = &user.DefaultInfo{Name: "bob"}
	_, _, _ = rv.Authorize(ctx, other)
	assert.Len(t, r.asked, 4)
	assert.Equal(t, "bob", r.asked[3].User)

	path := authorizer.AttributesRecord{User: alice, Verb: "get", Path: "/healthz"}
	_, _, _ = rv.Authorize(ctx, path)
	require.Len(t, r.asked, 5)
	assert.Equal(t, &authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}, r.asked[4].NonResourceAttributes)
	assert.Nil(t, r.asked[4].ResourceAttributes)
}

// TestAReviewWithoutAnOpinionIsNoOpinion: neither allowed nor denied (no
// authorizer had an opinion) is NoOpinion, which no caller counts as a
// right.
func TestAReviewWithoutAnOpinionIsNoOpinion(t *testing.T) {
	r := &reviews{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		return authorizationv1.SubjectAccessReviewStatus{}, nil
	}}
	d, _, err := r.reviewer(testclock.NewFakeClock(time.Now())).Authorize(context.Background(),
		authorizer.AttributesRecord{User: alice, Verb: "get", Resource: "secrets", ResourceRequest: true})
	require.NoError(t, err)
	assert.Equal(t, authorizer.DecisionNoOpinion, d)
}

// TestAReviewRetriesWhatMayPassAndNotWhatIsFinal: a 5xx or 429 is asked
// again up to the backoff's steps, then is an error, which is not cached;
// a 4xx is an error at once.
func TestAReviewRetriesWhatMayPassAndNotWhatIsFinal(t *testing.T) {
	failures := 2
	var final error
	r := &reviews{answer: func(authorizationv1.SubjectAccessReviewSpec) (authorizationv1.SubjectAccessReviewStatus, error) {
		if final != nil {
			return authorizationv1.SubjectAccessReviewStatus{}, final
		}
		if failures > 0 {
			failures--
			return authorizationv1.SubjectAccessReviewStatus{}, apierrors.NewServiceUnavailable("etcd is away")
		}
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true}, nil
	}}
	rv := r.reviewer(testclock.NewFakeClock(time.Now()))
	ctx := context.Background()
	get := authorizer.AttributesRecord{User: alice, Verb: "get", Resource: "secrets", ResourceRequest: true}
	d, _, err := rv.Authorize(ctx, get)
	require.NoError(t, err)
	assert.Equal(t, authorizer.DecisionAllow, d, "two failures that may pass, then an answer")
	assert.Len(t, r.asked, 3)

	failures = 10
	list := get
	list.Verb = "list"
	_, _, err = rv.Authorize(ctx, list)
	assert.ErrorContains(t, err, "etcd is away", "the backoff's steps spent")
	assert.Len(t, r.asked, 6)
	failures = 0
	d, _, err = rv.Authorize(ctx, list)
	require.NoError(t, err)
	assert.Equal(t, authorizer.DecisionAllow, d, "a failure is not cached")

	final = apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, "", nil)
	watch := get
	watch.Verb = "watch"
	asked := len(r.asked)
	_, _, err = rv.Authorize(ctx, watch)
	assert.True(t, apierrors.IsForbidden(err), "a 4xx is final: %v", err)
	assert.Len(t, r.asked, asked+1, "asked once")
}
