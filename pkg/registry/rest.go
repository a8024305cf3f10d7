package registry

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"reverser.dev/reverser/pkg/apis/reverser"
)

// Category groups every reverser.dev kind for `kubectl get reverser`.
const Category = "reverser"

// REST serves a kind's main resource.
type REST struct {
	*genericregistry.Store
	shortNames []string
}

var (
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

// ShortNames implements rest.ShortNamesProvider.
func (r *REST) ShortNames() []string { return r.shortNames }

// Categories implements rest.CategoriesProvider.
func (r *REST) Categories() []string { return []string{Category} }

// StatusREST serves the status subresource: it writes status and nothing else.
type StatusREST struct {
	store *genericregistry.Store
}

var _ rest.Patcher = &StatusREST{}

// New returns an empty object of the kind.
func (r *StatusREST) New() runtime.Object { return r.store.New() }

// Destroy cleans up resources on shutdown; the main store owns them.
func (r *StatusREST) Destroy() {}

// Get retrieves the object, so that PATCH can read what it patches.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes the status of the object.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Subresources never create the object they belong to.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields implements rest.ResetFieldsStrategy for server-side apply.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the object as the main resource does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// NewREST builds the storage of a kind and its status subresource.
func NewREST[T Object](k *Kind[T], scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, *StatusREST, error) {
	probe := k.New()
	if status := fieldOf(probe, "Status"); !fieldOf(probe, "Spec").IsValid() || !status.IsValid() ||
		!status.FieldByName("Conditions").IsValid() || !status.FieldByName("ObservedGeneration").IsValid() {
		return nil, nil, fmt.Errorf("%s: type %T needs Spec and Status{ObservedGeneration, Conditions} fields", k.Resource, probe)
	}
	s := strategy[T]{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator, kind: k}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return k.New() },
		NewListFunc:               k.NewList,
		PredicateFunc:             k.predicate,
		DefaultQualifiedResource:  reverser.Resource(k.Resource),
		SingularQualifiedResource: reverser.Resource(k.Singular),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor:            newTableConvertor(k.Table),
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: k.attrs}); err != nil {
		return nil, nil, fmt.Errorf("building storage for %s: %w", k.Resource, err)
	}
	statusStore := *store
	ss := statusStrategy[T]{strategy: s}
	statusStore.UpdateStrategy = ss
	statusStore.ResetFieldsStrategy = ss
	return &REST{Store: store, shortNames: k.ShortNames}, &StatusREST{store: &statusStore}, nil
}
