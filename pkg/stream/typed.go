package stream

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Typed informers. ConfigMaps and Secrets, the bulk of what is mirrored,
// are listed and watched with a typed client, which speaks protobuf, and
// cached as typed objects; a stream turns an object into unstructured only
// when it reads it. Decoding JSON into unstructured maps was the largest
// cost of a snapshot of many objects, and the maps the largest part of the
// cache.
//
// Only these two: their schema has not changed in years. A typed client
// drops fields it does not know, so a resource that may gain fields in a
// newer kube-apiserver than this build knows stays on the dynamic client,
// which keeps everything.
type typedKind struct {
	// object is the informer's type; listWatch lists and watches it.
	object    runtime.Object
	listWatch func(k kubernetes.Interface, ns string) (listFunc, watchFunc)
}

type (
	listFunc  = func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watchFunc = func(context.Context, metav1.ListOptions) (watch.Interface, error)
)

var typedKinds = map[schema.GroupVersionResource]typedKind{
	{Version: "v1", Resource: "configmaps"}: {object: &corev1.ConfigMap{},
		listWatch: func(k kubernetes.Interface, ns string) (listFunc, watchFunc) {
			return typedFuncs[*corev1.ConfigMapList](k.CoreV1().ConfigMaps(ns))
		}},
	{Version: "v1", Resource: "secrets"}: {object: &corev1.Secret{},
		listWatch: func(k kubernetes.Interface, ns string) (listFunc, watchFunc) {
			return typedFuncs[*corev1.SecretList](k.CoreV1().Secrets(ns))
		}},
}

// typedFuncs are a typed client's List and Watch as a ListWatch takes them.
func typedFuncs[L runtime.Object](c interface {
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}) (listFunc, watchFunc) {
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }, c.Watch
}

// toUnstructured is a cached object as a stream reads it: typed objects
// are converted, with the apiVersion and kind a list's items lack.
func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	var kind string
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		return o, nil
	case *corev1.ConfigMap:
		kind = "ConfigMap"
	case *corev1.Secret:
		kind = "Secret"
	default:
		return nil, fmt.Errorf("unexpected cached object %T", obj)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
	return u, nil
}

// trimTyped is trim for typed objects: the last-applied annotation goes,
// and of managedFields only the newest entry's manager, operation and time
// stay. ConfigMaps and Secrets have no status.
func trimTyped(obj metav1.Object) {
	if ann := obj.GetAnnotations(); ann != nil {
		delete(ann, corev1.LastAppliedConfigAnnotation)
		if len(ann) == 0 {
			obj.SetAnnotations(nil)
		}
	}
	entries := obj.GetManagedFields()
	if len(entries) == 0 {
		return
	}
	var newest *metav1.ManagedFieldsEntry
	for i := range entries {
		if e := &entries[i]; e.Time != nil && (newest == nil || !e.Time.Before(newest.Time)) {
			newest = e
		}
	}
	if newest == nil {
		obj.SetManagedFields(nil)
		return
	}
	obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: newest.Manager, Operation: newest.Operation, Time: newest.Time}})
}
