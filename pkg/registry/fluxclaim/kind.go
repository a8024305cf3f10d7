// Package fluxclaim stores FluxClaims.
package fluxclaim

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes FluxClaim storage.
//
// The claim acts with the rights of whoever wrote its spec last; the
// claims admission check has made sure they have them.
var Kind = registry.StampsAuthorizer(&registry.Kind[*reverser.FluxClaim]{
	Resource:   "fluxclaims",
	Singular:   "fluxclaim",
	ShortNames: []string{"fc"},
	Namespaced: true,
	New:        func() *reverser.FluxClaim { return &reverser.FluxClaim{} },
	NewList:    func() runtime.Object { return &reverser.FluxClaimList{} },
	ValidateUpdate: func(o, old *reverser.FluxClaim) field.ErrorList {
		return validation.ValidateFluxClaimUpdate(&o.Spec, &old.Spec, field.NewPath("spec"))
	},
	Validate: func(o *reverser.FluxClaim) field.ErrorList {
		return validation.ValidateFluxClaimSpec(&o.Spec, field.NewPath("spec"))
	},
	Table: registry.TableSpec[*reverser.FluxClaim]{Columns: []registry.Column[*reverser.FluxClaim]{
		{Name: "Kustomization", Type: "string", Description: "The claimed Kustomization, as namespace/name.", Value: func(o *reverser.FluxClaim) any {
			return o.Spec.KustomizationRef.Namespace + "/" + o.Spec.KustomizationRef.Name
		}},
		registry.ReadyColumn[*reverser.FluxClaim]("Whether the applier is held."),
		{Name: "Last Applied", Type: "string", Description: "The revision the applier reports as applied.", Value: func(o *reverser.FluxClaim) any {
			return o.Status.LastAppliedRevision
		}},
		{Name: "Operation", Type: "string", Priority: 1, Description: "Reason of the newest converge.", Value: func(o *reverser.FluxClaim) any {
			if o.Status.Operation == nil {
				return ""
			}
			return string(o.Status.Operation.Reason)
		}},
	}},
}, func(o *reverser.FluxClaim) **reverser.Author { return &o.Status.AuthorizedBy })
