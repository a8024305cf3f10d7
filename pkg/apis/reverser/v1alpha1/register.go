package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group served by reverser-apiserver.
const GroupName = "reverser.dev"

// SchemeGroupVersion is the group version used to register these objects.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource takes an unqualified resource and returns a group-qualified GroupResource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder collects the functions that add this version to a scheme.
	SchemeBuilder      runtime.SchemeBuilder
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds this version's types, defaults and conversions to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// The generated defaulters and conversions register themselves here too.
	localSchemeBuilder.Register(addKnownTypes, RegisterDefaults, addFieldLabelConversions)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&GitProvider{}, &GitProviderList{},
		&KubeProvider{}, &KubeProviderList{},
		&GitTarget{}, &GitTargetList{},
		&WatchRule{}, &WatchRuleList{},
		&ClusterWatchRule{}, &ClusterWatchRuleList{},
		&CommitRequest{}, &CommitRequestList{},
		&FluxClaim{}, &FluxClaimList{},
		&ArgoCDClaim{}, &ArgoCDClaimList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
