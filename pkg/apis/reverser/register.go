package reverser

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group served by reverser-apiserver.
const GroupName = "reverser.dev"

// SchemeGroupVersion is the internal version used to register these objects.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// Kind takes an unqualified kind and returns a group-qualified GroupKind.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource takes an unqualified resource and returns a group-qualified GroupResource.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder collects the functions that add the internal types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

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
	return nil
}
