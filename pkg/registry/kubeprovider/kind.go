// Package kubeprovider stores KubeProviders.
package kubeprovider

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes KubeProvider storage.
var Kind = &registry.Kind[*reverser.KubeProvider]{
	Resource:   "kubeproviders",
	Singular:   "kubeprovider",
	ShortNames: []string{"kubeprov"},
	Namespaced: false,
	New:        func() *reverser.KubeProvider { return &reverser.KubeProvider{} },
	NewList:    func() runtime.Object { return &reverser.KubeProviderList{} },
	Validate: func(o *reverser.KubeProvider) field.ErrorList {
		return validation.ValidateKubeProviderSpec(&o.Spec, field.NewPath("spec"))
	},
	Table: registry.TableSpec[*reverser.KubeProvider]{Columns: []registry.Column[*reverser.KubeProvider]{
		{Name: "Source", Type: "string", Description: "in-cluster, or the kubeconfig Secret.", Value: source},
		{Name: "CommitRequests", Type: "string", Description: "Whether source-cluster CommitRequests are served.", Value: func(o *reverser.KubeProvider) any {
			return string(o.Spec.CommitRequests)
		}},
		registry.ReadyColumn[*reverser.KubeProvider]("Whether the source cluster answers."),
		{Name: "Audit", Type: "string", Description: "Whether audit events arrive.", Value: func(o *reverser.KubeProvider) any {
			return registry.ConditionStatus(o.Status.Conditions, v1alpha1.ConditionAuditFactsReceived)
		}},
		{Name: "Saves", Type: "string", Priority: 1, Description: "How source-cluster CommitRequests are served: the CommitRequestsServed reason.",
			Value: func(o *reverser.KubeProvider) any {
				return registry.ConditionReason(o.Status.Conditions, v1alpha1.ConditionCommitRequestsServed)
			}},
	}},
}

func source(o *reverser.KubeProvider) any {
	if o.Spec.InCluster {
		return "in-cluster"
	}
	if r := o.Spec.KubeConfigSecretRef; r != nil {
		return "secret:" + r.Namespace + "/" + r.Name
	}
	return ""
}
