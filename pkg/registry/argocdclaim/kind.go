// Package argocdclaim stores ArgoCDClaims.
package argocdclaim

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes ArgoCDClaim storage.
//
// The claim acts with the rights of whoever wrote its spec last; the
// claims admission check has made sure they have them.
var Kind = registry.StampsAuthorizer(&registry.Kind[*reverser.ArgoCDClaim]{
	Resource:   "argocdclaims",
	Singular:   "argocdclaim",
	ShortNames: []string{"argoclaim"},
	Namespaced: true,
	New:        func() *reverser.ArgoCDClaim { return &reverser.ArgoCDClaim{} },
	NewList:    func() runtime.Object { return &reverser.ArgoCDClaimList{} },
	ValidateUpdate: func(o, old *reverser.ArgoCDClaim) field.ErrorList {
		return validation.ValidateArgoCDClaimUpdate(&o.Spec, &old.Spec, field.NewPath("spec"))
	},
	Validate: func(o *reverser.ArgoCDClaim) field.ErrorList {
		return validation.ValidateArgoCDClaimSpec(&o.Spec, field.NewPath("spec"))
	},
	Table: registry.TableSpec[*reverser.ArgoCDClaim]{Columns: []registry.Column[*reverser.ArgoCDClaim]{
		{Name: "Application", Type: "string", Description: "The claimed Application, as namespace/name.", Value: func(o *reverser.ArgoCDClaim) any {
			return o.Spec.ApplicationRef.Namespace + "/" + o.Spec.ApplicationRef.Name
		}},
		registry.ReadyColumn[*reverser.ArgoCDClaim]("Whether the applier is held."),
		{Name: "Last Applied", Type: "string", Description: "The revision the applier reports as applied.", Value: func(o *reverser.ArgoCDClaim) any {
			return o.Status.LastAppliedRevision
		}},
		{Name: "Operation", Type: "string", Priority: 1, Description: "Reason of the newest converge.", Value: func(o *reverser.ArgoCDClaim) any {
			if o.Status.Operation == nil {
				return ""
			}
			return string(o.Status.Operation.Reason)
		}},
	}},
}, func(o *reverser.ArgoCDClaim) **reverser.Author { return &o.Status.AuthorizedBy })
