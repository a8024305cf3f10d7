package reverser

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalObjectReference names an object in the same namespace as the referrer.
// +structType=atomic
type LocalObjectReference struct {
	// name of the referent.
	// +required
	Name string `json:"name"`
}

// ObjectReference names a namespaced object, possibly in another namespace.
// +structType=atomic
type ObjectReference struct {
	// namespace of the referent. Empty means the referrer's own namespace
	// where the referrer is namespaced.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the referent.
	// +required
	Name string `json:"name"`
}

// SecretKeyReference names one key of a Secret.
// +structType=atomic
type SecretKeyReference struct {
	// namespace of the Secret. Required where the referrer is cluster-scoped;
	// empty means the referrer's own namespace otherwise.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the Secret.
	// +required
	Name string `json:"name"`
	// key within the Secret's data.
	// +required
	Key string `json:"key"`
}

// NamespacesFrom says which namespaces a NamespaceSelection admits.
// +enum
type NamespacesFrom string

const (
	// NamespacesFromSame admits only the namespace of the object that holds the selection.
	NamespacesFromSame NamespacesFrom = "Same"
	// NamespacesFromNames admits the namespaces listed in names.
	NamespacesFromNames NamespacesFrom = "Names"
	// NamespacesFromSelector admits the namespaces whose labels match selector.
	NamespacesFromSelector NamespacesFrom = "Selector"
	// NamespacesFromAll admits every namespace.
	NamespacesFromAll NamespacesFrom = "All"
)

// NamespaceSelection chooses a set of namespaces on the control cluster.
type NamespaceSelection struct {
	// from says how namespaces are chosen: Same (the holder's own namespace),
	// Names (those in names), Selector (those matching selector) or All.
	// +required
	From NamespacesFrom `json:"from"`
	// names lists the admitted namespaces when from is Names.
	// +optional
	// +listType=set
	Names []string `json:"names,omitempty"`
	// selector matches the labels of admitted namespaces when from is Selector.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}
