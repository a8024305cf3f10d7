package admit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"reverser.dev/reverser/pkg/apis/reverser"
	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/resolve"
	"reverser.dev/reverser/pkg/tenancy"
)

// RulesPluginName is the name of the rules admission plugin.
const RulesPluginName = "reverser.dev/Rules"

// RemoteSource says whether a GitTarget mirrors a remote (kubeconfig)
// KubeProvider. It returns false when the GitTarget or its provider does not
// exist (yet): a rule is then checked as if it read this cluster, the
// stricter case, and the controller checks again once they exist.
type RemoteSource func(ctx context.Context, namespace, name string) (bool, error)

// Served returns what this cluster serves, from discovery; an error makes the
// check fall back to the rule's groups and resources as written.
type Served func(ctx context.Context) (resolve.Served, error)

// Rules is the admission plugin for WatchRule and ClusterWatchRule creates
// and spec updates: whoever writes a rule must themselves be allowed to list
// and watch everything it selects, where it reads it, on this cluster. The
// rule then records them in status.authorizedBy, and the controller repeats
// the check on every resync. Rules of remote KubeProviders are authorised by
// the provider's lending instead: this cluster's RBAC says nothing about
// another cluster.
type Rules struct {
	*admission.Handler
	authz  authorizer.Authorizer
	remote RemoteSource
	served Served
}

var _ admission.ValidationInterface = &Rules{}

// NewRules returns the plugin. served may be nil (standalone mode).
func NewRules(authz authorizer.Authorizer, served Served) *Rules {
	return &Rules{Handler: admission.NewHandler(admission.Create, admission.Update), authz: authz, served: served}
}

// SetRemoteSource wires the GitTarget and KubeProvider storage, which exists
// only after the plugin chain is built.
func (r *Rules) SetRemoteSource(f RemoteSource) { r.remote = f }

// ValidateInitialization implements admission.InitializationValidator.
func (r *Rules) ValidateInitialization() error {
	if r.authz == nil {
		return errors.New("rules admission needs an authorizer")
	}
	return nil
}

// Validate refuses a rule whose writer may not read what it selects.
func (r *Rules) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	var (
		rules               []reverser.ResourceRule
		namespace           string // where the rule reads; "" cluster-wide
		targetNS, target    string
		namespaced, changed bool
	)
	switch obj := a.GetObject().(type) {
	case *reverser.WatchRule:
		rules, namespaced = obj.Spec.Rules, true
		namespace = obj.Spec.SourceNamespace
		if namespace == "" {
			namespace = obj.Namespace
		}
		targetNS, target = obj.Namespace, obj.Spec.GitTargetRef.Name
		old, _ := a.GetOldObject().(*reverser.WatchRule)
		changed = old == nil || !equalSpecs(obj.Spec, old.Spec)
	case *reverser.ClusterWatchRule:
		rules = obj.Spec.Rules
		targetNS, target = obj.Spec.GitTargetRef.Namespace, obj.Spec.GitTargetRef.Name
		old, _ := a.GetOldObject().(*reverser.ClusterWatchRule)
		changed = old == nil || !equalSpecs(obj.Spec, old.Spec)
	default:
		return nil
	}
	if !changed {
		return nil // status.authorizedBy stays with whoever wrote the spec
	}
	if r.remote == nil {
		return apierrors.NewInternalError(errors.New("rules admission: storage not wired"))
	}
	remote, err := r.remote(ctx, targetNS, target)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading GitTarget %s/%s: %w", targetNS, target, err))
	}
	if remote {
		return nil
	}
	needed := r.access(ctx, rules, namespace, namespaced)
	missing, err := tenancy.Missing(ctx, r.authz, a.GetUserInfo(), needed)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(missing) > 0 {
		return admission.NewForbidden(a, errors.New(tenancy.Denied(a.GetUserInfo().GetName(), missing)))
	}
	return nil
}

// access lists what a rule needs: list and watch of each resource it
// resolves to; without discovery, the groups and resources as written.
func (r *Rules) access(ctx context.Context, rules []reverser.ResourceRule, namespace string, namespaced bool) []tenancy.Access {
	var served resolve.Served
	var err error = errors.New("no discovery")
	if r.served != nil {
		served, err = r.served(ctx)
	}
	if err != nil {
		var gvrs []schema.GroupVersionResource
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					gvrs = append(gvrs, schema.GroupVersionResource{Group: g, Resource: res})
				}
			}
		}
		return tenancy.RuleAccess(gvrs, namespace)
	}
	return tenancy.RuleAccess(resolve.Rules(toVersioned(rules), served, namespaced).GVRs, namespace)
}

func equalSpecs[T any](a, b T) bool { return apiequality.Semantic.DeepEqual(a, b) }

func toVersioned(rules []reverser.ResourceRule) []v1.ResourceRule {
	out := make([]v1.ResourceRule, len(rules))
	for i, r := range rules {
		out[i] = v1.ResourceRule{APIGroups: r.APIGroups, APIVersions: r.APIVersions, Resources: r.Resources}
	}
	return out
}

// CachedServed caches what discover returns for ttl, so a burst of rule
// writes costs one discovery.
func CachedServed(ttl time.Duration, discover func(context.Context) (resolve.Served, error)) Served {
	var (
		mu   sync.Mutex
		last resolve.Served
		at   time.Time
	)
	return func(ctx context.Context) (resolve.Served, error) {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return last, nil
		}
		s, err := discover(ctx)
		if err != nil {
			return resolve.Served{}, err
		}
		last, at = s, time.Now()
		return last, nil
	}
}
