// Package claims holds the Flux Kustomizations that FluxClaims hand to
// Reverser. A claim is held while a GitTarget in its namespace names it in
// spec.applierRef and the user in its status.authorizedBy may still get and
// patch the Kustomization: Reverser then holds the Kustomization's and its
// GitRepository's schedules (pkg/applier) and, once, converges it
// (Startup). A claim no GitTarget names, no longer authorised, or deleted
// (a finalizer waits for it) gives the schedules back as they were.
//
// A held claim says so in its Held condition, which the mirror controller
// reads: it then hands the claim to the branch worker of the GitTarget,
// which decides when Flux applies (Startup, ForeignCommit, Repair,
// CatchUp). The worker's reports reach this controller through Operations,
// and it writes them into status.operation and status.lastAppliedRevision.
//
// Locks and blocking: Operations.mu guards the latest report of each claim;
// it is never held while calling anything. Reconciles never wait for Flux.
package claims

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"reverser.dev/reverser/pkg/admission"
	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/pkg/controller/loop"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/tenancy"
	"reverser.dev/reverser/pkg/worker"
)

// Finalizer keeps a held claim until its applier's schedule is given back.
const Finalizer = "reverser.dev/release-applier"

// Config wires the controller.
type Config struct {
	Reverser versioned.Interface
	Factory  informers.SharedInformerFactory
	// Dynamic reaches this cluster's Flux objects (inCluster providers).
	Dynamic dynamic.Interface
	// Authorizer checks, on every reconcile, that status.authorizedBy may
	// still get and patch the Kustomization.
	Authorizer authorizer.Authorizer
	Resync     time.Duration
	Clock      clock.PassiveClock
	// Operations brings the converges branch workers report.
	Operations *Operations
}

// ConditionHeld says whether Reverser holds the applier's schedule; the
// mirror controller hands a held claim to the GitTarget's worker.
const ConditionHeld = "Held"

// Operations keeps the newest converge each branch worker reported, by
// claim ("namespace/name"), for the claim's status.
type Operations struct {
	mu      sync.Mutex
	reports map[string]worker.ApplyReport
	notify  func(claim string)
}

// NewOperations returns an empty store.
func NewOperations() *Operations { return &Operations{reports: map[string]worker.ApplyReport{}} }

// Record keeps r as claim's newest converge; it never blocks, so a worker
// may call it.
func (o *Operations) Record(claim string, r worker.ApplyReport) {
	o.mu.Lock()
	o.reports[claim] = r
	notify := o.notify
	o.mu.Unlock()
	if notify != nil {
		notify(claim)
	}
}

func (o *Operations) get(claim string) (worker.ApplyReport, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.reports[claim]
	return r, ok
}

func (o *Operations) forget(claim string) {
	o.mu.Lock()
	delete(o.reports, claim)
	o.mu.Unlock()
}

// Controller holds FluxClaims.
type Controller struct {
	cfg     Config
	flux    *applier.Flux
	claims  listers.FluxClaimLister
	targets listers.GitTargetLister
	kps     listers.KubeProviderLister
	queue   workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced
}

// New builds the controller and registers its informers.
func New(cfg Config) *Controller {
	if cfg.Resync == 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Operations == nil {
		cfg.Operations = NewOperations()
	}
	r := cfg.Factory.Reverser().V1alpha1()
	c := &Controller{cfg: cfg, flux: &applier.Flux{Client: cfg.Dynamic}, claims: r.FluxClaims().Lister(), targets: r.GitTargets().Lister(),
		kps: r.KubeProviders().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "fluxclaims"})}
	cfg.Operations.mu.Lock()
	cfg.Operations.notify = c.queue.Add
	cfg.Operations.mu.Unlock()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, err := r.FluxClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue})
	utilruntime.Must(err)
	// A GitTarget that starts or stops naming a claim changes whether it is held.
	byTarget := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if gt, ok := obj.(*v1.GitTarget); ok && gt.Spec.ApplierRef != nil && gt.Spec.ApplierRef.Kind == v1.ApplierKindFluxClaim {
			c.queue.Add(gt.Namespace + "/" + gt.Spec.ApplierRef.Name)
		}
	}
	_, err = r.GitTargets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: byTarget, DeleteFunc: byTarget, UpdateFunc: func(old, obj any) { byTarget(old); byTarget(obj) }})
	utilruntime.Must(err)
	c.synced = []cache.InformerSynced{r.FluxClaims().Informer().HasSynced, r.GitTargets().Informer().HasSynced,
		r.KubeProviders().Informer().HasSynced}
	return c
}

// Run holds claims until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return loop.Run(ctx, c.queue, c.synced, workers, "FluxClaim", c.reconcile)
}

// named says whether a GitTarget in the claim's namespace names it.
func (c *Controller) named(claim *v1.FluxClaim) (bool, error) {
	gts, err := c.targets.GitTargets(claim.Namespace).List(labels.Everything())
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(gts, func(gt *v1.GitTarget) bool {
		return gt.Spec.ApplierRef != nil && gt.Spec.ApplierRef.Kind == v1.ApplierKindFluxClaim && gt.Spec.ApplierRef.Name == claim.Name
	}), nil
}

// reconcile holds or releases one claim; it returns when to look again.
func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	claim, err := c.claims.FluxClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.cfg.Operations.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ks := applier.Ref{Namespace: claim.Spec.KustomizationRef.Namespace, Name: claim.Spec.KustomizationRef.Name}
	if claim.DeletionTimestamp != nil {
		return 0, c.release(ctx, claim, ks, key, nil)
	}
	named, err := c.named(claim)
	if err != nil {
		return 0, err
	}
	if !named {
		return c.cfg.Resync, c.release(ctx, claim, ks, key, &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "NotNamed", Message: "No GitTarget in this namespace names this claim in spec.applierRef: Flux keeps its own schedule."})
	}
	kp, err := c.kps.Get(claim.Spec.KubeProviderRef.Name)
	switch {
	case apierrors.IsNotFound(err):
		return c.cfg.Resync, c.release(ctx, claim, ks, key, stalled("KubeProviderNotFound", fmt.Sprintf(
			"KubeProvider %s does not exist: create it or fix spec.kubeProviderRef", claim.Spec.KubeProviderRef.Name)))
	case err != nil:
		return 0, err
	case !kp.Spec.InCluster:
		return c.cfg.Resync, c.release(ctx, claim, ks, key, stalled("RemoteNotSupported", fmt.Sprintf(
			"KubeProvider %s reaches another cluster; claims are held only through an inCluster provider for now", kp.Name)))
	}
	if refusal, err := c.authorized(ctx, claim); err != nil || refusal != "" {
		if err != nil {
			return 0, err
		}
		return c.cfg.Resync, c.release(ctx, claim, ks, key, &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "NotAuthorized", Message: refusal})
	}
	if !slices.Contains(claim.Finalizers, Finalizer) {
		updated := claim.DeepCopy()
		updated.Finalizers = append(updated.Finalizers, Finalizer)
		_, err := c.cfg.Reverser.ReverserV1alpha1().FluxClaims(ns).Update(ctx, updated, metav1.UpdateOptions{})
		return 0, ignoreConflict(err) // its event brings the claim back
	}
	if err := c.flux.TakeOver(ctx, ks, key); err != nil {
		return c.cfg.Resync, c.writeStatus(ctx, claim, stalled(reasonFor(err), err.Error()), false)
	}
	return c.cfg.Resync, c.writeStatus(ctx, claim, c.holding(key, ks), true)
}

// holding is the Ready condition of a held claim: Holding, or ApplierFailing
// when Flux failed the newest converge.
func (c *Controller) holding(key string, ks applier.Ref) *metav1.Condition {
	if r, ok := c.cfg.Operations.get(key); ok && r.Failure != "" {
		return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ApplierFailing",
			Message: fmt.Sprintf("Flux failed to apply %s: %s; Reverser asks again with a backoff, and the fix is in the branch or the cluster",
				r.Head, r.Failure)}
	}
	return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Holding", Message: fmt.Sprintf(
		"Reverser holds the schedule of Kustomization %s and its GitRepository: Flux applies when Reverser asks.", ks)}
}

// release gives the schedules back and, with why, says so in status; a
// deleted claim loses its finalizer instead.
func (c *Controller) release(ctx context.Context, claim *v1.FluxClaim, ks applier.Ref, key string, why *metav1.Condition) error {
	if slices.Contains(claim.Finalizers, Finalizer) {
		if err := c.flux.Release(ctx, ks, key); err != nil && !meta.IsNoMatchError(err) {
			return err
		}
		updated := claim.DeepCopy()
		updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(f string) bool { return f == Finalizer })
		_, err := c.cfg.Reverser.ReverserV1alpha1().FluxClaims(claim.Namespace).Update(ctx, updated, metav1.UpdateOptions{})
		return ignoreConflict(err) // its event brings the claim back for the status
	}
	if why == nil {
		return nil
	}
	return c.writeStatus(ctx, claim, why, false)
}

// authorized asks again whether status.authorizedBy may still get and
// patch the Kustomization; it returns the refusal in words a user can act on.
func (c *Controller) authorized(ctx context.Context, claim *v1.FluxClaim) (string, error) {
	a := claim.Status.AuthorizedBy
	if a == nil {
		return "nobody is recorded as having authorised this claim: re-apply it", nil
	}
	ref := claim.Spec.KustomizationRef
	missing, err := tenancy.Missing(ctx, c.cfg.Authorizer, &user.DefaultInfo{Name: a.Username, UID: a.UID, Groups: a.Groups},
		tenancy.ClaimAccess(admission.FluxKustomizationGroup, admission.FluxKustomizationResource, ref.Namespace, ref.Name))
	if err != nil || len(missing) == 0 {
		return "", err
	}
	return tenancy.DeniedClaim(a.Username, missing), nil
}

func stalled(reason, message string) *metav1.Condition {
	return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

// reasonFor names an applier error for the Ready condition.
func reasonFor(err error) string {
	switch {
	case meta.IsNoMatchError(err) || strings.Contains(err.Error(), "the server could not find the requested resource"):
		return "CRDNotInstalled"
	case apierrors.IsNotFound(err):
		return "ApplierNotFound"
	case apierrors.IsForbidden(err):
		return "Forbidden"
	case errors.Is(err, applier.ErrNotGitRepository):
		return "UnsupportedSource"
	case strings.Contains(err.Error(), "is held by FluxClaim"):
		return "HeldByAnotherClaim"
	}
	return "ApplierFailing"
}

// writeStatus writes ready, held and the newest converge reported when
// they differ from the claim's.
func (c *Controller) writeStatus(ctx context.Context, claim *v1.FluxClaim, ready *metav1.Condition, held bool) error {
	key := claim.Namespace + "/" + claim.Name
	updated := claim.DeepCopy()
	updated.Status.ObservedGeneration = claim.Generation
	if r, ok := c.cfg.Operations.get(key); ok {
		updated.Status.Operation = operation(r)
		if r.LastAppliedRevision != "" {
			updated.Status.LastAppliedRevision = r.LastAppliedRevision
		}
	}
	meta.SetStatusCondition(&updated.Status.Conditions, *ready)
	heldCond := metav1.Condition{Type: ConditionHeld, Status: metav1.ConditionFalse, Reason: ready.Reason,
		Message: "Flux keeps its own schedule."}
	if held {
		heldCond = metav1.Condition{Type: ConditionHeld, Status: metav1.ConditionTrue, Reason: "Holding",
			Message: "Reverser holds Flux's schedule and asks it to apply."}
	}
	meta.SetStatusCondition(&updated.Status.Conditions, heldCond)
	if equalStatus(updated.Status, claim.Status) {
		return nil
	}
	_, err := c.cfg.Reverser.ReverserV1alpha1().FluxClaims(claim.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	return ignoreConflict(err)
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func equalStatus(a, b v1.ApplierClaimStatus) bool { return apiequality.Semantic.DeepEqual(a, b) }

// operation is a worker's converge report as the claim's status shows it:
// the revision asked for, and when it was sent and done.
func operation(r worker.ApplyReport) *v1.ApplierOperation {
	// Whole seconds, as the API stores them: a status that equals what is
	// stored is not written again.
	op := &v1.ApplierOperation{Reason: v1.ConvergeReason(r.Reason), Revision: r.Head, StartedAt: &metav1.Time{Time: r.Started.Truncate(time.Second)}}
	if !r.Finished.IsZero() {
		op.FinishedAt = &metav1.Time{Time: r.Finished.Truncate(time.Second)}
	}
	return op
}
