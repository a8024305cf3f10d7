package admit

import (
	"context"
	"errors"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"reverser.dev/reverser/pkg/apis/reverser"
	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
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
	var versioned v1.GitProvider
	if err := v1.Convert_reverser_GitProvider_To_v1alpha1_GitProvider(gp, &versioned, nil); err != nil {
		return apierrors.NewInternalError(err)
	}
	missing, err := tenancy.Missing(ctx, c.authz, a.GetUserInfo(), tenancy.SecretAccess(gp.Namespace, tenancy.GitProviderSecrets(&versioned)...))
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if len(missing) > 0 {
		return admission.NewForbidden(a, errors.New(tenancy.DeniedSecrets(a.GetUserInfo().GetName(), missing)))
	}
	return nil
}
