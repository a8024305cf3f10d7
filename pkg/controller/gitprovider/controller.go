package gitprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/loop"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/redact"
	"reverser.dev/reverser/pkg/tenancy"
)

// ControllerConfig wires the GitProvider controller.
type ControllerConfig struct {
	Reverser versioned.Interface
	Factory  informers.SharedInformerFactory
	// Secrets reads the Secrets GitProviders name.
	Secrets *Secrets
	// Authorizer answers whether a GitProvider's author may still get the
	// Secrets it names; RecordedGroupsMaxAge bounds the groups recorded.
	Authorizer           authorizer.Authorizer
	RecordedGroupsMaxAge time.Duration
	// Resync is how often each GitProvider is checked again (its author's
	// rights, its Secrets); zero is 30s.
	Resync time.Duration
	// ProbeEvery is how often the remote is asked whether it takes pushes
	// while nothing changed; zero is 5m. A new generation or rotated
	// credentials ask at once.
	ProbeEvery time.Duration
	// CheckPush asks a remote whether it takes pushes; nil is
	// gitrepo.CheckPush.
	CheckPush func(ctx context.Context, url string, auth transport.AuthMethod) error
	Clock     clock.Clock
}

// Controller is the one writer of GitProvider status: Ready, Stalled and
// GitReachable, for the generation it observed. Its mu guards the last
// answer of each remote; it is never held across a call to one.
type Controller struct {
	cfg    ControllerConfig
	gps    listers.GitProviderLister
	queue  workqueue.TypedRateLimitingInterface[string]
	synced []cache.InformerSynced

	mu     sync.Mutex
	probes map[string]probe // by namespace/name
}

// probe is a remote's last answer, and what it was asked with.
type probe struct {
	generation int64
	authFP     string
	at         time.Time
	err        error
}

// NewController builds the controller and registers its informers.
func NewController(cfg ControllerConfig) *Controller {
	if cfg.Resync == 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.ProbeEvery == 0 {
		cfg.ProbeEvery = 5 * time.Minute
	}
	if cfg.CheckPush == nil {
		cfg.CheckPush = gitrepo.CheckPush
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.RecordedGroupsMaxAge == 0 {
		cfg.RecordedGroupsMaxAge = tenancy.DefaultRecordedGroupsMaxAge
	}
	inf := cfg.Factory.Reverser().V1alpha1().GitProviders()
	c := &Controller{cfg: cfg, gps: inf.Lister(), probes: map[string]probe{}, synced: []cache.InformerSynced{inf.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gitproviders"})}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue})
	utilruntime.Must(err)
	cfg.Secrets.OnChange(c.secretChanged)
	return c
}

// secretChanged enqueues the GitProviders of namespace that name Secret
// name: a rotated credential is checked at once.
func (c *Controller) secretChanged(namespace, name string) {
	gps, err := c.gps.GitProviders(namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, gp := range gps {
		if slices.Contains(tenancy.GitProviderSecrets(gp), name) {
			c.queue.Add(namespace + "/" + gp.Name)
		}
	}
}

// Run writes GitProvider status until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return loop.Run(ctx, c.queue, c.synced, workers, "gitproviders", c.reconcile)
}

func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	gp, err := c.gps.GitProviders(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		delete(c.probes, key)
		c.mu.Unlock()
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	conds, retry := c.observe(ctx, key, gp)
	if err := c.write(ctx, gp, conds); err != nil {
		return 0, err
	}
	if retry != nil {
		return 0, retry // the queue's backoff, then the resync
	}
	return c.cfg.Resync, nil
}

// observe is the GitProvider's conditions now; retry is set when what
// failed may pass by itself.
func (c *Controller) observe(ctx context.Context, key string, gp *v1.GitProvider) (conds []metav1.Condition, retry error) {
	lasting := func(err error) ([]metav1.Condition, error) {
		var r interface{ Condition() (string, string) }
		if errors.As(err, &r) {
			reason, message := r.Condition()
			return []metav1.Condition{
				condition(v1.ConditionReady, metav1.ConditionFalse, reason, message),
				condition(v1.ConditionStalled, metav1.ConditionTrue, reason, message),
				condition(v1.ConditionGitReachable, metav1.ConditionUnknown, "NotChecked", "The remote is not asked until this is fixed: "+message),
			}, nil
		}
		message := redact.Text(err.Error())
		return []metav1.Condition{
			condition(v1.ConditionReady, metav1.ConditionFalse, "CheckFailed", message),
			condition(v1.ConditionGitReachable, metav1.ConditionUnknown, "NotChecked", message),
		}, err
	}
	if err := Authorized(ctx, c.cfg.Authorizer, gp, c.cfg.Clock.Now(), c.cfg.RecordedGroupsMaxAge); err != nil {
		return lasting(err)
	}
	auth, authFP, err := c.cfg.Secrets.Auth(ctx, gp)
	if err != nil {
		return lasting(err)
	}
	if _, _, err := c.cfg.Secrets.Signer(ctx, gp); err != nil {
		return lasting(err)
	}
	switch err := c.ask(ctx, key, gp, auth, authFP); {
	case err == nil:
		return []metav1.Condition{
			condition(v1.ConditionReady, metav1.ConditionTrue, "Ready", "Its Secrets are readable and the remote takes pushes with them."),
			condition(v1.ConditionGitReachable, metav1.ConditionTrue, "PushAllowed", "The remote takes pushes with these credentials."),
		}, nil
	case errors.Is(err, gitrepo.ErrPushRefused):
		message := fmt.Sprintf("%s: give it credentials that may push (spec.secretRef)", redact.Text(err.Error()))
		return []metav1.Condition{
			condition(v1.ConditionReady, metav1.ConditionFalse, "PushNotAllowed", message),
			condition(v1.ConditionStalled, metav1.ConditionTrue, "PushNotAllowed", message),
			condition(v1.ConditionGitReachable, metav1.ConditionFalse, "PushNotAllowed", message),
		}, nil
	default:
		message := redact.Text(err.Error())
		return []metav1.Condition{
			condition(v1.ConditionReady, metav1.ConditionFalse, "GitUnreachable", message),
			condition(v1.ConditionGitReachable, metav1.ConditionFalse, "GitUnreachable", message),
		}, err
	}
}

// ask returns the remote's answer: the last one while it is younger than
// ProbeEvery and was given to the same generation and credentials, else a
// new one.
func (c *Controller) ask(ctx context.Context, key string, gp *v1.GitProvider, auth transport.AuthMethod, authFP string) error {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	last, ok := c.probes[key]
	c.mu.Unlock()
	if ok && last.generation == gp.Generation && last.authFP == authFP && now.Sub(last.at) < c.cfg.ProbeEvery {
		return last.err
	}
	probeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := c.cfg.CheckPush(probeCtx, gp.Spec.URL, auth)
	c.mu.Lock()
	c.probes[key] = probe{generation: gp.Generation, authFP: authFP, at: now, err: err}
	c.mu.Unlock()
	return err
}

// write sets conds (the ones not named are removed, Reconciling with them)
// and observedGeneration, with an update conditional on what was read.
func (c *Controller) write(ctx context.Context, gp *v1.GitProvider, conds []metav1.Condition) error {
	next := gp.Status.DeepCopy()
	next.ObservedGeneration = gp.Generation
	kept := []metav1.Condition{}
	for _, cond := range conds {
		cond.ObservedGeneration = gp.Generation
		if old := meta.FindStatusCondition(next.Conditions, cond.Type); old != nil && old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		} else {
			cond.LastTransitionTime = metav1.NewTime(c.cfg.Clock.Now())
		}
		kept = append(kept, cond)
	}
	next.Conditions = kept
	if apiequality.Semantic.DeepEqual(*next, gp.Status) {
		return nil
	}
	update := gp.DeepCopy()
	update.Status = *next
	_, err := c.cfg.Reverser.ReverserV1alpha1().GitProviders(gp.Namespace).UpdateStatus(ctx, update, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // its event brings it back
	}
	return err
}

func condition(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message}
}
