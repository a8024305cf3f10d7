// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=reverser.dev/reverser/pkg/apis/reverser
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-model-package=dev.reverser.v1alpha1
// +groupName=reverser.dev

// Package v1alpha1 is the served version of the reverser.dev API: the objects
// that tell Reverser which live Kubernetes objects to mirror into which Git
// branch, and the CommitRequests that save open work with a message.
package v1alpha1
