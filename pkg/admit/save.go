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

// PluginName is the name of the save admission plugin.
const PluginName = "reverser.dev/Save"

// GitTargetGetter reads a GitTarget consistently (from storage, not a cache),
// so a grant created a moment ago is already in force. It returns a NotFound
// error when the GitTarget does not exist.
type GitTargetGetter func(ctx context.Context, namespace, name string) (*reverser.GitTarget, error)

// Save is the admission plugin for CommitRequest creates.
type Save struct {
	*admission.Handler
	authz      authorizer.Authorizer
	gitTargets GitTargetGetter
	remote     RemoteProvider
	nsLabels   tenancy.NamespaceLabels
}

var _ admission.ValidationInterface = &Save{}

// NewSave returns the plugin. nsLabels may be nil when no kube-apiserver is
// reachable (standalone mode); Selector grants then admit nothing.
func NewSave(authz authorizer.Authorizer, nsLabels tenancy.NamespaceLabels) *Save {
	return &Save{Handler: admission.NewHandler(admission.Create), authz: authz, nsLabels: nsLabels}
}

// SetGitTargetGetter wires the GitTarget storage, which exists only after
// the plugin chain is built.
func (s *Save) SetGitTargetGetter(g GitTargetGetter) { s.gitTargets = g }

// SetRemoteProvider wires the KubeProvider storage: a GitTarget that
// mirrors another cluster is saved on that cluster, not here.
func (s *Save) SetRemoteProvider(f RemoteProvider) { s.remote = f }

// ValidateInitialization implements admission.InitializationValidator.
func (s *Save) ValidateInitialization() error {
	if s.authz == nil {
		return errors.New("save admission needs an authorizer")
	}
	return nil
}

// Validate refuses a CommitRequest whose requester may not save its GitTarget
// or whose namespace the GitTarget's grants do not admit.
func (s *Save) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetOperation() != admission.Create || a.GetSubresource() != "" ||
		a.GetResource().GroupResource() != reverser.Resource("commitrequests") {
		return nil
	}
	cr, ok := a.GetObject().(*reverser.CommitRequest)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("save admission: unexpected object %T", a.GetObject()))
	}
	target := cr.Spec.GitTargetRef
	if target.Namespace == "" {
		target.Namespace = a.GetNamespace()
	}
	user := a.GetUserInfo()
	decision, reason, err := s.authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            user,
		Verb:            v1.VerbSave,
		APIGroup:        reverser.GroupName,
		APIVersion:      "*",
		Resource:        "gittargets",
		Namespace:       target.Namespace,
		Name:            target.Name,
		ResourceRequest: true,
	})
	if decision != authorizer.DecisionAllow && err != nil {
		// Like kube-apiserver's own authorization filter: an authorizer that
		// failed is a server error, not a refusal the user could act on.
		return apierrors.NewInternalError(fmt.Errorf("checking whether %q may save GitTarget %s/%s: %w",
			user.GetName(), target.Namespace, target.Name, err))
	}
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("user %q may not save GitTarget %s/%s: it needs verb %q on resource \"gittargets\" in API group %q "+
			"(namespace %q, name %q), e.g. through a RoleBinding to a role like reverser-saver",
			user.GetName(), target.Namespace, target.Name, v1.VerbSave, reverser.GroupName, target.Namespace, target.Name)
		if reason != "" {
			msg += ": " + reason
		}
		return admission.NewForbidden(a, errors.New(msg))
	}

	if s.gitTargets == nil {
		return apierrors.NewInternalError(errors.New("save admission: GitTarget storage not wired"))
	}
	gt, err := s.gitTargets(ctx, target.Namespace, target.Name)
	if apierrors.IsNotFound(err) {
		// Not refused: the GitTarget may be created next; the controller
		// reports GitTargetNotFound after spec.window.attachTimeout.
		return nil
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading GitTarget %s/%s: %w", target.Namespace, target.Name, err))
	}
	if s.remote != nil {
		remote, err := s.remote(ctx, gt.Spec.KubeProviderRef.Name)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("reading KubeProvider %s: %w", gt.Spec.KubeProviderRef.Name, err))
		}
		if remote {
			return admission.NewForbidden(a, fmt.Errorf("GitTarget %s/%s mirrors another cluster through KubeProvider %s: save on that "+
				"cluster, with a CommitRequest whose spec.gitTargetRef names namespace %q (its KubeProvider must set spec.commitRequests)",
				target.Namespace, target.Name, gt.Spec.KubeProviderRef.Name, target.Namespace))
		}
	}
	grants := make([]v1.CommitRequestGrant, len(gt.Spec.AllowedCommitRequests))
	for i := range grants {
		// Generated conversions of plain structs cannot fail.
		_ = v1.Convert_reverser_CommitRequestGrant_To_v1alpha1_CommitRequestGrant(&gt.Spec.AllowedCommitRequests[i], &grants[i], nil)
	}
	grant, err := tenancy.AdmitsConsumer(ctx, grants, target.Namespace, a.GetNamespace(), s.nsLabels)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("checking the grants of GitTarget %s/%s: %w", target.Namespace, target.Name, err))
	}
	if !grant.Allowed {
		return admission.NewForbidden(a, fmt.Errorf("GitTarget %s/%s does not admit this request: %s", target.Namespace, target.Name, grant.Reason))
	}
	return nil
}
