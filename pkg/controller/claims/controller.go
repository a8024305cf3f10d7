// Package claims holds the appliers that FluxClaims (a Flux Kustomization)
// and ArgoCDClaims (an Argo CD Application) hand to Reverser. A claim is
// held while a GitTarget in its namespace names it in spec.applierRef and
// the user in its status.authorizedBy may still get and patch the applier
// object: Reverser then holds its schedule (pkg/applier: the Kustomization's
// and its GitRepository's intervals, the Application's automated sync). A
// claim no GitTarget names, no longer authorised, or deleted (a finalizer
// waits for it) gives the schedule back as it was. Both kinds share one
// queue, keyed by Key.
//
// A held claim says so in its Held condition, which the mirror controller
// reads: it then hands the claim to the branch worker of the GitTarget,
// which decides when the applier applies (Startup, ForeignCommit, Repair,
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/pkg/controller/loop"
	"reverser.dev/reverser/pkg/event"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	typedv1alpha1 "reverser.dev/reverser/pkg/generated/clientset/versioned/typed/reverser/v1alpha1"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	reverserv1alpha1 "reverser.dev/reverser/pkg/generated/informers/externalversions/reverser/v1alpha1"
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
	// Dynamic reaches this cluster's Flux and Argo CD objects (inCluster
	// providers).
	Dynamic dynamic.Interface
	// Authorizer checks, on every reconcile, that status.authorizedBy may
	// still get and patch the applier object.
	Authorizer authorizer.Authorizer
	Resync     time.Duration
	// RecordedGroupsMaxAge is how long the groups of status.authorizedBy
	// count in re-checks (tenancy.Subject); zero is the default.
	RecordedGroupsMaxAge time.Duration
	// NamespaceLabels reads a namespace's labels, for KubeProviders'
	// spec.consumerNamespaces selectors.
	NamespaceLabels tenancy.NamespaceLabels
	// Operations brings the converges branch workers report.
	Operations *Operations
	// Events records Ready changes and the hold's start and end on the
	// claim; nil records nothing.
	Events *event.Recorder
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

// Controller holds FluxClaims and ArgoCDClaims.
type Controller struct {
	cfg     Config
	kinds   map[v1.ApplierKind]*claimKind
	read    *Reader
	api     typedv1alpha1.ReverserV1alpha1Interface
	targets listers.GitTargetLister
	kps     listers.KubeProviderLister
	queue   workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced
}

// holder is what the controller needs of a claim kind's applier.
type holder interface {
	TakeOver(ctx context.Context, ref applier.Ref, claim string, may applier.Authorize) error
	Release(ctx context.Context, ref applier.Ref, claim string) error
}

// claimKind is one kind of claim: how its objects are read and written, and
// which applier object it holds.
type claimKind struct {
	kind v1.ApplierKind
	// group and resource of the applier object, for authorization; what
	// names it in messages ("Kustomization"), schedule what is held.
	group, resource, what, schedule string
	holder                          holder
}

// claim is a claim as the controller handles it: the shared model, and
// what its kind holds.
type claim struct {
	*Claim
	kind *claimKind
}

// Key is the queue's and Operations' key of a claim: its kind, namespace
// and name ("FluxClaim/team/apps"), so two kinds may share a name.
func Key(kind v1.ApplierKind, namespace, name string) string {
	return string(kind) + "/" + namespace + "/" + name
}

// New builds the controller and registers its informers.
func New(cfg Config) *Controller {
	if cfg.Resync == 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Operations == nil {
		cfg.Operations = NewOperations()
	}
	if cfg.RecordedGroupsMaxAge == 0 {
		cfg.RecordedGroupsMaxAge = tenancy.DefaultRecordedGroupsMaxAge
	}
	r := cfg.Factory.Reverser().V1alpha1()
	api := cfg.Reverser.ReverserV1alpha1()
	c := &Controller{cfg: cfg, targets: r.GitTargets().Lister(), kps: r.KubeProviders().Lister(), read: NewReader(cfg.Factory), api: api,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "applierclaims"})}
	c.kinds = map[v1.ApplierKind]*claimKind{
		v1.ApplierKindFluxClaim: {kind: v1.ApplierKindFluxClaim, group: v1.FluxKustomizations.Group,
			resource: v1.FluxKustomizations.Resource, what: "Kustomization", schedule: "Flux keeps its own schedule",
			holder: &applier.Flux{Client: cfg.Dynamic}},
		v1.ApplierKindArgoCDClaim: {kind: v1.ApplierKindArgoCDClaim, group: v1.ArgoCDApplications.Group,
			resource: v1.ArgoCDApplications.Resource, what: "Application", schedule: "Argo CD keeps its own automated sync",
			holder: &applier.ArgoCD{Client: cfg.Dynamic}},
	}
	cfg.Operations.mu.Lock()
	cfg.Operations.notify = c.queue.Add
	cfg.Operations.mu.Unlock()
	c.watch(r)
	return c
}

// watch enqueues the claims that changed, and those a GitTarget starts or
// stops naming.
func (c *Controller) watch(r reverserv1alpha1.Interface) {
	enqueue := func(kind v1.ApplierKind) func(obj any) {
		return func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				c.queue.Add(string(kind) + "/" + key)
			}
		}
	}
	for kind, inf := range map[v1.ApplierKind]cache.SharedIndexInformer{
		v1.ApplierKindFluxClaim: r.FluxClaims().Informer(), v1.ApplierKindArgoCDClaim: r.ArgoCDClaims().Informer()} {
		add := enqueue(kind)
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }, DeleteFunc: add})
		utilruntime.Must(err)
		c.synced = append(c.synced, inf.HasSynced)
	}
	// A GitTarget that starts or stops naming a claim changes whether it is held.
	byTarget := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if gt, ok := obj.(*v1.GitTarget); ok && gt.Spec.ApplierRef != nil {
			c.queue.Add(Key(gt.Spec.ApplierRef.Kind, gt.Namespace, gt.Spec.ApplierRef.Name))
		}
	}
	_, err := r.GitTargets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: byTarget, DeleteFunc: byTarget, UpdateFunc: func(old, obj any) { byTarget(old); byTarget(obj) }})
	utilruntime.Must(err)
	c.synced = append(c.synced, r.GitTargets().Informer().HasSynced, r.KubeProviders().Informer().HasSynced)
}

// Run holds claims until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return loop.Run(ctx, c.queue, c.synced, workers, "applier claims", c.reconcile)
}

// named says whether a GitTarget in the claim's namespace names it.
func (c *Controller) named(cl *claim) (bool, error) {
	gts, err := c.targets.GitTargets(cl.Meta.Namespace).List(labels.Everything())
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(gts, func(gt *v1.GitTarget) bool {
		return gt.Spec.ApplierRef != nil && gt.Spec.ApplierRef.Kind == cl.kind.kind && gt.Spec.ApplierRef.Name == cl.Meta.Name
	}), nil
}

// reconcile holds or releases one claim; it returns when to look again.
func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	kind, rest, _ := strings.Cut(key, "/")
	ns, name, _ := cache.SplitMetaNamespaceKey(rest)
	k, ok := c.kinds[v1.ApplierKind(kind)]
	if !ok {
		return 0, nil
	}
	read, err := c.read.Get(k.kind, ns, name)
	if apierrors.IsNotFound(err) {
		c.cfg.Operations.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	cl := &claim{Claim: read, kind: k}
	if cl.Meta.DeletionTimestamp != nil {
		return 0, c.release(ctx, cl, nil)
	}
	if why, err := c.notHeld(ctx, cl); err != nil || why != nil {
		if err != nil {
			return 0, err
		}
		return c.cfg.Resync, c.release(ctx, cl, why)
	}
	if !slices.Contains(cl.Meta.Finalizers, Finalizer) {
		cl.Meta.Finalizers = append(cl.Meta.Finalizers, Finalizer)
		return 0, ignoreConflict(cl.write(ctx, c.api, false)) // its event brings the claim back
	}
	annotated := ns + "/" + name
	if err := k.holder.TakeOver(ctx, cl.Target, annotated, c.mayHold(cl)); err != nil {
		var refused *notAuthorized
		if errors.As(err, &refused) {
			// Nothing was written; what the claim held before (a source
			// it may no longer hold) is given back. The finalizer stays,
			// or adding it again would loop.
			if err := k.holder.Release(ctx, cl.Target, annotated); err != nil && !meta.IsNoMatchError(err) {
				return 0, err
			}
			return c.cfg.Resync, c.writeStatus(ctx, cl, &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: "NotAuthorized", Message: refused.message}, false)
		}
		return c.cfg.Resync, c.writeStatus(ctx, cl, stalled(reasonFor(err), err.Error()), false)
	}
	return c.cfg.Resync, c.writeStatus(ctx, cl, c.holding(cl), true)
}

// notHeld says why the claim must not hold its applier now, in the order a
// user would fix it; nil: hold it.
func (c *Controller) notHeld(ctx context.Context, cl *claim) (*metav1.Condition, error) {
	named, err := c.named(cl)
	if err != nil {
		return nil, err
	}
	if !named {
		return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "NotNamed", Message: "No GitTarget in this namespace names this claim in spec.applierRef: " + cl.kind.schedule + "."}, nil
	}
	if cl.Suspend {
		// Asked for: Ready, so that kstatus tools read it Current.
		return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue,
			Reason: v1.ReasonSuspended, Message: "spec.suspend is true: the " + cl.kind.what + " keeps its own schedule until it is false again."}, nil
	}
	kp, err := c.kps.Get(cl.KubeProvider)
	switch {
	case apierrors.IsNotFound(err):
		return stalled("KubeProviderNotFound", fmt.Sprintf(
			"KubeProvider %s does not exist: create it or fix spec.kubeProviderRef", cl.KubeProvider)), nil
	case err != nil:
		return nil, err
	case !kp.Spec.InCluster:
		return stalled("RemoteNotSupported", fmt.Sprintf(
			"KubeProvider %s reaches another cluster; claims are held only through an inCluster provider for now", kp.Name)), nil
	}
	// A claim is admitted by its KubeProvider as a GitTarget is: a
	// namespace the provider stops admitting loses its holds.
	admitted, err := tenancy.Consumer(ctx, kp, cl.Meta.Namespace, c.cfg.NamespaceLabels)
	if err != nil {
		return nil, err
	}
	if !admitted {
		return stalled("KubeProviderNotLent", fmt.Sprintf(
			"KubeProvider %s does not admit claims from namespace %s: add it to the provider's spec.consumerNamespaces", kp.Name, cl.Meta.Namespace)), nil
	}
	if refusal, err := c.authorized(ctx, cl); err != nil || refusal != "" {
		if err != nil {
			return nil, err
		}
		return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "NotAuthorized", Message: refusal}, nil
	}
	return nil, nil
}

// holding is the Ready condition of a held claim: Holding, or ApplierFailing
// when the applier failed the newest converge.
func (c *Controller) holding(cl *claim) *metav1.Condition {
	if r, ok := c.cfg.Operations.get(cl.Key()); ok && r.Failure != "" {
		return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ApplierFailing",
			Message: fmt.Sprintf("The %s failed to apply %s: %s; Reverser asks again with a backoff, and the fix is in the branch or the cluster",
				cl.kind.what, r.Head, r.Failure)}
	}
	return &metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Holding", Message: fmt.Sprintf(
		"Reverser holds the schedule of %s %s: it applies when Reverser asks.", cl.kind.what, cl.Target)}
}

// release gives the schedule back and, with why, says so in status; a
// deleted claim loses its finalizer instead.
func (c *Controller) release(ctx context.Context, cl *claim, why *metav1.Condition) error {
	if slices.Contains(cl.Meta.Finalizers, Finalizer) {
		if err := cl.kind.holder.Release(ctx, cl.Target, cl.Meta.Namespace+"/"+cl.Meta.Name); err != nil && !meta.IsNoMatchError(err) {
			return err
		}
		cl.Meta.Finalizers = slices.DeleteFunc(cl.Meta.Finalizers, func(f string) bool { return f == Finalizer })
		return ignoreConflict(cl.write(ctx, c.api, false)) // its event brings the claim back for the status
	}
	if why == nil {
		return nil
	}
	return c.writeStatus(ctx, cl, why, false)
}

// authorized asks again whether status.authorizedBy may still get and
// patch the applier object; it returns the refusal in words a user can act on.
func (c *Controller) authorized(ctx context.Context, cl *claim) (string, error) {
	a := cl.Status.AuthorizedBy
	if a == nil {
		return "nobody is recorded as having authorised this claim: re-apply it", nil
	}
	now := time.Now()
	missing, err := tenancy.Missing(ctx, c.cfg.Authorizer, tenancy.Subject(a, now, c.cfg.RecordedGroupsMaxAge),
		tenancy.ClaimAccess(cl.kind.group, cl.kind.resource, cl.Target.Namespace, cl.Target.Name))
	if err != nil || len(missing) == 0 {
		return "", err
	}
	return tenancy.DeniedClaim(a.Username, missing) + tenancy.StaleHint(a, now, c.cfg.RecordedGroupsMaxAge), nil
}

// notAuthorized refuses to hold an object the claim's author may not
// patch; message says which, in words a user can act on.
type notAuthorized struct{ message string }

func (e *notAuthorized) Error() string { return e.message }

// mayHold asks, for each object besides the applier object that holding
// touches (a Kustomization's GitRepository, which may be another team's),
// whether status.authorizedBy may get and patch it.
func (c *Controller) mayHold(cl *claim) applier.Authorize {
	return func(ctx context.Context, gr schema.GroupResource, obj applier.Ref) error {
		a := cl.Status.AuthorizedBy
		if a == nil {
			return &notAuthorized{message: "nobody is recorded as having authorised this claim: re-apply it"}
		}
		missing, err := tenancy.Missing(ctx, c.cfg.Authorizer, tenancy.Subject(a, time.Now(), c.cfg.RecordedGroupsMaxAge),
			tenancy.ClaimAccess(gr.Group, gr.Resource, obj.Namespace, obj.Name))
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return &notAuthorized{message: tenancy.DeniedClaim(a.Username, missing) +
				fmt.Sprintf(" (holding the %s holds its source %s %s too, whose schedule it would freeze)", cl.kind.what, gr.Resource, obj)}
		}
		return nil
	}
}

// lasting says whether a claim's Ready=False waits for a person (kstatus
// Failed): not while no GitTarget names it yet (it waits for one), nor
// while the applier fails a converge (asked again with a backoff).
func lasting(ready *metav1.Condition) bool {
	return ready.Status == metav1.ConditionFalse && ready.Reason != "NotNamed" && ready.Reason != "ApplierFailing"
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
	case strings.Contains(err.Error(), "is held by FluxClaim"), strings.Contains(err.Error(), "is held by ArgoCDClaim"):
		return "HeldByAnotherClaim"
	}
	return "ApplierFailing"
}

// writeStatus writes ready, held and the newest converge reported when
// they differ from the claim's.
func (c *Controller) writeStatus(ctx context.Context, cl *claim, ready *metav1.Condition, held bool) error {
	before := cl.Status.DeepCopy()
	cl.Status.ObservedGeneration = cl.Meta.Generation
	if r, ok := c.cfg.Operations.get(cl.Key()); ok {
		cl.Status.Operation = operation(r)
		if r.LastAppliedRevision != "" {
			cl.Status.LastAppliedRevision = r.LastAppliedRevision
		}
	}
	meta.SetStatusCondition(&cl.Status.Conditions, *ready)
	if lasting(ready) {
		meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: v1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: ready.Reason, Message: ready.Message})
	} else {
		meta.RemoveStatusCondition(&cl.Status.Conditions, v1.ConditionStalled)
	}
	heldCond := metav1.Condition{Type: ConditionHeld, Status: metav1.ConditionFalse, Reason: ready.Reason,
		Message: "The applier keeps its own schedule."}
	if held {
		heldCond = metav1.Condition{Type: ConditionHeld, Status: metav1.ConditionTrue, Reason: "Holding",
			Message: "Reverser holds the applier's schedule and asks it to apply."}
	}
	meta.SetStatusCondition(&cl.Status.Conditions, heldCond)
	setReconciling(cl, held)
	if equalStatus(*cl.Status, *before) {
		return nil
	}
	if err := cl.write(ctx, c.api, true); err != nil {
		return ignoreConflict(err)
	}
	c.recordChanges(cl, before.Conditions, held)
	return nil
}

// setReconciling sets Reconciling=True Converging while the applier works on
// the newest converge Reverser sent a held claim (kstatus reads it
// InProgress), and removes it otherwise.
func setReconciling(cl *claim, held bool) {
	op := cl.Status.Operation
	if !held || op == nil || op.FinishedAt != nil {
		meta.RemoveStatusCondition(&cl.Status.Conditions, v1.ConditionReconciling)
		return
	}
	meta.SetStatusCondition(&cl.Status.Conditions, metav1.Condition{Type: v1.ConditionReconciling, Status: metav1.ConditionTrue,
		Reason: "Converging", Message: fmt.Sprintf("Reverser asked the %s to apply %s (%s) and waits for it to report.",
			cl.kind.what, op.Revision, op.Reason)})
}

// recordChanges records what a written status changed: the hold's start
// (Held) or end (Released, saying why), else a change of Ready.
func (c *Controller) recordChanges(cl *claim, before []metav1.Condition, held bool) {
	ready := meta.FindStatusCondition(cl.Status.Conditions, v1.ConditionReady)
	switch was := meta.IsStatusConditionTrue(before, ConditionHeld); {
	case held && !was:
		c.cfg.Events.Normal(cl.obj, event.ReasonHeld, "%s", ready.Message)
	case !held && was:
		record := c.cfg.Events.Warning
		if ready.Reason == v1.ReasonSuspended {
			record = c.cfg.Events.Normal // asked for
		}
		record(cl.obj, event.ReasonReleased, "Reverser no longer holds the applier (%s): %s", ready.Reason, ready.Message)
	default:
		c.cfg.Events.Changed(cl.obj, before, cl.Status.Conditions, v1.ConditionReady)
	}
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
