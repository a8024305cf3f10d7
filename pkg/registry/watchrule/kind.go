// Package watchrule stores WatchRules.
package watchrule

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes WatchRule storage.
var Kind = &registry.Kind[*reverser.WatchRule]{
	Resource:   "watchrules",
	Singular:   "watchrule",
	ShortNames: []string{"wr"},
	Namespaced: true,
	New:        func() *reverser.WatchRule { return &reverser.WatchRule{} },
	NewList:    func() runtime.Object { return &reverser.WatchRuleList{} },
	// The rule reads with the rights of whoever wrote its spec last; the
	// rules admission check has made sure they have them.
	PrepareForCreate: func(ctx context.Context, o *reverser.WatchRule) {
		o.Status.AuthorizedBy = registry.RequestAuthor(ctx)
	},
	PrepareForUpdate: func(ctx context.Context, o, old *reverser.WatchRule) {
		if registry.SpecChanged(o, old) {
			o.Status.AuthorizedBy = registry.RequestAuthor(ctx)
		}
	},
	PrepareStatusUpdate: func(o, old *reverser.WatchRule) {
		o.Status.AuthorizedBy = old.Status.AuthorizedBy
	},
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
}
