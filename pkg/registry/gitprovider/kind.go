// Package gitprovider stores GitProviders.
package gitprovider

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes GitProvider storage. status.authorizedBy keeps who wrote
// the spec: the Secrets it names are read with their rights.
var Kind = registry.StampsAuthorizer(&registry.Kind[*reverser.GitProvider]{
	Resource:   "gitproviders",
	Singular:   "gitprovider",
	ShortNames: []string{"gitprov"},
	Namespaced: true,
	New:        func() *reverser.GitProvider { return &reverser.GitProvider{} },
	NewList:    func() runtime.Object { return &reverser.GitProviderList{} },
	Validate: func(o *reverser.GitProvider) field.ErrorList {
		return validation.ValidateGitProviderSpec(&o.Spec, o.Namespace, field.NewPath("spec"))
	},
	Table: registry.TableSpec[*reverser.GitProvider]{Columns: []registry.Column[*reverser.GitProvider]{
		{Name: "URL", Type: "string", Description: "Repository URL.", Value: func(o *reverser.GitProvider) any { return o.Spec.URL }},
		registry.ReadyColumn[*reverser.GitProvider]("Whether the repository answers."),
		registry.ReasonColumn[*reverser.GitProvider](),
	}},
}, func(o *reverser.GitProvider) **reverser.Author { return &o.Status.AuthorizedBy })
