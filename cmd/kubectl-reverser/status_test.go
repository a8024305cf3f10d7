package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func TestStatusShowsEachClaim(t *testing.T) {
	now := metav1.NewTime(time.Now().Add(-time.Minute))
	gt := v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site"},
		Spec:   v1.GitTargetSpec{Branch: "main", ApplierRef: &v1.ApplierReference{Kind: v1.ApplierKindFluxClaim, Name: "apps"}},
		Status: v1.GitTargetStatus{LastPush: &v1.CommitRef{SHA: "bbbbbbbbbbbbbbbb", Time: &now}}}
	claim := func(applied string) claimRow {
		return claimRow{kind: v1.ApplierKindFluxClaim, namespace: "team", name: "apps", applier: "Kustomization flux-system/apps",
			status: v1.ApplierClaimStatus{LastAppliedRevision: "main@sha1:" + applied,
				Conditions: []metav1.Condition{{Type: "Held", Status: metav1.ConditionTrue},
					{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Holding", Message: "held"}},
				Operation: &v1.ApplierOperation{Reason: v1.ConvergeForeignCommit, StartedAt: &now, FinishedAt: &now}}}
	}
	var out bytes.Buffer
	require.NoError(t, printStatus(&out, []v1.GitTarget{gt}, nil, []claimRow{claim("aaaaaaaaaaaaaaaa")}))
	assert.Contains(t, out.String(), "APPLIER CLAIMS")
	assert.Regexp(t, `FluxClaim team/apps\s+Kustomization flux-system/apps\s+True\s+aaaaaaa\s+yes: tip bbbbbbb pushed 1m0s ago\s+ForeignCommit, done 1m0s ago\s+Holding: held`,
		out.String())

	out.Reset()
	require.NoError(t, printStatus(&out, []v1.GitTarget{gt}, nil, []claimRow{claim("bbbbbbbbbbbbbbbb")}))
	assert.Regexp(t, `bbbbbbb\s+no\s+ForeignCommit`, out.String(), "at the tip")

	argo := claim("aaaaaaaaaaaaaaaa")
	argo.kind, argo.applier = v1.ApplierKindArgoCDClaim, "Application argocd/apps"
	out.Reset()
	require.NoError(t, printStatus(&out, []v1.GitTarget{gt}, nil, []claimRow{argo}))
	assert.Regexp(t, `ArgoCDClaim team/apps\s+Application argocd/apps\s+True\s+aaaaaaa\s+-\s+`, out.String(),
		"the GitTarget names a FluxClaim of that name, not this one")
}

// TestReportWithoutAuthor: a save on a source cluster that sends no audit
// names nobody, and the report says so rather than failing.
func TestReportWithoutAuthor(t *testing.T) {
	cr := &v1.CommitRequest{Status: v1.CommitRequestStatus{Commit: "0123456789abcdef", Branch: "main",
		Conditions: []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonCommitted, Message: "Saved."}}}}
	var out bytes.Buffer
	require.NoError(t, report(&out, cr))
	assert.Contains(t, out.String(), "author nobody named (the cluster sends no audit events)")
}
