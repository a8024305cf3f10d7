package applier

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/worker"
)

const (
	// ArgoCDManager is the field manager of Argo CD's server-side applies.
	ArgoCDManager = "argocd-controller"
	// ConvergeInfo names the operation info entry that carries a
	// converge's token, so its operationState is told from others'.
	ConvergeInfo = "reverser.dev/converge"
)

// ArgoCD drives Argo CD Applications through client, following Argo CD's
// documented contract: automated sync is spec.syncPolicy.automated; a sync
// is asked by writing .operation, which the application controller moves
// into status.operationState and runs to a phase, reporting the revision in
// status.operationState.syncResult.revision.
type ArgoCD struct {
	Client dynamic.Interface
}

// TakeOver turns automated sync off for claim, keeping what it was. A
// claim another holds is refused. Holding an Application touches nothing
// else: may is never asked.
func (a *ArgoCD) TakeOver(ctx context.Context, app Ref, claim string, _ Authorize) error {
	obj, err := a.Client.Resource(v1.ArgoCDApplications).Namespace(app.Namespace).Get(ctx, app.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Application %s: %w", app, err)
	}
	claims := claimsOf(obj)
	if others := slices.DeleteFunc(slices.Clone(claims), func(c string) bool { return c == claim }); len(others) > 0 {
		return fmt.Errorf("the Application %s is held by ArgoCDClaim %s already", app, others[0])
	}
	automated, found, _ := unstructured.NestedMap(obj.Object, "spec", "syncPolicy", "automated")
	if slices.Contains(claims, claim) && !found {
		return nil
	}
	annotations := map[string]any{v1.ClaimedByAnnotation: claim}
	if !slices.Contains(claims, claim) {
		original := ""
		if found {
			data, err := json.Marshal(automated)
			if err != nil {
				return err
			}
			original = string(data)
		}
		annotations[v1.OriginalAutomatedSyncAnnotation] = original
	}
	if err := patchHeld(ctx, a.Client, v1.ArgoCDApplications, obj, annotations, map[string]any{"syncPolicy": map[string]any{"automated": nil}}); err != nil {
		return fmt.Errorf("taking over Application %s: %w", app, err)
	}
	return nil
}

// Release gives automated sync back as it was before claim took it. An
// Application already gone is fine.
func (a *ArgoCD) Release(ctx context.Context, app Ref, claim string) error {
	obj, err := a.Client.Resource(v1.ArgoCDApplications).Namespace(app.Namespace).Get(ctx, app.Name, metav1.GetOptions{})
	if err != nil {
		return ignoreNotFound(err, "reading Application "+app.String())
	}
	if !slices.Contains(claimsOf(obj), claim) {
		return nil
	}
	var spec map[string]any
	if original := obj.GetAnnotations()[v1.OriginalAutomatedSyncAnnotation]; original != "" {
		var automated map[string]any
		if err := json.Unmarshal([]byte(original), &automated); err != nil {
			return fmt.Errorf("reading annotation %s of Application %s: %w", v1.OriginalAutomatedSyncAnnotation, app, err)
		}
		spec = map[string]any{"syncPolicy": map[string]any{"automated": automated}}
	}
	if err := patchHeld(ctx, a.Client, v1.ArgoCDApplications, obj, map[string]any{v1.ClaimedByAnnotation: nil, v1.OriginalAutomatedSyncAnnotation: nil}, spec); err != nil {
		return fmt.Errorf("releasing Application %s: %w", app, err)
	}
	return nil
}

// HeldBy says whether claim holds the Application app, and the namespace
// Argo CD puts the documents without one into: spec.destination.namespace.
func (a *ArgoCD) HeldBy(ctx context.Context, app Ref, claim string) (held bool, namespace string, err error) {
	obj, err := a.Client.Resource(v1.ArgoCDApplications).Namespace(app.Namespace).Get(ctx, app.Name, metav1.GetOptions{})
	if err != nil {
		return false, "", fmt.Errorf("reading Application %s: %w", app, err)
	}
	namespace, _, _ = unstructured.NestedString(obj.Object, "spec", "destination", "namespace")
	return slices.Contains(claimsOf(obj), claim), namespace, nil
}

// Application is one Argo CD Application as a branch worker's applier.
type Application struct {
	ArgoCD *ArgoCD
	Ref    Ref
}

// Send asks a sync of the Application's target revision (the branch's
// head), carrying token in the operation's info.
func (a *Application) Send(ctx context.Context, token string) (worker.Operation, error) {
	data, err := json.Marshal(map[string]any{"operation": map[string]any{
		"initiatedBy": map[string]any{"username": "reverser"},
		"info":        []any{map[string]any{"name": ConvergeInfo, "value": token}},
		"sync":        map[string]any{},
	}})
	if err != nil {
		return nil, err
	}
	_, err = a.ArgoCD.Client.Resource(v1.ArgoCDApplications).Namespace(a.Ref.Namespace).Patch(ctx, a.Ref.Name, types.MergePatchType, data,
		metav1.PatchOptions{FieldManager: "reverser"})
	if err != nil {
		return nil, fmt.Errorf("asking Application %s to sync: %w", a.Ref, err)
	}
	return &argoOperation{app: a, token: token}, nil
}

type argoOperation struct {
	app   *Application
	token string
}

// Follow reads the Application's operationState: done once the operation
// that carries the token reached Succeeded, Failed or Error. A sync is one
// step, so it never asks resume: once sent, it is applying.
func (o *argoOperation) Follow(ctx context.Context, _ func() bool) (worker.ApplyProgress, error) {
	obj, err := o.app.ArgoCD.Client.Resource(v1.ArgoCDApplications).Namespace(o.app.Ref.Namespace).Get(ctx, o.app.Ref.Name, metav1.GetOptions{})
	if err != nil {
		return worker.ApplyProgress{}, fmt.Errorf("reading Application %s: %w", o.app.Ref, err)
	}
	infos, _, _ := unstructured.NestedSlice(obj.Object, "status", "operationState", "operation", "info")
	if !slices.ContainsFunc(infos, func(i any) bool {
		m, _ := i.(map[string]any)
		return m["name"] == ConvergeInfo && m["value"] == o.token
	}) {
		return worker.ApplyProgress{}, nil // not started yet
	}
	phase, _, _ := unstructured.NestedString(obj.Object, "status", "operationState", "phase")
	revision, _, _ := unstructured.NestedString(obj.Object, "status", "operationState", "syncResult", "revision")
	switch phase {
	case "Succeeded":
		return worker.ApplyProgress{Done: true, Revision: revision}, nil
	case "Failed", "Error":
		message, _, _ := unstructured.NestedString(obj.Object, "status", "operationState", "message")
		return worker.ApplyProgress{Done: true, Revision: revision, Failure: fmt.Sprintf("sync %s: %s", phase, message)}, nil
	}
	return worker.ApplyProgress{}, nil
}
