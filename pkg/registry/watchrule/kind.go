// Package watchrule stores WatchRules.
package watchrule

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes WatchRule storage.
//
// The rule reads with the rights of whoever wrote its spec last; the
// rules admission check has made sure they have them.
var Kind = registry.StampsAuthorizer(&registry.Kind[*reverser.WatchRule]{
	Resource:   "watchrules",
	Singular:   "watchrule",
	ShortNames: []string{"wr"},
	Namespaced: true,
	New:        func() *reverser.WatchRule { return &reverser.WatchRule{} },
	NewList:    func() runtime.Object { return &reverser.WatchRuleList{} },
	Validate: func(o *reverser.WatchRule) field.ErrorList {
		return validation.ValidateWatchRuleSpec(&o.Spec, field.NewPath("spec"))
	},
	Table: registry.TableSpec[*reverser.WatchRule]{Columns: []registry.Column[*reverser.WatchRule]{
		{Name: "Target", Type: "string", Description: "The GitTarget fed.", Value: func(o *reverser.WatchRule) any { return o.Spec.GitTargetRef.Name }},
		{Name: "Source Namespace", Type: "string", Description: "The namespace watched on the source cluster.", Value: func(o *reverser.WatchRule) any {
			if o.Spec.SourceNamespace == "" {
				return o.Namespace
			}
			return o.Spec.SourceNamespace
		}},
		registry.ReadyColumn[*reverser.WatchRule]("Whether every rule resolved."),
	}},
}, func(o *reverser.WatchRule) **reverser.Author { return &o.Status.AuthorizedBy })
