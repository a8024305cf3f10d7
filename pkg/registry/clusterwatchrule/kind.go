// Package clusterwatchrule stores ClusterWatchRules.
package clusterwatchrule

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes ClusterWatchRule storage.
//
// The rule reads with the rights of whoever wrote its spec last; the
// rules admission check has made sure they have them.
var Kind = registry.StampsAuthorizer(&registry.Kind[*reverser.ClusterWatchRule]{
	Resource:   "clusterwatchrules",
	Singular:   "clusterwatchrule",
	ShortNames: []string{"cwr"},
	Namespaced: false,
	New:        func() *reverser.ClusterWatchRule { return &reverser.ClusterWatchRule{} },
	NewList:    func() runtime.Object { return &reverser.ClusterWatchRuleList{} },
	Validate: func(o *reverser.ClusterWatchRule) field.ErrorList {
		return validation.ValidateClusterWatchRuleSpec(&o.Spec, field.NewPath("spec"))
	},
	Table: registry.TableSpec[*reverser.ClusterWatchRule]{Columns: []registry.Column[*reverser.ClusterWatchRule]{
		{Name: "Target", Type: "string", Description: "The GitTarget fed, as namespace/name.", Value: func(o *reverser.ClusterWatchRule) any {
			return o.Spec.GitTargetRef.Namespace + "/" + o.Spec.GitTargetRef.Name
		}},
		registry.ReadyColumn[*reverser.ClusterWatchRule]("Whether every rule resolved."),
	}},
}, func(o *reverser.ClusterWatchRule) **reverser.Author { return &o.Status.AuthorizedBy })
