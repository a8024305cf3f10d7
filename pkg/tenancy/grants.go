package tenancy

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// GrantDecision says whether a GitTarget's grants admit a CommitRequest, and
// if not, why, in words a user can act on.
type GrantDecision struct {
	Allowed bool
	Reason  string
}

// AdmitsConsumer decides, for our API server at create and the controller
// at the claim, whether grants admit a CommitRequest made on the
// control cluster in requestNamespace for a GitTarget in targetNamespace.
// sourceNamespaces grants never admit such a request: they are for requests
// living on the mirrored cluster. nsLabels is needed only by grants with
// consumerNamespaces.from: Selector.
func AdmitsConsumer(ctx context.Context, grants []v1.CommitRequestGrant, targetNamespace, requestNamespace string,
	nsLabels NamespaceLabels) (GrantDecision, error) {
	var selectorProblem string
	for _, g := range grants {
		sel := g.ConsumerNamespaces
		if sel == nil {
			continue
		}
		switch sel.From {
		case v1.NamespacesFromAll:
			return GrantDecision{Allowed: true}, nil
		case v1.NamespacesFromSame:
			if requestNamespace == targetNamespace {
				return GrantDecision{Allowed: true}, nil
			}
		case v1.NamespacesFromNames:
			if slices.Contains(sel.Names, requestNamespace) {
				return GrantDecision{Allowed: true}, nil
			}
		case v1.NamespacesFromSelector:
			if nsLabels == nil {
				selectorProblem = "; a from: Selector grant cannot be checked without a kube-apiserver to read namespace labels from"
				continue
			}
			selector, err := metav1.LabelSelectorAsSelector(sel.Selector)
			if err != nil {
				return GrantDecision{}, fmt.Errorf("grant selector: %w", err)
			}
			set, err := nsLabels(ctx, requestNamespace)
			if err != nil {
				return GrantDecision{}, fmt.Errorf("reading labels of namespace %q: %w", requestNamespace, err)
			}
			if selector.Matches(set) {
				return GrantDecision{Allowed: true}, nil
			}
		}
	}
	return GrantDecision{Reason: fmt.Sprintf(
		"no grant in spec.allowedCommitRequests admits CommitRequests from namespace %q; add one such as "+
			"{consumerNamespaces: {from: Names, names: [%s]}}%s", requestNamespace, requestNamespace, selectorProblem)}, nil
}
