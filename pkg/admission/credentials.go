package admission

import (
	"context"
	"errors"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/tenancy"
)

// CredentialsPluginName is the name of the credentials admission plugin.
const CredentialsPluginName = "reverser.dev/Credentials"

// Credentials is the admission plugin for GitProvider creates and spec
// updates: the controller reads the Secrets a GitProvider names
// (spec.secretRef, spec.signing's key) with its own rights and sends them
// to spec.url or signs with them, so whoever writes the spec must
// themselves be allowed to get each of them. The GitProvider then records
// them in status.authorizedBy, and the controller asks again on every
// resync.
type Credentials struct {
	*admission.Handler
	authz authorizer.Authorizer
}

var _ admission.ValidationInterface = &Credentials{}

// NewCredentials returns the plugin.
func NewCredentials(authz authorizer.Authorizer) *Credentials {
	return &Credentials{Handler: admission.NewHandler(admission.Create, admission.Update), authz: authz}
}

// ValidateInitialization implements admission.InitializationValidator.
func (c *Credentials) ValidateInitialization() error {
	if c.authz == nil {
		return errors.New("credentials admission needs an authorizer")
	}
	return nil
}

// Validate refuses a GitProvider whose writer may not get a Secret it names.
func (c *Credentials) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	gp, ok := a.GetObject().(*reverser.GitProvider)
	if !ok || a.GetSubresource() != "" {
		return nil
	}
	if old, ok := a.GetOldObject().(*reverser.GitProvider); ok && old != nil && apiequality.Semantic.DeepEqual(gp.Spec, old.Spec) {
		return nil // status.authorizedBy stays with whoever wrote the spec
	}
	missing, err := tenancy.Missing(ctx, c.authz, a.GetUserInfo(), tenancy.SecretAccess(gp.Namespace, GitProviderSecrets(gp)...))
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(missing) > 0 {
		return admission.NewForbidden(a, errors.New(tenancy.DeniedSecrets(a.GetUserInfo().GetName(), missing)))
	}
	return nil
}

// GitProviderSecrets names the Secrets of its own namespace a GitProvider
// has the controller read. A signing key named in another namespace is
// refused by the controller, and never read.
func GitProviderSecrets(gp *reverser.GitProvider) []string {
	var names []string
	if gp.Spec.SecretRef != nil {
		names = append(names, gp.Spec.SecretRef.Name)
	}
	if s := gp.Spec.Signing; s != nil {
		for _, ref := range []*reverser.SecretKeyReference{s.SSHKeySecretRef, s.OpenPGPKeySecretRef} {
			if ref != nil && (ref.Namespace == "" || ref.Namespace == gp.Namespace) {
				names = append(names, ref.Name)
			}
		}
	}
	return names
}
