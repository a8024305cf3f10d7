package claims

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/record"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/pkg/event"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	"reverser.dev/reverser/pkg/worker"
)

// TestAWithdrawnRightEndsTheHold (tenancy): the claim is held only while the
// user who authorised it may still get and patch the Kustomization; the
// refusal names what is missing.
func TestAWithdrawnRightEndsTheHold(t *testing.T) {
	allowed := map[string]bool{"get": true, "patch": true}
	c := &Controller{cfg: Config{Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "eve" && allowed[a.GetVerb()] && a.GetName() == "apps" && a.GetNamespace() == "flux-system" &&
			a.GetResource() == "kustomizations" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})}}
	cl := &claim{kind: &claimKind{group: "kustomize.toolkit.fluxcd.io", resource: "kustomizations"},
		Claim: &Claim{Target: applier.Ref{Namespace: "flux-system", Name: "apps"}, Status: &v1.ApplierClaimStatus{AuthorizedBy: &v1.Author{Username: "eve"}}}}
	refusal, err := c.authorized(context.Background(), cl)
	assert.NoError(t, err)
	assert.Empty(t, refusal, "eve may")

	allowed["patch"] = false
	refusal, err = c.authorized(context.Background(), cl)
	assert.NoError(t, err)
	assert.Contains(t, refusal, `user "eve" may not hand this applier to Reverser: it lacks patch kustomizations.kustomize.toolkit.fluxcd.io flux-system/apps`)

	cl.Status.AuthorizedBy = nil
	refusal, _ = c.authorized(context.Background(), cl)
	assert.Contains(t, refusal, "nobody is recorded as having authorised this claim")
}

func TestReasonFor(t *testing.T) {
	gr := schema.GroupResource{Group: "kustomize.toolkit.fluxcd.io", Resource: "kustomizations"}
	for err, want := range map[error]string{
		&meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: gr.Group, Kind: "Kustomization"}}: "CRDNotInstalled",
		apierrors.NewNotFound(gr, "apps"):                                    "ApplierNotFound",
		apierrors.NewForbidden(gr, "apps", errors.New("no")):                 "Forbidden",
		fmt.Errorf("taking over: %w", applier.ErrNotGitRepository):           "UnsupportedSource",
		errors.New("the Kustomization a/b is held by FluxClaim x/y already"): "HeldByAnotherClaim",
		errors.New("boom"): "ApplierFailing",
	} {
		assert.Equal(t, want, reasonFor(err), "%v", err)
	}
}

// TestOnlyTheAppliersFailureMakesAClaimFailing: a converge the applier
// failed makes Ready=False ApplierFailing, naming its message; one that
// yielded or fell short, and is asked again, leaves the claim Holding.
func TestOnlyTheAppliersFailureMakesAClaimFailing(t *testing.T) {
	ops := NewOperations()
	c := &Controller{cfg: Config{Operations: ops}}
	cl := &claim{kind: &claimKind{kind: v1.ApplierKindFluxClaim, what: "Kustomization"}, Claim: &Claim{Kind: v1.ApplierKindFluxClaim,
		Meta: &metav1.ObjectMeta{Namespace: "team", Name: "apps"}, Target: applier.Ref{Namespace: "flux-system", Name: "apps"}}}
	key := Key(v1.ApplierKindFluxClaim, "team", "apps")
	assert.Equal(t, "Holding", c.holding(cl).Reason, "nothing reported yet")
	ops.Record(key, worker.ApplyReport{Reason: "CatchUp", Note: "yielded to a live edit"})
	assert.Equal(t, "Holding", c.holding(cl).Reason)
	ops.Record(key, worker.ApplyReport{Reason: "CatchUp", Head: "main@sha1:abc", Failure: "kustomize build failed"})
	ready := c.holding(cl)
	assert.Equal(t, "ApplierFailing", ready.Reason)
	assert.Contains(t, ready.Message, "kustomize build failed")
	ops.Record(Key(v1.ApplierKindArgoCDClaim, "team", "apps"), worker.ApplyReport{Failure: "another kind's claim of the same name"})
	ops.Record(key, worker.ApplyReport{Reason: "Repair"})
	assert.Equal(t, "Holding", c.holding(cl).Reason, "an ArgoCDClaim of the same name is another claim")
}

// TestASourceIsHeldOnlyWhereTheAuthorMayPatchIt (#27, finding 1): the
// GitRepository a Kustomization's claim would hold is asked about for the
// claim's author, by name; the refusal names it and why it matters.
func TestASourceIsHeldOnlyWhereTheAuthorMayPatchIt(t *testing.T) {
	var asked []string
	c := &Controller{cfg: Config{Authorizer: authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = append(asked, fmt.Sprintf("%s %s %s.%s %s/%s", a.GetUser().GetName(), a.GetVerb(), a.GetResource(), a.GetAPIGroup(), a.GetNamespace(), a.GetName()))
		if a.GetNamespace() == "team" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})}}
	cl := &claim{kind: &claimKind{what: "Kustomization"}, Claim: &Claim{Status: &v1.ApplierClaimStatus{AuthorizedBy: &v1.Author{Username: "bob"}}}}
	may := c.mayHold(cl)
	repos := v1.FluxGitRepositories.GroupResource()
	assert.NoError(t, may(context.Background(), repos, applier.Ref{Namespace: "team", Name: "mine"}))
	err := may(context.Background(), repos, applier.Ref{Namespace: "flux-system", Name: "platform"})
	var refused *notAuthorized
	assert.ErrorAs(t, err, &refused)
	assert.ErrorContains(t, err, `user "bob" may not hand this applier to Reverser: it lacks get gitrepositories.source.toolkit.fluxcd.io flux-system/platform, patch gitrepositories.source.toolkit.fluxcd.io flux-system/platform`)
	assert.Contains(t, asked, "bob patch gitrepositories.source.toolkit.fluxcd.io flux-system/platform")

	cl.Status.AuthorizedBy = nil
	assert.ErrorAs(t, may(context.Background(), repos, applier.Ref{Namespace: "team", Name: "mine"}), &refused)
}

// TestAHoldsStartAndEndAreEvents (#29): `kubectl describe fluxclaim` shows
// when Reverser began and stopped holding the Kustomization, and why Ready
// changed, once each however often the same status is reconciled.
func TestAHoldsStartAndEndAreEvents(t *testing.T) {
	fc := &v1.FluxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "apps"}}
	api := fake.NewSimpleClientset(fc).ReverserV1alpha1()
	rec := record.NewFakeRecorder(10)
	c := &Controller{cfg: Config{Operations: NewOperations(), Events: event.New(rec)}, api: api}
	read := func() *claim {
		got, err := api.FluxClaims("team").Get(t.Context(), "apps", metav1.GetOptions{})
		require.NoError(t, err)
		return &claim{kind: &claimKind{kind: v1.ApplierKindFluxClaim, what: "Kustomization"}, Claim: &Claim{Kind: v1.ApplierKindFluxClaim,
			Meta: &got.ObjectMeta, Status: &got.Status, Target: applier.Ref{Namespace: "flux-system", Name: "apps"}, obj: got}}
	}

	cl := read()
	require.NoError(t, c.writeStatus(t.Context(), cl, c.holding(cl), true))
	assert.Equal(t, []string{
		"Normal Held Reverser holds the schedule of Kustomization flux-system/apps: it applies when Reverser asks.",
	}, event.Drain(rec))
	cl = read()
	require.NoError(t, c.writeStatus(t.Context(), cl, c.holding(cl), true))
	assert.Empty(t, event.Drain(rec), "an unchanged status records nothing")

	cl = read()
	notNamed := &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "NotNamed", Message: "No GitTarget names this claim."}
	require.NoError(t, c.writeStatus(t.Context(), cl, notNamed, false))
	assert.Equal(t, []string{"Warning Released Reverser no longer holds the applier (NotNamed): No GitTarget names this claim."}, event.Drain(rec))

	cl = read()
	notNamed.Message = "Still no GitTarget names this claim."
	require.NoError(t, c.writeStatus(t.Context(), cl, notNamed, false))
	assert.Empty(t, event.Drain(rec), "a new message, same reason: one Event per change of state")
	cl = read()
	forbidden := &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Forbidden", Message: "Reverser may not patch it."}
	require.NoError(t, c.writeStatus(t.Context(), cl, forbidden, false))
	assert.Equal(t, []string{"Warning Forbidden Reverser may not patch it."}, event.Drain(rec))
	assert.True(t, meta.IsStatusConditionTrue(read().Status.Conditions, v1.ConditionStalled), "a person must act: kstatus Failed")

	cl = read()
	require.NoError(t, c.writeStatus(t.Context(), cl, notNamed, false))
	assert.Nil(t, meta.FindStatusCondition(read().Status.Conditions, v1.ConditionStalled), "waiting for a GitTarget to name it")
}

// TestAConvergeUnderWayIsReconciling (#29): while the applier works on the
// converge Reverser sent, the claim is Reconciling (kstatus InProgress);
// once it reports, or when the claim no longer holds, it is not.
func TestAConvergeUnderWayIsReconciling(t *testing.T) {
	fc := &v1.FluxClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "apps"}}
	api := fake.NewSimpleClientset(fc).ReverserV1alpha1()
	ops := NewOperations()
	c := &Controller{cfg: Config{Operations: ops, Events: event.New(record.NewFakeRecorder(10))}, api: api}
	read := func() *claim {
		got, err := api.FluxClaims("team").Get(t.Context(), "apps", metav1.GetOptions{})
		require.NoError(t, err)
		return &claim{kind: &claimKind{kind: v1.ApplierKindFluxClaim, what: "Kustomization"}, Claim: &Claim{Kind: v1.ApplierKindFluxClaim,
			Meta: &got.ObjectMeta, Status: &got.Status, Target: applier.Ref{Namespace: "flux-system", Name: "apps"}, obj: got}}
	}
	reconciling := func() *metav1.Condition {
		return meta.FindStatusCondition(read().Status.Conditions, v1.ConditionReconciling)
	}
	key := Key(v1.ApplierKindFluxClaim, "team", "apps")
	started := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

	cl := read()
	require.NoError(t, c.writeStatus(t.Context(), cl, c.holding(cl), true))
	assert.Nil(t, reconciling(), "nothing sent yet")

	ops.Record(key, worker.ApplyReport{Reason: "CatchUp", Head: "main@sha1:abc", Started: started})
	cl = read()
	require.NoError(t, c.writeStatus(t.Context(), cl, c.holding(cl), true))
	r := reconciling()
	require.NotNil(t, r)
	assert.Equal(t, metav1.ConditionTrue, r.Status)
	assert.Equal(t, "Converging", r.Reason)
	assert.Equal(t, "Reverser asked the Kustomization to apply main@sha1:abc (CatchUp) and waits for it to report.", r.Message)

	ops.Record(key, worker.ApplyReport{Reason: "CatchUp", Head: "main@sha1:abc", Started: started, Finished: started.Add(time.Second)})
	cl = read()
	require.NoError(t, c.writeStatus(t.Context(), cl, c.holding(cl), true))
	assert.Nil(t, reconciling(), "the applier reported")

	ops.Record(key, worker.ApplyReport{Reason: "Repair", Head: "main@sha1:def", Started: started.Add(time.Minute)})
	cl = read()
	notNamed := &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "NotNamed", Message: "No GitTarget names this claim."}
	require.NoError(t, c.writeStatus(t.Context(), cl, notNamed, false))
	assert.Nil(t, reconciling(), "a claim that does not hold waits for nothing")
}
