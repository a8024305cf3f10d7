package admit

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"reverser.dev/reverser/pkg/apis/reverser"
)

type fakeAuthz struct {
	decision authorizer.Decision
	err      error
	asked    authorizer.Attributes
}

func (f *fakeAuthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.asked = a
	return f.decision, "", f.err
}

func (f *fakeAuthz) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(f.Authorize(ctx, a))
}

func (f *fakeAuthz) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func attrs(requestNS string) admission.Attributes {
	cr := &reverser.CommitRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "save", Namespace: requestNS},
		Spec:       reverser.CommitRequestSpec{GitTargetRef: reverser.ObjectReference{Name: "site", Namespace: "demo"}},
	}
	return admission.NewAttributesRecord(cr, nil, reverser.Kind("CommitRequest").WithVersion(""), requestNS, "save",
		reverser.Resource("commitrequests").WithVersion(""), "", admission.Create, &metav1.CreateOptions{}, false,
		&user.DefaultInfo{Name: "bob", Groups: []string{"devs"}})
}

func TestSave(t *testing.T) {
	target := &reverser.GitTarget{Spec: reverser.GitTargetSpec{AllowedCommitRequests: []reverser.CommitRequestGrant{
		{ConsumerNamespaces: &reverser.NamespaceSelection{From: reverser.NamespacesFromSame}}}}}
	found := func(context.Context, string, string) (*reverser.GitTarget, error) { return target, nil }
	missing := func(context.Context, string, string) (*reverser.GitTarget, error) {
		return nil, apierrors.NewNotFound(reverser.Resource("gittargets"), "site")
	}
	cases := []struct {
		name      string
		authz     *fakeAuthz
		get       GitTargetGetter
		requestNS string
		check     func(t *testing.T, err error)
	}{
		{"allowed and admitted", &fakeAuthz{decision: authorizer.DecisionAllow}, found, "demo",
			func(t *testing.T, err error) { assert.NoError(t, err) }},
		{"allowed, target missing", &fakeAuthz{decision: authorizer.DecisionAllow}, missing, "demo",
			func(t *testing.T, err error) { assert.NoError(t, err) }},
		{"no save permission", &fakeAuthz{decision: authorizer.DecisionNoOpinion}, found, "demo", func(t *testing.T, err error) {
			require.True(t, apierrors.IsForbidden(err), "%v", err)
			assert.ErrorContains(t, err, `user "bob" may not save GitTarget demo/site`)
		}},
		{"authorizer failed", &fakeAuthz{decision: authorizer.DecisionNoOpinion, err: errors.New("SAR timed out")}, found, "demo",
			func(t *testing.T, err error) {
				require.True(t, apierrors.IsInternalError(err), "%v", err)
				assert.ErrorContains(t, err, "SAR timed out")
			}},
		{"grant refuses the namespace", &fakeAuthz{decision: authorizer.DecisionAllow}, found, "team-b", func(t *testing.T, err error) {
			require.True(t, apierrors.IsForbidden(err), "%v", err)
			assert.ErrorContains(t, err, `from namespace "team-b"`)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSave(tc.authz, nil)
			s.SetGitTargetGetter(tc.get)
			tc.check(t, s.Validate(context.Background(), attrs(tc.requestNS), nil))
			asked := tc.authz.asked
			require.NotNil(t, asked)
			assert.Equal(t, []string{"save", "reverser.dev", "gittargets", "demo", "site", "bob"},
				[]string{asked.GetVerb(), asked.GetAPIGroup(), asked.GetResource(), asked.GetNamespace(), asked.GetName(), asked.GetUser().GetName()})
		})
	}
}

func TestSaveIgnoresOtherRequests(t *testing.T) {
	authz := &fakeAuthz{decision: authorizer.DecisionDeny}
	s := NewSave(authz, nil)
	gt := admission.NewAttributesRecord(&reverser.GitTarget{}, nil, reverser.Kind("GitTarget").WithVersion(""), "demo", "site",
		reverser.Resource("gittargets").WithVersion(""), "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "bob"})
	assert.NoError(t, s.Validate(context.Background(), gt, nil))
	assert.Nil(t, authz.asked, "only CommitRequest creates are checked")
}
