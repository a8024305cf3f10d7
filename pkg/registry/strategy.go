// Package registry holds what every reverser.dev kind's storage shares: the
// spec/status split, generation bumps, validation plumbing, table output and
// the REST types. Each kind's package under pkg/registry/<kind> says only what
// is particular to it.
package registry

import (
	"context"
	"fmt"
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"reverser.dev/reverser/pkg/apis/reverser/validation"
)

// Object is a reverser.dev internal object: it has Spec and Status fields.
type Object interface {
	runtime.Object
	metav1.Object
}

// Kind describes one kind's storage. T is a pointer to the internal type.
type Kind[T Object] struct {
	// Resource is the plural resource name; Singular its singular.
	Resource, Singular string
	// ShortNames and Categories feed discovery (`kubectl get gt`, `kubectl get reverser`).
	ShortNames []string
	Namespaced bool
	New        func() T
	NewList    func() runtime.Object

	// PrepareForCreate runs after status is cleared; it may fill server-set fields.
	PrepareForCreate func(ctx context.Context, obj T)
	// PrepareForUpdate runs after status is restored on an update of the
	// main resource; it may fill server-set fields.
	PrepareForUpdate func(ctx context.Context, obj, old T)
	// PrepareStatusUpdate runs after spec is restored on a status write; it
	// may restore status fields that nobody may change.
	PrepareStatusUpdate func(obj, old T)
	// Validate checks the whole object on create and update.
	Validate func(obj T) field.ErrorList
	// ValidateUpdate checks what may not change; Validate runs too.
	ValidateUpdate func(obj, old T) field.ErrorList
	// ValidateStatus checks a status write beyond observedGeneration and
	// conditions, which every kind's status has and which are always checked.
	ValidateStatus func(obj T) field.ErrorList

	// ExtraFields adds selectable fields beyond metadata.name/namespace.
	ExtraFields func(obj T) fields.Set
	// Table is how `kubectl get` shows the kind.
	Table TableSpec[T]
}

// strategy implements the create/update/delete strategies of the main
// resource: status is never written here, and a spec change bumps generation.
type strategy[T Object] struct {
	runtime.ObjectTyper
	names.NameGenerator
	kind *Kind[T]
}

func (s strategy[T]) NamespaceScoped() bool { return s.kind.Namespaced }

func (s strategy[T]) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	o := obj.(T)
	setField(o, "Status", reflect.Zero(fieldOf(o, "Status").Type()))
	o.SetGeneration(1)
	if s.kind.PrepareForCreate != nil {
		s.kind.PrepareForCreate(ctx, o)
	}
}

func (s strategy[T]) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	setField(o, "Status", fieldOf(prev, "Status"))
	if SpecChanged(o, prev) {
		o.SetGeneration(prev.GetGeneration() + 1)
	}
	if s.kind.PrepareForUpdate != nil {
		s.kind.PrepareForUpdate(ctx, o, prev)
	}
}

// SpecChanged says whether an update changes the spec.
func SpecChanged(obj, old Object) bool {
	return !apiequality.Semantic.DeepEqual(fieldOf(obj, "Spec").Interface(), fieldOf(old, "Spec").Interface())
}

func (s strategy[T]) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	o := obj.(T)
	errs := apivalidation.ValidateObjectMetaAccessor(o, s.kind.Namespaced, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, s.kind.Validate(o)...)
}

func (s strategy[T]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	o, prev := obj.(T), old.(T)
	errs := apivalidation.ValidateObjectMetaAccessorUpdate(o, prev, field.NewPath("metadata"))
	errs = append(errs, s.kind.Validate(o)...)
	if s.kind.ValidateUpdate != nil {
		errs = append(errs, s.kind.ValidateUpdate(o, prev)...)
	}
	return errs
}

func (strategy[T]) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

func (strategy[T]) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

func (strategy[T]) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy[T]) AllowUnconditionalUpdate(context.Context) bool { return true }
func (strategy[T]) Canonicalize(runtime.Object)                   {}
func (s strategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(fieldpath.MakePathOrDie("status"))
}

// statusStrategy writes only status: spec and user metadata stay as stored.
type statusStrategy[T Object] struct {
	strategy[T]
}

func (s statusStrategy[T]) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	setField(o, "Spec", fieldOf(prev, "Spec"))
	metav1.ResetObjectMetaForStatus(o, prev)
	if s.kind.PrepareStatusUpdate != nil {
		s.kind.PrepareStatusUpdate(o, prev)
	}
}

func (s statusStrategy[T]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	o, prev := obj.(T), old.(T)
	errs := apivalidation.ValidateObjectMetaAccessorUpdate(o, prev, field.NewPath("metadata"))
	status := fieldOf(o, "Status")
	errs = append(errs, validation.ValidateStatusCommon(status.FieldByName("ObservedGeneration").Int(),
		Conditions(o), field.NewPath("status"))...)
	if s.kind.ValidateStatus != nil {
		errs = append(errs, s.kind.ValidateStatus(o)...)
	}
	return errs
}

func (s statusStrategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata", "labels"),
		fieldpath.MakePathOrDie("metadata", "annotations"))
}

func resetFields(paths ...fieldpath.Path) map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"reverser.dev/v1alpha1": fieldpath.NewSet(paths...)}
}

// attrs returns the labels and selectable fields of an object.
func (k *Kind[T]) attrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	o, ok := obj.(T)
	if !ok {
		return nil, nil, fmt.Errorf("given object is a %T, not a %s", obj, k.Singular)
	}
	fs := fields.Set{"metadata.name": o.GetName()}
	if k.Namespaced {
		fs["metadata.namespace"] = o.GetNamespace()
	}
	if k.ExtraFields != nil {
		fs = generic.MergeFieldsSets(fs, k.ExtraFields(o))
	}
	return labels.Set(o.GetLabels()), fs, nil
}

func (k *Kind[T]) predicate(label labels.Selector, fld fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: fld, GetAttrs: k.attrs}
}

// fieldOf and setField reach the Spec and Status fields every kind has. The
// kinds are checked once in NewREST, so a missing field fails at start-up.
func fieldOf(obj any, name string) reflect.Value {
	return reflect.ValueOf(obj).Elem().FieldByName(name)
}

func setField(obj any, name string, v reflect.Value) {
	fieldOf(obj, name).Set(v)
}

// Conditions returns status.conditions, which every kind has.
func Conditions(obj any) []metav1.Condition {
	return fieldOf(obj, "Status").FieldByName("Conditions").Interface().([]metav1.Condition)
}

var _ rest.RESTCreateUpdateStrategy = strategy[Object]{}
