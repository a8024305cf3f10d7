package claims

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	typedv1alpha1 "reverser.dev/reverser/pkg/generated/clientset/versioned/typed/reverser/v1alpha1"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
)

// Claim is a claim of either kind, as the claims controller and the mirror
// read it: a copy of the object, and where its parts are in it.
type Claim struct {
	Kind         v1.ApplierKind
	Meta         *metav1.ObjectMeta
	Status       *v1.ApplierClaimStatus
	KubeProvider string
	// Target is the applier object held: a Kustomization or an Application.
	Target applier.Ref
	// CatchUpAfter is spec.catchUpAfter, nil when the claim leaves it out.
	CatchUpAfter *metav1.Duration
	// Suspend is spec.suspend: the applier keeps its own schedule.
	Suspend bool

	// obj is the copy the fields above point into, for writes.
	obj runtime.Object
}

// Key is the claim's key (see Key).
func (cl *Claim) Key() string { return Key(cl.Kind, cl.Meta.Namespace, cl.Meta.Name) }

// Reader reads claims of both kinds from the shared informers' caches.
type Reader struct {
	flux listers.FluxClaimLister
	argo listers.ArgoCDClaimLister
}

// NewReader registers the claim informers of f.
func NewReader(f informers.SharedInformerFactory) *Reader {
	r := f.Reverser().V1alpha1()
	return &Reader{flux: r.FluxClaims().Lister(), argo: r.ArgoCDClaims().Lister()}
}

// Get returns a copy of claim namespace/name of kind; the cache's NotFound
// when there is none.
func (r *Reader) Get(kind v1.ApplierKind, namespace, name string) (*Claim, error) {
	switch kind {
	case v1.ApplierKindFluxClaim:
		fc, err := r.flux.FluxClaims(namespace).Get(name)
		if err != nil {
			return nil, err
		}
		fc = fc.DeepCopy()
		return &Claim{Kind: kind, Meta: &fc.ObjectMeta, Status: &fc.Status, KubeProvider: fc.Spec.KubeProviderRef.Name,
			Target:       applier.Ref{Namespace: fc.Spec.KustomizationRef.Namespace, Name: fc.Spec.KustomizationRef.Name},
			CatchUpAfter: fc.Spec.CatchUpAfter, Suspend: fc.Spec.Suspend, obj: fc}, nil
	case v1.ApplierKindArgoCDClaim:
		ac, err := r.argo.ArgoCDClaims(namespace).Get(name)
		if err != nil {
			return nil, err
		}
		ac = ac.DeepCopy()
		return &Claim{Kind: kind, Meta: &ac.ObjectMeta, Status: &ac.Status, KubeProvider: ac.Spec.KubeProviderRef.Name,
			Target:       applier.Ref{Namespace: ac.Spec.ApplicationRef.Namespace, Name: ac.Spec.ApplicationRef.Name},
			CatchUpAfter: ac.Spec.CatchUpAfter, Suspend: ac.Spec.Suspend, obj: ac}, nil
	}
	return nil, fmt.Errorf("no claim kind %q", kind)
}

// write updates the claim's object, or with status its status, through api.
func (cl *Claim) write(ctx context.Context, api typedv1alpha1.ReverserV1alpha1Interface, status bool) error {
	var err error
	switch o := cl.obj.(type) {
	case *v1.FluxClaim:
		if status {
			_, err = api.FluxClaims(o.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{})
		} else {
			_, err = api.FluxClaims(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
		}
	case *v1.ArgoCDClaim:
		if status {
			_, err = api.ArgoCDClaims(o.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{})
		} else {
			_, err = api.ArgoCDClaims(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
		}
	default:
		err = fmt.Errorf("claim %s has no object to write", cl.Key())
	}
	return err
}
