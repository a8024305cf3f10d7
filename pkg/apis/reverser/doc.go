// +k8s:deepcopy-gen=package
// +groupName=reverser.dev

// Package reverser holds the internal, unversioned types of the reverser.dev
// API group. The API server stores and validates these; clients use v1alpha1.
package reverser
