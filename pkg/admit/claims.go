package admit

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"reverser.dev/reverser/pkg/apis/reverser"
	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/tenancy"
)

// ClaimsPluginName is the name of the claims admission plugin.
const ClaimsPluginName = "reverser.dev/Claims"

// RemoteProvider says whether the KubeProvider name reaches another cluster
// (false when it does not exist yet: the stricter, local check applies).
type RemoteProvider func(ctx context.Context, name string) (bool, error)

// Claims is the admission plugin for FluxClaim and ArgoCDClaim creates and
// spec updates: handing an applier to Reverser rewrites the applier's
// schedule with Reverser's rights, so whoever writes a claim must themselves
// be allowed to get and patch the applier object it names. The claim then
// records them in status.authorizedBy. Claims through a remote KubeProvider
// are authorised by the provider's lending instead, which the controller
// checks: this cluster's RBAC says nothing about another cluster.
type Claims struct {
	*admission.Handler
	authz  authorizer.Authorizer
	remote RemoteProvider
}

var _ admission.ValidationInterface = &Claims{}

// NewClaims returns the plugin.
func NewClaims(authz authorizer.Authorizer) *Claims {
	return &Claims{Handler: admission.NewHandler(admission.Create, admission.Update), authz: authz}
}

// SetRemoteProvider wires the KubeProvider storage, which exists only after
// the plugin chain is built.
func (c *Claims) SetRemoteProvider(f RemoteProvider) { c.remote = f }

// ValidateInitialization implements admission.InitializationValidator.
func (c *Claims) ValidateInitialization() error {
	if c.authz == nil {
		return errors.New("claims admission needs an authorizer")
	}
	return nil
}

// Validate refuses a claim whose writer may not patch the applier it names.
func (c *Claims) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetSubresource() != "" {
		return nil
	}
	var (
		provider string
		needed   []tenancy.Access
		changed  bool
	)
	switch obj := a.GetObject().(type) {
	case *reverser.FluxClaim:
		provider = obj.Spec.KubeProviderRef.Name
		ref := obj.Spec.KustomizationRef
		needed = tenancy.ClaimAccess(v1.FluxKustomizations.Group, v1.FluxKustomizations.Resource, ref.Namespace, ref.Name)
		old, _ := a.GetOldObject().(*reverser.FluxClaim)
		changed = old == nil || !equalSpecs(obj.Spec, old.Spec)
	case *reverser.ArgoCDClaim:
		provider = obj.Spec.KubeProviderRef.Name
		ref := obj.Spec.ApplicationRef
		needed = tenancy.ClaimAccess(v1.ArgoCDApplications.Group, v1.ArgoCDApplications.Resource, ref.Namespace, ref.Name)
		old, _ := a.GetOldObject().(*reverser.ArgoCDClaim)
		changed = old == nil || !equalSpecs(obj.Spec, old.Spec)
	default:
		return nil
	}
	if !changed {
		return nil // status.authorizedBy stays with whoever wrote the spec
	}
	if c.remote == nil {
		return apierrors.NewInternalError(errors.New("claims admission: storage not wired"))
	}
	remote, err := c.remote(ctx, provider)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading KubeProvider %s: %w", provider, err))
	}
	if remote {
		return nil
	}
	missing, err := tenancy.Missing(ctx, c.authz, a.GetUserInfo(), needed)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(missing) > 0 {
		return admission.NewForbidden(a, errors.New(tenancy.DeniedClaim(a.GetUserInfo().GetName(), missing)))
	}
	return nil
}
