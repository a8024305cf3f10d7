// Package commitrequest serves CommitRequests: one core decides, from the
// request as stored, who owns it, whether its GitTarget admits it, the
// claim, the save and its outcome, and retention; every status write is
// conditional on the resourceVersion it was decided from.
//
// A front end is a Config: where the requests live (Requests, RequestsFactory:
// our API for the control-cluster path; a source cluster's CommitRequest CRD,
// which the same generated clientset reaches, for the source path), which
// KubeProviders' GitTargets it owns (Owns), and how a request's author is
// known (Author: status.author, stamped by our API server, on the control
// cluster; an audit fact on a source cluster). GitTargets and KubeProviders
// always come from the control cluster (Control).
//
// Locks and blocking: Controller.mu guards flights (the saves this process
// handed to workers) and is never held while calling a Saver or the API. A
// Saver never blocks, and its Done callback, which runs on the worker's
// goroutine, only records the result under mu and enqueues the request. A
// save that found its window ends within --save-timeout: SaveFailed, naming
// the error, when its commit is not on the remote by then.
package commitrequest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/loop"
	"reverser.dev/reverser/pkg/event"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/tenancy"
	"reverser.dev/reverser/pkg/worker"
)

// Saver is the branch worker side of a save.
type Saver interface {
	Save(ctx context.Context, req worker.SaveRequest)
	FindSave(ctx context.Context, id string, done func(sha string, err error))
}

// SaveTarget is where a GitTarget's saves go.
type SaveTarget struct {
	Saver Saver
	// Domain is the email domain authors are mapped with.
	Domain string
	// Unnamed is the author of the changes nobody is named for (the
	// GitProvider's committer when the KubeProvider sends no audit, else
	// the unresolved author): what a request nobody is named for saves.
	Unnamed identity.Signature
}

// Savers finds where the saves of a GitTarget ("namespace/name") go.
type Savers func(target string) (SaveTarget, bool)

// Requester is who made a request, as far as the facts tell.
type Requester struct {
	// User made the request; nil when nobody is named.
	User *v1.Author
	// Unnamed: the cluster the request lives on names nobody (it sends no
	// audit events), so the request saves the window of the changes
	// nobody is named for.
	Unnamed bool
	// Unresolved, when nobody is known, says why: the AuthorUnresolved
	// message.
	Unresolved string
}

// Config wires the core to one way in.
type Config struct {
	// Requests reaches the CommitRequests this front end serves, and
	// RequestsFactory informs on them.
	Requests        versioned.Interface
	RequestsFactory informers.SharedInformerFactory
	// Control informs on the control cluster's GitTargets and KubeProviders.
	Control informers.SharedInformerFactory
	// Owns says whether requests for GitTargets mirroring through a
	// KubeProvider are this front end's. Nil: the control-cluster rule,
	// inCluster providers.
	Owns func(*v1.KubeProvider) bool
	// Author returns who made a request; neither a User nor Unnamed is
	// AuthorUnresolved, unless a positive retry asks again after it (a
	// fact still on its way).
	Author func(cr *v1.CommitRequest, gt *v1.GitTarget, kp *v1.KubeProvider) (r Requester, retry time.Duration)
	// Admit decides whether a GitTarget's grants admit a request.
	Admit func(ctx context.Context, cr *v1.CommitRequest, gt *v1.GitTarget, kp *v1.KubeProvider) (tenancy.GrantDecision, error)
	// Foreign, when set, is the refusal (NotAllowed) of a request for a
	// GitTarget another front end owns. Nil leaves such a request alone: a
	// non-owner writes nothing but GitTargetNotFound.
	Foreign func(kp *v1.KubeProvider, target string) string
	// KeepFinished leaves finished requests in place: no deletion stamp,
	// no deletion (a source cluster's spec.commitRequests: Reconcile).
	KeepFinished bool
	// NamedTargetsOnly skips requests whose spec.gitTargetRef has no
	// namespace: on a source cluster the request's own namespace says
	// nothing about where the GitTarget is.
	NamedTargetsOnly bool
	// Untrusted: the requests' status is kept where others may write it
	// (a source cluster), so grants are checked on every handling, not
	// only before the claim the status records.
	Untrusted bool
	// Forget, when set, hears that a request is done with.
	Forget func(types.UID)
	// Kube reads namespace labels for Selector grants.
	Kube kubernetes.Interface
	// Authorizer, when set, checks again at the claim that the author may
	// still save the GitTarget (verb "save" on gittargets): the API server
	// checked at create, but the right may have been withdrawn since, or the
	// request may have waited for a GitTarget that did not exist yet. Only
	// the control-cluster path sets it: a source cluster's users are not this
	// cluster's.
	Authorizer authorizer.Authorizer
	// RecordedGroupsMaxAge is how long an author's recorded groups count in
	// that check (--recorded-groups-max-age); zero is the default, 7 days.
	RecordedGroupsMaxAge time.Duration
	Savers               Savers
	// TTL is how long a finished request stays before it is deleted.
	TTL time.Duration
	// Collect keeps a saved window open this long after the save attaches,
	// so the author's edits still waiting for their audit facts join it.
	Collect time.Duration
	// Settle, when positive, closes a saved window sooner, once nothing
	// waits for its audit fact and Settle has passed (worker.SaveRequest).
	Settle time.Duration
	// SaveTimeout is how long a save that found its window may take to be
	// committed and pushed before it ends SaveFailed; zero waits forever.
	SaveTimeout time.Duration
	// Clock tells the time of attach timeouts, deadlines and retention, and
	// drives the queue's delays; nil is the real clock.
	Clock clock.WithTicker
	// Events records each finished save on its GitTarget (Saved or
	// SaveFailed) and, with EventsOnRequests, on the request too: a source
	// cluster's requests live where this recorder does not write. Nil
	// records nothing.
	Events           *event.Recorder
	EventsOnRequests bool
	// Handled, when set, hears after each handling of a request its key
	// and a resourceVersion no newer than the one it was decided from ("":
	// the request was gone). It is how a test knows a write was handled
	// before it asserts that nothing came of it, without waiting a fixed
	// time.
	Handled func(key, resourceVersion string)
}

// ControlCluster completes cfg as the control-cluster front end: requests
// of our own API, for GitTargets of inCluster KubeProviders, authored by
// status.author, admitted by consumerNamespaces grants; a request for a
// GitTarget that mirrors another cluster is NotAllowed.
func ControlCluster(cfg Config, reverser versioned.Interface, factory informers.SharedInformerFactory) Config {
	cfg.Requests, cfg.RequestsFactory, cfg.Control = reverser, factory, factory
	cfg.EventsOnRequests = true
	cfg.Owns = func(kp *v1.KubeProvider) bool { return kp.Spec.InCluster }
	cfg.Author = func(cr *v1.CommitRequest, _ *v1.GitTarget, _ *v1.KubeProvider) (Requester, time.Duration) {
		return Requester{User: cr.Status.Author,
			Unresolved: "status.author is empty: the request was not created through the reverser.dev API server"}, 0
	}
	cfg.Admit = func(ctx context.Context, cr *v1.CommitRequest, gt *v1.GitTarget, _ *v1.KubeProvider) (tenancy.GrantDecision, error) {
		return tenancy.AdmitsConsumer(ctx, gt.Spec.AllowedCommitRequests, gt.Namespace, cr.Namespace, cfg.namespaceLabels)
	}
	cfg.Foreign = func(kp *v1.KubeProvider, target string) string {
		if kp.Spec.CommitRequests == v1.CommitRequestsIgnore {
			return fmt.Sprintf("GitTarget %s mirrors another cluster through KubeProvider %s, which serves no CommitRequests: "+
				"set the provider's spec.commitRequests to Reconcile, then save on that cluster", target, kp.Name)
		}
		return fmt.Sprintf("GitTarget %s mirrors another cluster through KubeProvider %s: save on that cluster, "+
			"with a CommitRequest whose spec.gitTargetRef names namespace %q (docs/kcp.md shows how to install the kind there)",
			target, kp.Name, strings.SplitN(target, "/", 2)[0])
	}
	return cfg
}

// Controller is the control-cluster front end of the CommitRequest core.
type Controller struct {
	cfg     Config
	crs     listers.CommitRequestLister
	targets listers.GitTargetLister
	kps     listers.KubeProviderLister
	queue   workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced

	started time.Time
	// detach removes the handler New added to the shared GitTarget
	// informer, which outlives a source front end.
	detach func()

	mu      sync.Mutex
	flights map[types.UID]*flight
}

// flight is a save this process handed to a worker: its outcome, then how
// the apply of its commit goes, until that is settled.
type flight struct {
	result  *worker.SaveResult
	applied *worker.ApplyResult
}

// New builds a front end of the core.
func New(cfg Config) *Controller {
	r := cfg.RequestsFactory.Reverser().V1alpha1()
	ctl := cfg.Control.Reverser().V1alpha1()
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.RecordedGroupsMaxAge <= 0 {
		cfg.RecordedGroupsMaxAge = tenancy.DefaultRecordedGroupsMaxAge
	}
	c := &Controller{
		cfg: cfg, crs: r.CommitRequests().Lister(), targets: ctl.GitTargets().Lister(), kps: ctl.KubeProviders().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "commitrequests", Clock: cfg.Clock}),
		flights: map[types.UID]*flight{},
		started: cfg.Clock.Now(),
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, err := r.CommitRequests().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if cr, ok := obj.(*v1.CommitRequest); ok {
				c.forget(cr.UID) // a request deleted mid-save: nobody will read its outcome
			}
		},
	})
	utilruntime.Must(err)
	// A GitTarget created after a request may now serve it.
	targets := ctl.GitTargets().Informer()
	reg, err := targets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueFor(obj) },
	})
	utilruntime.Must(err)
	c.detach = func() { _ = targets.RemoveEventHandler(reg) }
	c.synced = []cache.InformerSynced{r.CommitRequests().Informer().HasSynced, ctl.GitTargets().Informer().HasSynced,
		ctl.KubeProviders().Informer().HasSynced}
	return c
}

func (c *Controller) enqueueFor(obj any) {
	gt, ok := obj.(*v1.GitTarget)
	if !ok {
		return
	}
	crs, err := c.crs.List(labels.Everything())
	if err != nil {
		return
	}
	for _, cr := range crs {
		if cr.Spec.GitTargetRef.Name == gt.Name && targetNamespace(cr) == gt.Namespace {
			c.queue.Add(cr.Namespace + "/" + cr.Name)
		}
	}
}

// Run serves CommitRequests until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer c.detach()
	reconcile := c.reconcile
	if c.cfg.Handled != nil {
		reconcile = c.reporting
	}
	return loop.Run(ctx, c.queue, c.synced, workers, "CommitRequest", reconcile)
}

// reporting reconciles key and tells cfg.Handled. The version is read
// before the reconcile, which reads the same lister later and so sees it or
// a newer one.
func (c *Controller) reporting(ctx context.Context, key string) (time.Duration, error) {
	rv := ""
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	if cr, err := c.crs.CommitRequests(ns).Get(name); err == nil {
		rv = cr.ResourceVersion
	}
	after, err := c.reconcile(ctx, key)
	c.cfg.Handled(key, rv)
	return after, err
}

func targetNamespace(cr *v1.CommitRequest) string {
	if cr.Spec.GitTargetRef.Namespace != "" {
		return cr.Spec.GitTargetRef.Namespace
	}
	return cr.Namespace
}

// reconcile decides the next step of one request. It returns when to look
// again, if the decision depends on time.
func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	cr, err := c.crs.CommitRequests(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ready := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
	if ready != nil && ready.Status != metav1.ConditionUnknown {
		if !appliedSettled(cr) {
			return 0, c.followApplied(ctx, cr)
		}
		c.forget(cr.UID)
		return c.retain(ctx, cr)
	}
	if c.cfg.NamedTargetsOnly && cr.Spec.GitTargetRef.Namespace == "" {
		return 0, nil // no owner can be told; the CRD requires the namespace
	}
	targetKey := targetNamespace(cr) + "/" + cr.Spec.GitTargetRef.Name
	gt, err := c.targets.GitTargets(targetNamespace(cr)).Get(cr.Spec.GitTargetRef.Name)
	if apierrors.IsNotFound(err) {
		return c.withoutTarget(ctx, cr, ready != nil, targetKey)
	}
	if err != nil {
		return 0, err
	}

	// Which path owns the request: the GitTarget's KubeProvider decides.
	kp, err := c.kps.Get(gt.Spec.KubeProviderRef.Name)
	if err != nil {
		return 5 * time.Second, nil // the GitTarget reports the missing provider
	}
	if !c.cfg.Owns(kp) {
		if c.cfg.Foreign == nil || ready != nil {
			return 0, nil // the owner's, which may have claimed it already
		}
		return 0, c.finish(ctx, cr, outcome{reason: v1.ReasonNotAllowed, message: c.cfg.Foreign(kp, targetKey)})
	}

	// Admission, again when a GitTarget replaced the one that admitted it.
	if c.cfg.Untrusted || cr.Status.GitTargetUID == "" || cr.Status.GitTargetUID != string(gt.UID) {
		decision, err := c.cfg.Admit(ctx, cr, gt, kp)
		if err != nil {
			return 0, err
		}
		if !decision.Allowed {
			return 0, c.finish(ctx, cr, outcome{reason: v1.ReasonNotAllowed, message: fmt.Sprintf("GitTarget %s does not admit this request: %s",
				targetKey, decision.Reason)})
		}
	}
	who, retry := c.cfg.Author(cr, gt, kp)
	switch {
	case who.User == nil && !who.Unnamed && retry > 0:
		return retry, nil // its audit fact may still arrive
	case who.User == nil && !who.Unnamed:
		return 0, c.finish(ctx, cr, outcome{reason: v1.ReasonAuthorUnresolved, message: who.Unresolved})
	}
	if ready == nil && c.cfg.Authorizer != nil && who.User != nil {
		if refusal, err := c.maySave(ctx, who.User, gt); err != nil || refusal != "" {
			if err != nil {
				return 0, err
			}
			return 0, c.finish(ctx, cr, outcome{reason: v1.ReasonNotAllowed, message: refusal})
		}
	}
	if ready == nil || cr.Status.GitTargetUID != string(gt.UID) {
		return c.claim(ctx, cr, gt, targetKey, who)
	}
	return c.save(ctx, cr, gt, targetKey, who)
}

// withoutTarget decides a request whose GitTarget does not exist: a
// claimed one cannot be saved any more; an unclaimed one waits
// spec.window.attachTimeout for it to be created.
func (c *Controller) withoutTarget(ctx context.Context, cr *v1.CommitRequest, claimed bool, targetKey string) (time.Duration, error) {
	attach := attachTimeout(cr)
	if claimed {
		return 0, c.finish(ctx, cr, outcome{reason: v1.ReasonNoWindow, ok: true,
			message: fmt.Sprintf("GitTarget %s was deleted before the save", targetKey)})
	}
	if wait := cr.CreationTimestamp.Add(attach).Sub(c.cfg.Clock.Now()); wait > 0 {
		return wait, nil
	}
	return 0, c.finish(ctx, cr, outcome{reason: v1.ReasonGitTargetNotFound, message: fmt.Sprintf(
		"GitTarget %s does not exist (waited spec.window.attachTimeout, %s): create it or fix spec.gitTargetRef", targetKey, attach)})
}

// claim is the first status write, before anything is saved: it names the
// GitTarget (by uid) and records the author where no API server stamped
// one. The update's event brings the claimed request back to reconcile.
func (c *Controller) claim(ctx context.Context, cr *v1.CommitRequest, gt *v1.GitTarget, targetKey string, who Requester) (time.Duration, error) {
	author := "nobody named (the cluster sends no audit events)"
	if who.User != nil {
		author = who.User.Username
	}
	updated := cr.DeepCopy()
	updated.Status.GitTargetUID = string(gt.UID)
	updated.Status.ObservedGeneration = cr.Generation
	updated.Status.Author = who.User
	saving := fmt.Sprintf("Waiting for %s's window on GitTarget %s.", author, targetKey)
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionUnknown,
		Reason: v1.ReasonSaving, Message: saving})
	// kstatus tools (kubectl wait, Flux's and Argo CD's health) read a
	// save under way as InProgress.
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{Type: v1.ConditionReconciling, Status: metav1.ConditionTrue,
		Reason: v1.ReasonSaving, Message: saving})
	_, err := c.cfg.Requests.ReverserV1alpha1().CommitRequests(cr.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return time.Millisecond, nil // decided from a stale copy: read again and decide again
	}
	return 0, err
}

// maySave asks, before the claim, whether the request's author may still
// save the GitTarget; it returns the refusal in words a user can act on.
func (c *Controller) maySave(ctx context.Context, a *v1.Author, gt *v1.GitTarget) (string, error) {
	// A save waiting for its GitTarget or its window may be checked long
	// after its create: its groups count only as long as the admin says.
	now := c.cfg.Clock.Now()
	u := tenancy.Subject(a, now, c.cfg.RecordedGroupsMaxAge)
	decision, _, err := c.cfg.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: u, Verb: v1.VerbSave, APIGroup: v1.GroupName, APIVersion: "*", Resource: "gittargets",
		Namespace: gt.Namespace, Name: gt.Name, ResourceRequest: true,
	})
	switch {
	case decision == authorizer.DecisionAllow:
		return "", nil
	case err != nil:
		return "", fmt.Errorf("checking whether %q may save GitTarget %s/%s: %w", a.Username, gt.Namespace, gt.Name, err)
	}
	return fmt.Sprintf("user %q may no longer save GitTarget %s/%s: it needs verb %q on resource \"gittargets\" in API group %q",
		a.Username, gt.Namespace, gt.Name, v1.VerbSave, v1.GroupName) + tenancy.StaleHint(a, now, c.cfg.RecordedGroupsMaxAge), nil
}

// notMirrored decides a request whose GitTarget is not mirrored (yet): it
// waits as long as the attach may, and after a restart long enough for the
// mirror to come back, so a save made before the restart is found rather
// than denied.
func (c *Controller) notMirrored(ctx context.Context, cr *v1.CommitRequest, targetKey string) (time.Duration, error) {
	deadline := cr.CreationTimestamp.Add(attachTimeout(cr))
	if resume := c.started.Add(time.Minute); resume.After(deadline) {
		deadline = resume
	}
	if c.cfg.Clock.Now().Before(deadline) {
		return time.Second, nil
	}
	return 0, c.finish(ctx, cr, outcome{reason: v1.ReasonNoWindow, ok: true, message: fmt.Sprintf(
		"No window to save: GitTarget %s is not mirrored; its Ready condition says why.", targetKey)})
}

// save hands the claimed request to its worker once, and writes the outcome
// when the worker reports it.
func (c *Controller) save(ctx context.Context, cr *v1.CommitRequest, gt *v1.GitTarget, targetKey string, who Requester) (time.Duration, error) {
	c.mu.Lock()
	f, inFlight := c.flights[cr.UID]
	var result *worker.SaveResult
	if inFlight {
		result = f.result
	}
	c.mu.Unlock()
	if inFlight {
		if result == nil {
			return 0, nil // the worker's report enqueues us
		}
		o := fromResult(*result, gt)
		if o.reason == v1.ReasonCommitted {
			c.mu.Lock()
			o.applied = appliedCondition(f.applied)
			c.mu.Unlock()
		}
		return 0, c.finish(ctx, cr, o)
	}
	target, ok := c.cfg.Savers(targetKey)
	if !ok {
		return c.notMirrored(ctx, cr, targetKey)
	}
	f = &flight{}
	c.mu.Lock()
	c.flights[cr.UID] = f
	c.mu.Unlock()
	key := cr.Namespace + "/" + cr.Name
	report := func(r worker.SaveResult) {
		c.mu.Lock()
		f.result = &r
		c.mu.Unlock()
		c.queue.Add(key)
	}
	applied := func(r worker.ApplyResult) {
		c.mu.Lock()
		f.applied = &r
		c.mu.Unlock()
		c.queue.Add(key)
	}
	author := target.Unnamed
	if who.User != nil {
		author = identity.For(who.User.Username, target.Domain)
	}
	saver := target.Saver
	req := worker.SaveRequest{
		ID: string(cr.UID), Target: targetKey, Author: author,
		Message: cr.Spec.Message, Next: cr.Spec.Attach == v1.AttachNext, Empty: cr.Spec.WhenNothingToCommit == v1.NothingToCommitCommitEmpty,
		Collect: c.cfg.Collect, Settle: c.cfg.Settle, Deadline: cr.CreationTimestamp.Add(attachTimeout(cr)), Done: report,
		Applied: applied, CatchUp: cr.Spec.CatchUp == v1.CatchUpAfterPush,
	}
	if now := c.cfg.Clock.Now(); req.Deadline.Before(now) {
		req.Deadline = now // resumed after a restart: what is open now counts
	}
	if c.cfg.SaveTimeout > 0 {
		req.GiveUpAt = req.Deadline.Add(req.Collect + c.cfg.SaveTimeout)
	}
	// A claimed request may have been saved by a process that stopped before
	// reporting it: the commit's trailer tells. Never save twice.
	saver.FindSave(ctx, req.ID, func(sha string, err error) {
		switch {
		case err != nil:
			klog.FromContext(ctx).Error(err, "Looking for an earlier save", "commitRequest", key)
			saver.Save(ctx, req)
		case sha != "":
			// Saved before a restart: how its apply went is not known here.
			applied(worker.ApplyResult{Reason: v1.ReasonLost, Settled: true,
				Message: "Reverser restarted before it learned how the apply of this save went"})
			report(worker.SaveResult{Outcome: worker.SaveCommitted, Commit: sha})
		default:
			saver.Save(ctx, req)
		}
	})
	return 0, nil
}

func (c *Controller) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.flights, uid)
	c.mu.Unlock()
	if c.cfg.Forget != nil {
		c.cfg.Forget(uid)
	}
}

func attachTimeout(cr *v1.CommitRequest) time.Duration {
	if d := cr.Spec.Window.AttachTimeout; d != nil {
		return d.Duration
	}
	return 5 * time.Second
}

func (cfg Config) namespaceLabels(ctx context.Context, name string) (labels.Set, error) {
	ns, err := cfg.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return ns.Labels, nil
}

// outcome is a decided end of a request.
type outcome struct {
	reason, message string
	ok              bool // Ready=True
	commit, branch  string
	applied         *metav1.Condition
}

func fromResult(r worker.SaveResult, gt *v1.GitTarget) outcome {
	switch r.Outcome {
	case worker.SaveCommitted:
		return outcome{reason: v1.ReasonCommitted, ok: true, commit: r.Commit, branch: gt.Spec.Branch,
			message: fmt.Sprintf("Saved as %.7s on branch %s.", r.Commit, gt.Spec.Branch)}
	case worker.SaveNothingToCommit:
		return outcome{reason: v1.ReasonNothingToCommit, ok: true, message: "Nothing to commit: " + r.Message + ".", applied: nothingToApply}
	case worker.SaveInProgress:
		return outcome{reason: v1.ReasonSaveInProgress, message: strings.ToUpper(r.Message[:1]) + r.Message[1:] + "."}
	case worker.SaveFailed:
		return outcome{reason: v1.ReasonSaveFailed, message: "Not saved: " + r.Message + "."}
	default:
		return outcome{reason: v1.ReasonNoWindow, ok: true, message: "No window to save: " + r.Message + ".", applied: nothingToApply}
	}
}

// nothingToApply is the Applied condition of a save that pushed no commit:
// what it saved is in Git and on the cluster already.
var nothingToApply = &metav1.Condition{Type: v1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1.ReasonNothingToApply,
	Message: "The save pushed no commit: nothing to apply."}

// appliedCondition is the Applied condition for how the apply of a save's
// commit goes; nil (not heard yet) is Applying.
func appliedCondition(r *worker.ApplyResult) *metav1.Condition {
	if r == nil {
		return &metav1.Condition{Type: v1.ConditionApplied, Status: metav1.ConditionUnknown, Reason: v1.ReasonApplying,
			Message: "Waiting to hear from the GitTarget's applier."}
	}
	status := metav1.ConditionUnknown
	switch r.Reason {
	case v1.ReasonApplied, v1.ReasonNoApplierClaim, v1.ReasonApplierGone, v1.ReasonNothingToApply:
		status = metav1.ConditionTrue
	case v1.ReasonCommitDropped:
		status = metav1.ConditionFalse
	}
	msg := r.Message
	if msg != "" {
		msg = strings.ToUpper(msg[:1]) + msg[1:] + "."
	}
	return &metav1.Condition{Type: v1.ConditionApplied, Status: status, Reason: r.Reason, Message: msg}
}

// appliedSettled says whether nothing will change the request's Applied
// condition any more: it is True or False, or Lost; or the request
// committed nothing and so has no apply to follow.
func appliedSettled(cr *v1.CommitRequest) bool {
	ready := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
	if ready == nil || ready.Reason != v1.ReasonCommitted {
		return true
	}
	a := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied)
	return a != nil && (a.Status != metav1.ConditionUnknown || a.Reason == v1.ReasonLost)
}

// followApplied writes how the apply of a committed save goes, as its
// worker reports it; a request this process did not save (a restart) is
// Lost. Ready is never changed.
func (c *Controller) followApplied(ctx context.Context, cr *v1.CommitRequest) error {
	c.mu.Lock()
	f, ok := c.flights[cr.UID]
	var r *worker.ApplyResult
	if ok && f.applied != nil {
		copied := *f.applied
		r = &copied
	}
	c.mu.Unlock()
	if !ok {
		r = &worker.ApplyResult{Reason: v1.ReasonLost, Message: "Reverser restarted before it learned how the apply of this save went"}
	}
	cond := appliedCondition(r)
	if cur := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied); cur != nil && cur.Status == cond.Status &&
		cur.Reason == cond.Reason && cur.Message == cond.Message && (r == nil || r.Revision == "" || cr.Status.AppliedRevision == r.Revision) {
		return nil
	}
	updated := cr.DeepCopy()
	meta.SetStatusCondition(&updated.Status.Conditions, *cond)
	if r != nil && r.Revision != "" {
		updated.Status.AppliedRevision = r.Revision
	}
	_, err := c.cfg.Requests.ReverserV1alpha1().CommitRequests(cr.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		c.queue.Add(cr.Namespace + "/" + cr.Name)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	}
	return err
}

// finish writes an outcome, conditional on the resourceVersion it was
// decided from. After a conflict the next reconcile re-applies the same
// worker result, which stays in its flight until written.
func (c *Controller) finish(ctx context.Context, cr *v1.CommitRequest, o outcome) error {
	updated := cr.DeepCopy()
	status := metav1.ConditionFalse
	if o.ok {
		status = metav1.ConditionTrue
	}
	updated.Status.ObservedGeneration = cr.Generation
	updated.Status.Commit, updated.Status.Branch = o.commit, o.branch
	meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: status, Reason: o.reason, Message: o.message})
	meta.RemoveStatusCondition(&updated.Status.Conditions, v1.ConditionReconciling)
	if !o.ok {
		// The request is done and will not succeed: kstatus Failed.
		meta.SetStatusCondition(&updated.Status.Conditions, metav1.Condition{Type: v1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: o.reason, Message: o.message})
	}
	if o.applied != nil {
		meta.SetStatusCondition(&updated.Status.Conditions, *o.applied)
	}
	_, err := c.cfg.Requests.ReverserV1alpha1().CommitRequests(cr.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		c.queue.Add(cr.Namespace + "/" + cr.Name)
		return nil
	case err != nil:
		return err
	}
	metrics.CommitRequests.WithLabelValues(snake(o.reason)).Inc()
	metrics.SaveSeconds.Observe(c.cfg.Clock.Since(cr.CreationTimestamp.Time).Seconds())
	c.recordFinished(cr, updated, o)
	return nil
}

// recordFinished records a written outcome as Events: on the request (its
// Ready change) and on the GitTarget it named, where `kubectl describe
// gittarget` shows every save beside the pushes.
func (c *Controller) recordFinished(before, after *v1.CommitRequest, o outcome) {
	if c.cfg.EventsOnRequests {
		c.cfg.Events.Changed(after, before.Status.Conditions, after.Status.Conditions, v1.ConditionReady)
	}
	gt, err := c.targets.GitTargets(targetNamespace(before)).Get(before.Spec.GitTargetRef.Name)
	if err != nil {
		return // no GitTarget to record on (GitTargetNotFound)
	}
	if o.ok {
		c.cfg.Events.Normal(gt, event.ReasonSaved, "CommitRequest %s/%s: %s", before.Namespace, before.Name, o.message)
	} else {
		c.cfg.Events.Warning(gt, event.ReasonSaveFailed, "CommitRequest %s/%s: %s: %s", before.Namespace, before.Name, o.reason, o.message)
	}
}

// retain stamps a finished request with its deletion time and deletes it
// once that has passed.
func (c *Controller) retain(ctx context.Context, cr *v1.CommitRequest) (time.Duration, error) {
	if c.cfg.KeepFinished {
		return 0, nil
	}
	at, ok := cr.Annotations[v1.DeleteAfterAnnotation]
	if !ok {
		when := c.cfg.Clock.Now().Add(c.cfg.TTL).UTC().Format(time.RFC3339)
		patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:%q}}}`, cr.ResourceVersion, v1.DeleteAfterAnnotation, when)
		_, err := c.cfg.Requests.ReverserV1alpha1().CommitRequests(cr.Namespace).Patch(ctx, cr.Name, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	deadline, err := time.Parse(time.RFC3339, at)
	if err != nil {
		deadline = c.cfg.Clock.Now() // an unreadable stamp is treated as passed
	}
	if wait := deadline.Sub(c.cfg.Clock.Now()); wait > 0 {
		return wait, nil
	}
	uid := cr.UID
	err = c.cfg.Requests.ReverserV1alpha1().CommitRequests(cr.Namespace).Delete(ctx, cr.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil
	}
	return 0, err
}

func snake(reason string) string {
	var b strings.Builder
	for i, r := range reason {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
