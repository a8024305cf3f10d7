// Package applier drives the GitOps appliers Reverser claims, so that they
// never fight live edits: it takes an applier's own schedule over (the
// applier no longer applies on its interval), asks it to apply when the
// branch needs it, follows the request to the revision applied, and gives
// the schedule back exactly as it was when the claim ends.
//
// Everything here is a step: a call reads the applier's objects, writes at
// most one change conditional on the resourceVersion it read, and returns;
// nothing waits for an applier. The claim controller calls the steps again
// on its resyncs and on the applier's events.
package applier

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/worker"
)

const (
	// HeldInterval replaces spec.interval while a claim holds the object: a
	// year, so Flux's own schedule never fires and only Reverser's requests
	// make it fetch or apply.
	HeldInterval = "8760h"
	// RequestedAtAnnotation is Flux's "reconcile now".
	RequestedAtAnnotation = "reconcile.fluxcd.io/requestedAt"
)

// ErrNotGitRepository: the Kustomization's source is of a kind Reverser
// cannot follow.
var ErrNotGitRepository = errors.New("the Kustomization's spec.sourceRef is not a GitRepository")

// Flux drives Flux Kustomizations and their GitRepositories through client.
type Flux struct {
	Client dynamic.Interface
}

// Ref names a namespaced object.
type Ref struct{ Namespace, Name string }

func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// source returns the GitRepository a Kustomization applies.
func source(ks *unstructured.Unstructured) (Ref, error) {
	kind, _, _ := unstructured.NestedString(ks.Object, "spec", "sourceRef", "kind")
	name, _, _ := unstructured.NestedString(ks.Object, "spec", "sourceRef", "name")
	ns, _, _ := unstructured.NestedString(ks.Object, "spec", "sourceRef", "namespace")
	if kind != "GitRepository" {
		return Ref{}, fmt.Errorf("%w (it is a %q)", ErrNotGitRepository, kind)
	}
	if ns == "" {
		ns = ks.GetNamespace()
	}
	return Ref{Namespace: ns, Name: name}, nil
}

func claimsOf(obj *unstructured.Unstructured) []string {
	v := obj.GetAnnotations()[v1.ClaimedByAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Authorize says whether the claim's author may have Reverser hold obj, of
// resource gr, besides the applier object the claim names; nil allows.
type Authorize func(ctx context.Context, gr schema.GroupResource, obj Ref) error

// TakeOver holds the schedules of the Kustomization ks and of its
// GitRepository for claim ("namespace/name"), once may allows the
// GitRepository (which may be another team's, in another namespace). It is
// idempotent. A Kustomization another claim holds is refused. A
// GitRepository the claim held before the Kustomization's sourceRef
// changed is given back.
func (f *Flux) TakeOver(ctx context.Context, ks Ref, claim string, may Authorize) error {
	obj, err := f.Client.Resource(v1.FluxKustomizations).Namespace(ks.Namespace).Get(ctx, ks.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Kustomization %s: %w", ks, err)
	}
	if others := slices.DeleteFunc(claimsOf(obj), func(c string) bool { return c == claim }); len(others) > 0 {
		return fmt.Errorf("the Kustomization %s is held by FluxClaim %s already", ks, others[0])
	}
	src, err := source(obj)
	if err != nil {
		return err
	}
	if may != nil {
		// Before any write: the source is checked as the Kustomization
		// names it in the very read that is held.
		if err := may(ctx, v1.FluxGitRepositories.GroupResource(), src); err != nil {
			return err
		}
	}
	if err := f.hold(ctx, v1.FluxKustomizations, obj, claim); err != nil {
		return fmt.Errorf("taking over Kustomization %s: %w", ks, err)
	}
	repo, err := f.Client.Resource(v1.FluxGitRepositories).Namespace(src.Namespace).Get(ctx, src.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading GitRepository %s: %w", src, err)
	}
	if err := f.hold(ctx, v1.FluxGitRepositories, repo, claim); err != nil {
		return fmt.Errorf("taking over GitRepository %s: %w", src, err)
	}
	return f.releaseSources(ctx, claim, src)
}

// releaseSources gives back every GitRepository claim holds but keep: what
// a claim holds is what the claimed-by annotations Reverser wrote say, not
// what the Kustomization's sourceRef says now, which its writer may have
// changed since.
func (f *Flux) releaseSources(ctx context.Context, claim string, keep Ref) error {
	repos, err := f.Client.Resource(v1.FluxGitRepositories).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing v1.FluxGitRepositories: %w", err)
	}
	for i := range repos.Items {
		repo := &repos.Items[i]
		if (Ref{Namespace: repo.GetNamespace(), Name: repo.GetName()}) == keep || !slices.Contains(claimsOf(repo), claim) {
			continue
		}
		if err := f.unhold(ctx, v1.FluxGitRepositories, repo, claim); err != nil {
			return fmt.Errorf("releasing GitRepository %s/%s: %w", repo.GetNamespace(), repo.GetName(), err)
		}
	}
	return nil
}

// HeldBy says whether claim holds the Kustomization ks (its claimed-by
// annotation, which only TakeOver writes, names it), and the namespace
// Flux puts the documents of its folder into: spec.targetNamespace, ""
// when unset (Flux then needs each document, or the folder's
// kustomization, to name one).
func (f *Flux) HeldBy(ctx context.Context, ks Ref, claim string) (held bool, namespace string, err error) {
	obj, err := f.Client.Resource(v1.FluxKustomizations).Namespace(ks.Namespace).Get(ctx, ks.Name, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("reading Kustomization %s: %w", ks, err)
	}
	namespace, _, _ = unstructured.NestedString(obj.Object, "spec", "targetNamespace")
	return slices.Contains(claimsOf(obj), claim), namespace, nil
}

// hold adds claim to obj's holders, keeping the interval it had before its
// first holder, and sets the held interval.
func (f *Flux) hold(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, claim string) error {
	claims := claimsOf(obj)
	interval, _, _ := unstructured.NestedString(obj.Object, "spec", "interval")
	if slices.Contains(claims, claim) && interval == HeldInterval {
		return nil
	}
	annotations := map[string]any{v1.ClaimedByAnnotation: strings.Join(append(slices.DeleteFunc(claims, func(c string) bool { return c == claim }), claim), ",")}
	if len(claims) == 0 {
		annotations[v1.OriginalIntervalAnnotation] = interval
	}
	return f.patch(ctx, gvr, obj, annotations, HeldInterval)
}

// Release gives ks's schedule back, and that of every GitRepository the
// claim holds (whatever ks's sourceRef says now) once no other claim holds
// it: spec.interval as it was before the first claim, and no annotation of
// Reverser's left. Objects already gone are fine.
func (f *Flux) Release(ctx context.Context, ks Ref, claim string) error {
	obj, err := f.Client.Resource(v1.FluxKustomizations).Namespace(ks.Namespace).Get(ctx, ks.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		if err := f.unhold(ctx, v1.FluxKustomizations, obj, claim); err != nil {
			return fmt.Errorf("releasing Kustomization %s: %w", ks, err)
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Kustomization %s: %w", ks, err)
	}
	return f.releaseSources(ctx, claim, Ref{})
}

func (f *Flux) unhold(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, claim string) error {
	claims := claimsOf(obj)
	if !slices.Contains(claims, claim) {
		return nil
	}
	rest := slices.DeleteFunc(claims, func(c string) bool { return c == claim })
	if len(rest) > 0 {
		return f.patch(ctx, gvr, obj, map[string]any{v1.ClaimedByAnnotation: strings.Join(rest, ",")}, "")
	}
	original := obj.GetAnnotations()[v1.OriginalIntervalAnnotation]
	return f.patch(ctx, gvr, obj, map[string]any{v1.ClaimedByAnnotation: nil, v1.OriginalIntervalAnnotation: nil}, original)
}

// patch merges annotations (nil removes one) and, when interval is set,
// spec.interval into obj, conditional on the resourceVersion it was read at.
func (f *Flux) patch(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, annotations map[string]any,
	interval string) error {
	var spec map[string]any
	if interval != "" {
		spec = map[string]any{"interval": interval}
	}
	return patchHeld(ctx, f.Client, gvr, obj, annotations, spec)
}

// patchHeld merges annotations (nil removes one) and spec, when set, into
// obj, conditional on the resourceVersion it was read at.
func patchHeld(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured,
	annotations, spec map[string]any) error {
	p := map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(), "annotations": annotations}}
	if spec != nil {
		p["spec"] = spec
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = client.Resource(gvr).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, data, metav1.PatchOptions{
		FieldManager: "reverser"})
	return err
}

func ignoreNotFound(err error, what string) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Converge is one apply Reverser asked of a Kustomization: its GitRepository
// is asked to fetch first, and the Kustomization to apply only once the
// fetch is done, so the apply sees the new revision (asking both at once
// wastes an apply on the old one).
type Converge struct {
	// Token is the reconcile.fluxcd.io/requestedAt value of both requests.
	Token string
	// Applying: the GitRepository has fetched, the Kustomization is asked.
	Applying bool
}

// Progress is where a converge stands.
type Progress struct {
	// Done: the Kustomization handled the request; Applied is the revision
	// it reports applied ("main@sha1:<sha>"), Failure its Ready message when
	// the apply failed.
	Done             bool
	Applied, Failure string
	// Abandoned: resume said no once the fetch was done; nothing was applied.
	Abandoned bool
}

// Request starts a converge: the GitRepository of ks is asked to fetch.
func (f *Flux) Request(ctx context.Context, ks Ref, token string) (*Converge, error) {
	obj, err := f.Client.Resource(v1.FluxKustomizations).Namespace(ks.Namespace).Get(ctx, ks.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Kustomization %s: %w", ks, err)
	}
	src, err := source(obj)
	if err != nil {
		return nil, err
	}
	if err := f.request(ctx, v1.FluxGitRepositories, src, token); err != nil {
		return nil, err
	}
	return &Converge{Token: token}, nil
}

func (f *Flux) request(ctx context.Context, gvr schema.GroupVersionResource, ref Ref, token string) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{RequestedAtAnnotation: token}}})
	if err != nil {
		return err
	}
	_, err = f.Client.Resource(gvr).Namespace(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, data, metav1.PatchOptions{
		FieldManager: "reverser"})
	if err != nil {
		return fmt.Errorf("asking %s %s to reconcile: %w", gvr.Resource, ref, err)
	}
	return nil
}

// handled says whether obj's controller has handled the request token.
func handled(obj *unstructured.Unstructured, token string) bool {
	at, _, _ := unstructured.NestedString(obj.Object, "status", "lastHandledReconcileAt")
	return at == token
}

// Follow takes c one step: once the GitRepository has handled the fetch,
// the Kustomization is asked to apply, unless resume (nil: always) says no
// and abandons the converge; once the Kustomization has handled that, the
// converge is done.
func (f *Flux) Follow(ctx context.Context, ks Ref, c *Converge, resume func() bool) (Progress, error) {
	obj, err := f.Client.Resource(v1.FluxKustomizations).Namespace(ks.Namespace).Get(ctx, ks.Name, metav1.GetOptions{})
	if err != nil {
		return Progress{}, fmt.Errorf("reading Kustomization %s: %w", ks, err)
	}
	if !c.Applying {
		src, err := source(obj)
		if err != nil {
			return Progress{}, err
		}
		repo, err := f.Client.Resource(v1.FluxGitRepositories).Namespace(src.Namespace).Get(ctx, src.Name, metav1.GetOptions{})
		if err != nil {
			return Progress{}, fmt.Errorf("reading GitRepository %s: %w", src, err)
		}
		if !handled(repo, c.Token) {
			return Progress{}, nil
		}
		if resume != nil && !resume() {
			return Progress{Done: true, Abandoned: true}, nil
		}
		if err := f.request(ctx, v1.FluxKustomizations, ks, c.Token); err != nil {
			return Progress{}, err
		}
		c.Applying = true
		return Progress{}, nil
	}
	if !handled(obj, c.Token) {
		return Progress{}, nil
	}
	p := Progress{Done: true}
	p.Applied, _, _ = unstructured.NestedString(obj.Object, "status", "lastAppliedRevision")
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "False" {
			p.Failure, _ = m["message"].(string)
		}
	}
	return p, nil
}

// FluxManager is the field manager of kustomize-controller's applies: the
// objects it wrote last name it in managedFields.
const FluxManager = "kustomize-controller"

// Kustomization is one Flux Kustomization as a branch worker's applier: a
// converge is its two steps, followed to the revision it applied.
type Kustomization struct {
	Flux *Flux
	Ref  Ref
}

// Send asks the Kustomization's GitRepository to fetch.
func (k *Kustomization) Send(ctx context.Context, token string) (worker.Operation, error) {
	c, err := k.Flux.Request(ctx, k.Ref, token)
	if err != nil {
		return nil, err
	}
	return &fluxOperation{k: k, c: c}, nil
}

type fluxOperation struct {
	k *Kustomization
	c *Converge
}

// Follow takes the converge a step.
func (o *fluxOperation) Follow(ctx context.Context, resume func() bool) (worker.ApplyProgress, error) {
	p, err := o.k.Flux.Follow(ctx, o.k.Ref, o.c, resume)
	if err != nil || !p.Done {
		return worker.ApplyProgress{}, err
	}
	return worker.ApplyProgress{Done: true, Abandoned: p.Abandoned, Revision: CommitOf(p.Applied), Failure: p.Failure}, nil
}

// CommitOf is the commit of a Flux revision ("main@sha1:<sha>", or a bare
// sha).
func CommitOf(revision string) string {
	if i := strings.LastIndex(revision, ":"); i >= 0 {
		return revision[i+1:]
	}
	return revision
}
