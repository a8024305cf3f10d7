// Package tenancy decides what a tenant may reach through Reverser, so that
// Reverser never becomes a way around RBAC:
//   - which source namespaces a KubeProvider lends to the WatchRules of a
//     control-cluster namespace (every namespace has its own; loans add more);
//   - which permissions a rule needs from the user who authorised it: list
//     and watch of every resource it selects, where it reads them.
//
// Both the API server (when a rule is written) and the controller (on every
// resync) ask these questions; the package holds no state and never blocks
// beyond the NamespaceLabels lookup it is given.
package tenancy

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// NamespaceLabels returns the labels of a control-cluster namespace.
type NamespaceLabels func(ctx context.Context, namespace string) (labels.Set, error)

// Selects reports whether sel admits namespace ns. Same admits holder, the
// namespace of the object that holds the selection.
func Selects(ctx context.Context, sel *v1.NamespaceSelection, holder, ns string, labelsOf NamespaceLabels) (bool, error) {
	switch sel.From {
	case v1.NamespacesFromAll:
		return true, nil
	case v1.NamespacesFromSame:
		return holder != "" && ns == holder, nil
	case v1.NamespacesFromNames:
		return slices.Contains(sel.Names, ns), nil
	case v1.NamespacesFromSelector:
		if sel.Selector == nil || labelsOf == nil {
			return false, nil
		}
		selector, err := metav1.LabelSelectorAsSelector(sel.Selector)
		if err != nil {
			return false, err
		}
		set, err := labelsOf(ctx, ns)
		if err != nil {
			return false, fmt.Errorf("reading the labels of namespace %q: %w", ns, err)
		}
		return selector.Matches(set), nil
	default:
		return false, nil
	}
}

// Consumer reports whether kp admits GitTargets (and claims) of namespace ns:
// spec.consumerNamespaces, All when omitted.
func Consumer(ctx context.Context, kp *v1.KubeProvider, ns string, labelsOf NamespaceLabels) (bool, error) {
	if kp.Spec.ConsumerNamespaces == nil {
		return true, nil
	}
	return Selects(ctx, kp.Spec.ConsumerNamespaces, "", ns, labelsOf)
}

// Lends reports whether kp lends source namespace source to the WatchRules of
// control-cluster namespace consumer, Secrets included when secrets is set.
// On this cluster (inCluster) every consumer has the source namespace of
// its own name, and RBAC decides what is read there. A provider that reaches
// another cluster lends nothing implicitly (#27, finding 5): the namespace
// of the consumer's name only with spec.lendSameNamespaces, and Secrets only
// through a spec.lend entry that says secrets: true.
func Lends(ctx context.Context, kp *v1.KubeProvider, consumer, source string, secrets bool, labelsOf NamespaceLabels) (bool, error) {
	remote := !kp.Spec.InCluster
	if source == consumer && (!remote || (kp.Spec.LendSameNamespaces && !secrets)) {
		return true, nil
	}
	for i := range kp.Spec.Lend {
		loan := &kp.Spec.Lend[i]
		if !slices.Contains(loan.SourceNamespaces, "*") && !slices.Contains(loan.SourceNamespaces, source) {
			continue
		}
		if remote && secrets && !loan.Secrets {
			continue
		}
		ok, err := Selects(ctx, &loan.To, "", consumer, labelsOf)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// Access is one permission: verb on a resource of a group, in a namespace
// ("" for cluster-scoped resources or cluster-wide reads), on one object
// when Name is set.
type Access struct {
	Verb, Group, Resource, Namespace, Name string
}

func (a Access) String() string {
	res := a.Resource
	if a.Group != "" {
		res += "." + a.Group
	}
	if a.Name != "" {
		return fmt.Sprintf("%s %s %s/%s", a.Verb, res, a.Namespace, a.Name)
	}
	if a.Namespace == "" {
		return fmt.Sprintf("%s %s (cluster-wide)", a.Verb, res)
	}
	return fmt.Sprintf("%s %s in namespace %s", a.Verb, res, a.Namespace)
}

// ReadVerbs are what a stream does with each resource it mirrors.
var ReadVerbs = []string{"list", "watch"}

// RuleAccess lists the permissions a rule that selects gvrs in namespace
// (empty for a ClusterWatchRule) needs: list and watch of each resource,
// whatever version it is read at.
func RuleAccess(gvrs []schema.GroupVersionResource, namespace string) []Access {
	var out []Access
	for _, gvr := range gvrs {
		for _, verb := range ReadVerbs {
			a := Access{Verb: verb, Group: gvr.Group, Resource: gvr.Resource, Namespace: namespace}
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// MissingToRead is Missing for what a rule reading gvrs in namespace ns
// needs. Who may list and watch them in every namespace may in ns: that is
// asked first, so a controller checking many rules of one author asks (and
// caches) two answers per resource, not two per namespace; only otherwise
// is ns asked, and what it lacks there is what is missing.
func MissingToRead(ctx context.Context, authz authorizer.Authorizer, u user.Info, gvrs []schema.GroupVersionResource, ns string) ([]Access, error) {
	if ns != "" {
		if missing, err := Missing(ctx, authz, u, RuleAccess(gvrs, "")); err == nil && len(missing) == 0 {
			return nil, nil
		}
	}
	return Missing(ctx, authz, u, RuleAccess(gvrs, ns))
}

// Denied explains, in words a user can act on, which permissions are missing.
func Denied(user string, missing []Access) string {
	return denied(user, "read what the rule selects", missing, "a rule reads only what its author may read")
}

// denied says that user may not do what, lacking missing, and why it matters.
func denied(user, what string, missing []Access, why string) string {
	parts := make([]string, len(missing))
	for i, a := range missing {
		parts[i] = a.String()
	}
	return fmt.Sprintf("user %q may not %s: it lacks %s; %s", user, what, strings.Join(parts, ", "), why)
}

// ClaimVerbs are what holding an applier does to the object it names:
// Reverser rewrites its schedule and asks it to reconcile.
var ClaimVerbs = []string{"get", "patch"}

// ClaimAccess lists the permissions a claim on the applier object
// (group, resource, namespace, name) needs.
func ClaimAccess(group, resource, namespace, name string) []Access {
	out := make([]Access, len(ClaimVerbs))
	for i, verb := range ClaimVerbs {
		out[i] = Access{Verb: verb, Group: group, Resource: resource, Namespace: namespace, Name: name}
	}
	return out
}

// DeniedClaim explains which permissions a claim's writer lacks.
func DeniedClaim(user string, missing []Access) string {
	return denied(user, "hand this applier to Reverser", missing, "a claim acts only where its author may")
}

// SecretAccess lists the permissions to read the Secrets names of
// namespace, which a GitProvider sends to its URL or signs with.
func SecretAccess(namespace string, names ...string) []Access {
	out := make([]Access, 0, len(names))
	for _, name := range names {
		acc := Access{Verb: "get", Resource: "secrets", Namespace: namespace, Name: name}
		if !slices.Contains(out, acc) {
			out = append(out, acc)
		}
	}
	return out
}

// DeniedSecrets explains which Secrets a GitProvider's writer may not read.
func DeniedSecrets(user string, missing []Access) string {
	return denied(user, "have Reverser use these Secrets", missing, "a GitProvider uses only Secrets its author may read")
}

// Missing asks authz about each access for u and returns those it does not
// allow. An authorizer that fails is an error, not a refusal.
func Missing(ctx context.Context, authz authorizer.Authorizer, u user.Info, needed []Access) ([]Access, error) {
	var missing []Access
	for _, acc := range needed {
		decision, _, err := authz.Authorize(ctx, authorizer.AttributesRecord{
			User: u, Verb: acc.Verb, APIGroup: acc.Group, APIVersion: "*", Resource: acc.Resource,
			Namespace: acc.Namespace, Name: acc.Name, ResourceRequest: true,
		})
		if decision == authorizer.DecisionAllow {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("checking whether %q may %s: %w", u.GetName(), acc, err)
		}
		missing = append(missing, acc)
	}
	return missing, nil
}

// GitProviderSecrets names the Secrets of its own namespace a GitProvider
// has the controller read, which its writer must be allowed to get (our
// API server at create, the controller every resync). A signing key named in another namespace is
// refused by the controller, and never read.
func GitProviderSecrets(gp *v1.GitProvider) []string {
	var names []string
	if gp.Spec.SecretRef != nil {
		names = append(names, gp.Spec.SecretRef.Name)
	}
	if s := gp.Spec.Signing; s != nil {
		for _, ref := range []*v1.SecretKeyReference{s.SSHKeySecretRef, s.OpenPGPKeySecretRef} {
			if ref != nil && (ref.Namespace == "" || ref.Namespace == gp.Namespace) {
				names = append(names, ref.Name)
			}
		}
	}
	return names
}
