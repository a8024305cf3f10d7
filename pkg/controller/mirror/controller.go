// Package mirror is the control loop that turns GitTargets and their rules
// into running watch streams feeding branch workers, and reports how they do
// in the GitTargets' status.
//
// Every reconcile checks each precondition a mirror rests on: the
// KubeProvider exists and admits the target's namespace and lends each
// rule's source namespace; for this cluster, the user who authorised each
// rule may still list and watch what it selects; the GitProvider exists in
// the target's namespace, allows the branch and its credentials resolve; no
// older GitTarget writes an overlapping folder of the same branch. A
// precondition that is lost, rather than unreachable for a moment, tears the
// mirror down at once, and the status says which one and how to fix it. A
// GitTarget's rules are checked side by side (ruleChecks at a time, each
// check in a goroutine of its own, joined before the reconcile goes on), and
// their statuses written once its streams have started.
//
// Branch workers are reference-counted (workers, the registry): each
// mirror holds one reference to its worker, and a reconcile holds one while
// it sets a mirror up. The last reference released closes the worker; a
// worker for the same branch started later runs only once the closed one
// has stopped, so two never share a local repository.
//
// Streams share their cluster's informers (stream.Informers): one per
// resource a cluster serves, not one per GitTarget. The clients of each
// KubeProvider's cluster and its discovery are kubeprovider.Clusters'.
//
// Locks: Controller.mu guards mirrors, reports, push-rights answers and
// observations; workers.mu the registry. Controller.mu may be held while
// taking workers.mu, never the other way round, and neither while calling
// a worker, discovering or stopping a stream, which may block.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/claims"
	"reverser.dev/reverser/pkg/controller/commitrequest"
	"reverser.dev/reverser/pkg/controller/gitprovider"
	"reverser.dev/reverser/pkg/controller/kubeprovider"
	"reverser.dev/reverser/pkg/controller/loop"
	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/event"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	reverserv1alpha1 "reverser.dev/reverser/pkg/generated/informers/externalversions/reverser/v1alpha1"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/resolve"
	"reverser.dev/reverser/pkg/stream"
	"reverser.dev/reverser/pkg/tenancy"
	"reverser.dev/reverser/pkg/worker"
)

// Config wires the controller.
type Config struct {
	// Reverser reaches our API; Kube the control cluster (its Namespaces'
	// labels).
	Reverser versioned.Interface
	Kube     kubernetes.Interface
	// DataDir holds the branch workers' local repositories.
	DataDir string
	// Resync is how often every GitTarget is reconciled again, which picks
	// up types a source starts serving (a CRD installed later) and rights
	// withdrawn from the users who authorised rules.
	Resync time.Duration
	// Facts holds the audit facts changes are attributed with; Grace is how
	// long a change waits for its fact.
	Facts *attribution.Index
	Grace time.Duration
	// Factory shares informers with other controllers; nil makes one.
	Factory informers.SharedInformerFactory
	// Authorizer answers, for this cluster, whether the user who authorised
	// a rule may still list and watch what it selects (SubjectAccessReviews,
	// cached for less than Resync).
	Authorizer authorizer.Authorizer
	// Clusters holds the clients of every KubeProvider's cluster and their
	// discovery (package kubeprovider).
	Clusters *kubeprovider.Clusters
	// Secrets reads the Git credentials and signing keys GitProviders name
	// (package gitprovider).
	Secrets *gitprovider.Secrets
	// FluxIdentities and ArgoCDIdentities are the users Flux's
	// kustomize-controller and Argo CD's application controller write as;
	// during an apply window their writes are echoes.
	FluxIdentities, ArgoCDIdentities []string
	// ApplyGrace keeps an apply window open this long after a converge;
	// RemotePoll is how often a claimed target's remote is looked at for
	// foreign commits.
	ApplyGrace, RemotePoll time.Duration
	// RecordedGroupsMaxAge is how long the groups an authorisation record
	// keeps count in re-checks (tenancy.Subject); zero is the default.
	RecordedGroupsMaxAge time.Duration
	// ClaimReports hears the converges of claimed targets' workers, by
	// claim; it must not block.
	ClaimReports func(claim string, r worker.ApplyReport)
	// DigestKey keys the digests that tell an unchanged sealed Secret
	// (package seal); without it, GitTargets with spec.encryption stall.
	DigestKey []byte
	// CheckPush asks a remote whether it takes pushes with some
	// credentials; nil is gitrepo.CheckPush.
	CheckPush func(ctx context.Context, url string, auth transport.AuthMethod) error
	// Events records pushes, replays and refusals on GitTargets and
	// rules; nil records none.
	Events *event.Recorder
	// PushFence, when set, is asked before every push is sent: with leader
	// election, whether this replica still holds the Lease (package
	// leasefence).
	PushFence gitrepo.Fence
}

// Controller reconciles GitTargets.
type Controller struct {
	cfg     Config
	factory informers.SharedInformerFactory
	// namespaces holds every Namespace's labels, for the KubeProviders
	// that select consumers and loans by label.
	namespaces   kubeinformers.SharedInformerFactory
	nsLister     corelisters.NamespaceLister
	targets      listers.GitTargetLister
	rules        listers.WatchRuleLister
	clusterRules listers.ClusterWatchRuleLister
	gps          listers.GitProviderLister
	kps          listers.KubeProviderLister
	// claims reads FluxClaims and ArgoCDClaims (the one claim model).
	claims *claims.Reader
	queue  workqueue.TypedRateLimitingInterface[string]
	// workers is the registry of branch workers.
	workers *workers

	mu      sync.Mutex
	ctx     context.Context
	mirrors map[string]*mirrorState // by GitTarget namespace/name
	reports map[string]*report      // what workers said, by GitTarget
	// pushable is, by workerKey, the credential fingerprint the remote
	// last said takes pushes (pushAllowed).
	pushable map[string]string
	// observations are the last reconcile's findings, by GitTarget: a
	// worker's report rewrites the status from them and the reports alone
	// (statusQueue), without a reconcile.
	observations map[string]*observed
	statusQueue  workqueue.TypedRateLimitingInterface[string]
	// suspensions are the suspended GitTargets whose worker still holds
	// what they received, by GitTarget (suspend.go).
	suspensions map[string]*suspension
}

type mirrorState struct {
	workerKey string
	domain    string // the GitProvider's authorEmailDomain
	// unnamed is the author of changes nobody is named for: the committer
	// without audit, else the unresolved author.
	unnamed   identity.Signature
	path      string
	clusterFP string // streams restart when the cluster's credentials change
	// sealFP names what credentials are sealed to ("" when not mirrored):
	// the streams that seal restart when it changes, so that each of their
	// objects is read, and encrypted, again.
	sealFP  string
	streams map[document.Scope]*stream.Stream
	// policies are the running streams' credential policies: a stream
	// restarts when its policy changes.
	policies map[document.Scope]string
}

type report struct {
	lastCommit, lastPush *v1.CommitRef
	gitErr               error
	// refused are changes the worker could not write into the repository.
	refused []string
	// unapplied says which objects Git holds that the cluster lacks, for
	// a GitTarget an applier applies ("" none); judged says the running
	// worker has compared them once.
	unapplied string
	judged    bool
}

// New builds the controller and its informers.
func New(cfg Config) *Controller {
	if cfg.Resync == 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.RecordedGroupsMaxAge == 0 {
		cfg.RecordedGroupsMaxAge = tenancy.DefaultRecordedGroupsMaxAge
	}
	if cfg.CheckPush == nil {
		cfg.CheckPush = gitrepo.CheckPush
	}
	f := cfg.Factory
	if f == nil {
		f = informers.NewSharedInformerFactory(cfg.Reverser, 0)
	}
	namespaces := kubeinformers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, kubeinformers.WithTransform(namespaceLabelsOnly))
	r := f.Reverser().V1alpha1()
	c := &Controller{
		cfg: cfg, factory: f, namespaces: namespaces, nsLister: namespaces.Core().V1().Namespaces().Lister(),
		targets: r.GitTargets().Lister(), rules: r.WatchRules().Lister(), clusterRules: r.ClusterWatchRules().Lister(),
		gps: r.GitProviders().Lister(), kps: r.KubeProviders().Lister(), claims: claims.NewReader(f),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gittargets"}),
		mirrors: map[string]*mirrorState{},
		reports: map[string]*report{}, pushable: map[string]string{},
		observations: map[string]*observed{}, suspensions: map[string]*suspension{},
		statusQueue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gittarget_status"}),
	}
	c.workers = newWorkers(cfg.DataDir, cfg.Facts, reporter{c}, cfg.PushFence)
	c.watchInputs(r, namespaces)
	return c
}

// watchInputs enqueues the GitTargets each input concerns when it changes.
func (c *Controller) watchInputs(r reverserv1alpha1.Interface, namespaces kubeinformers.SharedInformerFactory) {
	enqueueTarget := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	enqueueAll := handler(func(any) { c.enqueueAll() })
	// A deleted GitTarget may free a folder that a newer one was refused.
	_, err := r.GitTargets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueTarget,
		UpdateFunc: func(_, obj any) { enqueueTarget(obj) },
		DeleteFunc: c.targetDeleted,
	})
	utilruntime.Must(err)
	utilruntime.Must(addHandler(r.WatchRules().Informer(), handler(func(obj any) {
		if wr, ok := obj.(*v1.WatchRule); ok {
			c.queue.Add(wr.Namespace + "/" + wr.Spec.GitTargetRef.Name)
		}
	})))
	utilruntime.Must(addHandler(r.ClusterWatchRules().Informer(), handler(func(obj any) {
		if cwr, ok := obj.(*v1.ClusterWatchRule); ok {
			c.queue.Add(cwr.Spec.GitTargetRef.Namespace + "/" + cwr.Spec.GitTargetRef.Name)
		}
	})))
	// A claim held or released changes what its GitTargets' workers drive.
	utilruntime.Must(addHandler(r.FluxClaims().Informer(), handler(func(obj any) {
		if fc, ok := obj.(*v1.FluxClaim); ok {
			c.enqueueNaming(v1.ApplierKindFluxClaim, fc.Namespace, fc.Name)
		}
	})))
	utilruntime.Must(addHandler(r.ArgoCDClaims().Informer(), handler(func(obj any) {
		if ac, ok := obj.(*v1.ArgoCDClaim); ok {
			c.enqueueNaming(v1.ApplierKindArgoCDClaim, ac.Namespace, ac.Name)
		}
	})))
	// A GitProvider concerns the GitTargets that use it and, through path
	// conflicts, those writing to its repository: before and after a change
	// of its URL. Not every GitTarget: creating many GitProviders would
	// reconcile every GitTarget for each.
	_, err = r.GitProviders().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueUsing(obj) },
		UpdateFunc: func(old, obj any) {
			c.enqueueUsing(old)
			c.enqueueUsing(obj)
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			c.enqueueUsing(obj)
		},
	})
	utilruntime.Must(err)
	utilruntime.Must(addHandler(r.KubeProviders().Informer(), enqueueAll))
	// A rotated kubeconfig restarts the streams through that cluster; a
	// rotated Git credential or signing key restarts the workers using it.
	c.cfg.Clusters.OnSecretChange(c.enqueueAll)
	c.cfg.Secrets.OnChange(c.secretChanged)
	// A namespace's labels select it as a consumer, and as the receiver of
	// loans, for the GitTargets and rules in it: a change of them may
	// withdraw what those mirror, at once rather than at the next resync.
	// A new namespace's GitTargets are reconciled as they are created.
	_, err = namespaces.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: c.namespaceUpdated,
	})
	utilruntime.Must(err)
}

// namespaceLabelsOnly is the Namespaces informer's transform: the cache
// keeps a Namespace's name and labels, not its spec, status or
// managedFields.
func namespaceLabelsOnly(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil // a tombstone
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, UID: ns.UID, ResourceVersion: ns.ResourceVersion, Labels: ns.Labels}}, nil
}

type handler func(obj any)

func addHandler(inf cache.SharedIndexInformer, h handler) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { h(obj) },
		UpdateFunc: func(_, obj any) { h(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			h(obj)
		},
	})
	return err
}

func (c *Controller) enqueueAll() {
	all, err := c.targets.List(labels.Everything())
	if err != nil {
		return
	}
	for _, gt := range all {
		c.queue.Add(gt.Namespace + "/" + gt.Name)
	}
	// And the mirrors whose GitTarget is gone: their reconcile tears them
	// down, should a delete have been missed.
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.mirrors {
		c.queue.Add(key)
	}
}

// targetDeleted reconciles a deleted GitTarget, which tears its mirror down
// (its streams, informers and worker stop with it), and every other one: a
// folder it held may now be free for a GitTarget that was refused it.
func (c *Controller) targetDeleted(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
	c.enqueueAll()
}

// namespaceUpdated enqueues the GitTargets of a namespace whose labels
// changed.
func (c *Controller) namespaceUpdated(old, obj any) {
	o, ok1 := old.(*corev1.Namespace)
	n, ok2 := obj.(*corev1.Namespace)
	if !ok1 || !ok2 || maps.Equal(o.Labels, n.Labels) {
		return
	}
	targets, err := c.targets.GitTargets(n.Name).List(labels.Everything())
	if err != nil {
		return
	}
	for _, gt := range targets {
		c.queue.Add(gt.Namespace + "/" + gt.Name)
	}
}

// enqueueUsing enqueues the GitTargets that use GitProvider obj, and those
// whose GitProvider names the same repository.
func (c *Controller) enqueueUsing(obj any) {
	gp, ok := obj.(*v1.GitProvider)
	if !ok {
		return
	}
	all, err := c.targets.List(labels.Everything())
	if err != nil {
		return
	}
	repo := repoIdentity(gp.Spec.URL)
	for _, gt := range all {
		uses := gt.Namespace == gp.Namespace && gt.Spec.GitProviderRef.Name == gp.Name
		if !uses {
			other, err := c.gps.GitProviders(gt.Namespace).Get(gt.Spec.GitProviderRef.Name)
			uses = err == nil && repoIdentity(other.Spec.URL) == repo
		}
		if uses {
			c.queue.Add(gt.Namespace + "/" + gt.Name)
		}
	}
}

// secretChanged enqueues the GitTargets of namespace whose GitProvider
// names Secret name.
func (c *Controller) secretChanged(namespace, name string) {
	gts, err := c.targets.GitTargets(namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, gt := range gts {
		gp, err := c.gps.GitProviders(namespace).Get(gt.Spec.GitProviderRef.Name)
		if err == nil && slices.Contains(tenancy.GitProviderSecrets(gp), name) {
			c.queue.Add(namespace + "/" + gt.Name)
		}
	}
}

// Run reconciles until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	defer c.statusQueue.ShutDown()
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	c.workers.run(ctx)
	log := klog.FromContext(ctx)
	c.factory.Start(ctx.Done())
	c.namespaces.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	for typ, ok := range c.namespaces.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.cfg.Clusters.HasSynced) {
		return errors.New("the KubeProviders' Secrets did not sync")
	}
	log.Info("Mirror controller started")
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { loop.Work(ctx, c.queue, "gittargets", loop.Once(c.reconcile)) }, time.Second)
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		loop.Work(ctx, c.statusQueue, "gittarget status", loop.Once(c.refreshStatus))
	}, time.Second)
	go wait.UntilWithContext(ctx, func(context.Context) { c.enqueueAll() }, c.cfg.Resync)
	<-ctx.Done()
	c.mu.Lock()
	keys := slices.Collect(maps.Keys(c.mirrors))
	c.mu.Unlock()
	for _, key := range keys {
		c.teardown(key)
	}
	return nil
}

// Synced says whether the informers have their initial state, for readiness.
func (c *Controller) Synced() bool {
	r := c.factory.Reverser().V1alpha1()
	return r.GitTargets().Informer().HasSynced() && r.WatchRules().Informer().HasSynced() &&
		r.GitProviders().Informer().HasSynced() && r.KubeProviders().Informer().HasSynced() &&
		c.cfg.Clusters.HasSynced() && c.namespaces.Core().V1().Namespaces().Informer().HasSynced()
}

func (c *Controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	gt, err := c.targets.GitTargets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.teardown(key)
		c.resumed(key) // a deleted GitTarget's suspension ends with it
		metrics.GitTargetReady.DeleteLabelValues(ns, name)
		c.mu.Lock()
		delete(c.reports, key)
		delete(c.observations, key)
		c.mu.Unlock()
		return c.orphaned(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	st := &observed{}
	c.ensure(ctx, gt, st)
	c.mu.Lock()
	c.observations[key] = st // read only from now on
	c.mu.Unlock()
	return c.writeStatus(ctx, gt, st)
}

// orphaned says in the status of the rules naming GitTarget ns/name that
// it does not exist (#29): a rule nobody mirrors is not silent.
func (c *Controller) orphaned(ctx context.Context, ns, name string) error {
	return c.rulesOfTarget(ctx, ns, name,
		problemf("GitTargetNotFound", "GitTarget %s/%s does not exist: create it or fix spec.gitTargetRef", ns, name))
}

// notMirroring says in the status of gt's rules why gt was torn down, when
// it stopped before its rules were checked: else they would keep saying
// Resolved for a mirror that is gone. (A transient failure leaves the mirror
// running, and its rules as they were.) The fix is the GitTarget's, so the
// rules are not Stalled themselves.
func (c *Controller) notMirroring(ctx context.Context, gt *v1.GitTarget, p *problem) {
	why := &problem{reason: "GitTargetNotReady", transient: true, message: fmt.Sprintf(
		"GitTarget %s/%s does not mirror (%s): %s", gt.Namespace, gt.Name, p.reason, p.message)}
	if err := c.rulesOfTarget(ctx, gt.Namespace, gt.Name, why); err != nil {
		klog.V(2).InfoS("Writing the status of a GitTarget's rules", "gitTarget", klog.KObj(gt), "err", err)
	}
}

// rulesOfTarget writes p into the status of every rule naming GitTarget
// ns/name.
func (c *Controller) rulesOfTarget(ctx context.Context, ns, name string, p *problem) error {
	rules, err := c.rules.WatchRules(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	for _, wr := range rules {
		if wr.Spec.GitTargetRef.Name == name {
			c.writeRuleStatus(ctx, wr, resolve.Result{}, p)
		}
	}
	clusterRules, err := c.clusterRules.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, cwr := range clusterRules {
		if cwr.Spec.GitTargetRef.Namespace == ns && cwr.Spec.GitTargetRef.Name == name {
			c.writeClusterRuleStatus(ctx, cwr, resolve.Result{}, p)
		}
	}
	return nil
}

// refreshStatus writes a GitTarget's status from the last reconcile's
// findings and the worker's newest reports: a commit, a push or a stream
// that finished its initial state changes what the status says, not what
// the mirror rests on, so no precondition is checked again for it.
func (c *Controller) refreshStatus(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	gt, err := c.targets.GitTargets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	st := c.observations[key]
	c.mu.Unlock()
	if st == nil {
		c.queue.Add(key) // not reconciled since the start: nothing to report from yet
		return nil
	}
	return c.writeStatus(ctx, gt, st)
}

// observed is what one reconcile found, for the status.
type observed struct {
	source, git, config *problem // nil when fine
	streams             []*stream.Stream
	// secrets: the rules select Secrets, which are not mirrored.
	secrets bool
	// refused are the rules that feed nothing because they are not lent,
	// authorised or accepted, each with why.
	refused []string
	// suspended: spec.suspend; ending while the worker still commits and
	// pushes what the target received.
	suspended, ending bool
	// handled is the reconcile-requested-at annotation this reconcile saw.
	handled string
	// rulesChecked: the rules were resolved and their statuses written.
	rulesChecked bool
}

// fail records p where the status reports it.
func (st *observed) fail(p *problem) {
	switch p.area {
	case areaGit:
		st.git = p
	case areaConfig:
		st.config = p
	default:
		st.source = p
	}
}

// ensure makes the running streams and worker match the GitTarget. A lost
// precondition tears the mirror down; a transient failure leaves it running.
func (c *Controller) ensure(ctx context.Context, gt *v1.GitTarget, st *observed) {
	st.handled = gt.Annotations[v1.ReconcileRequestedAtAnnotation]
	key := gt.Namespace + "/" + gt.Name
	if gt.Spec.Suspend {
		st.suspended, st.ending = true, c.suspend(key)
		return
	}
	p := c.ensureMirror(ctx, gt, st)
	c.resumed(key)
	if p == nil {
		return
	}
	st.fail(p)
	if !p.transient {
		c.teardown(key)
		st.streams = nil
		if !st.rulesChecked {
			c.notMirroring(ctx, gt, p)
		}
	}
}

// mirrorInputs is what a mirror rests on once every precondition holds.
type mirrorInputs struct {
	kp          *v1.KubeProvider
	gp          *v1.GitProvider
	cluster     *kubeprovider.Cluster
	auth        transport.AuthMethod
	authFP      string
	signer      gitrepo.Signer
	signFP      string
	sealer      worker.Sealer
	sealFP      string
	worker      *worker.Worker
	workerKey   string
	claim       *worker.Claim
	appliedInto string
	authors     *attribution.Resolver
	scopes      []document.Scope
	policies    map[document.Scope]document.Policy
}

func (c *Controller) ensureMirror(ctx context.Context, gt *v1.GitTarget, st *observed) *problem {
	key := gt.Namespace + "/" + gt.Name
	in, p := c.preconditions(ctx, gt)
	if p != nil {
		return p
	}
	var err error
	in.worker, in.workerKey, err = c.worker(ctx, in.gp, gt.Spec.Branch, in.auth, in.authFP, in.signer, in.signFP)
	if err != nil {
		return asProblem(err, "GitUnreachable").in(areaGit)
	}
	scopes, credentials, statuses, err := c.scopes(ctx, gt, in.kp, in.cluster, st)
	// Rule statuses are written last: a hundred rules take a hundred
	// writes, which need not hold up the streams.
	defer statuses()
	if err != nil {
		c.release(in.workerKey)
		return asProblem(err, "DiscoveryFailed")
	}
	// A mirror whose repository or source changed starts over: the old
	// worker forgets the target (before the new one learns it, so a worker
	// that stays the same starts from an empty state) and streams restart.
	c.mu.Lock()
	m := c.mirrors[key]
	restart := m != nil && (m.workerKey != in.workerKey || m.path != gt.Spec.Path || m.clusterFP != in.cluster.Fingerprint)
	c.mu.Unlock()
	if restart {
		c.teardown(key)
	}
	in.claim, in.appliedInto, err = c.claim(ctx, gt, in.gp.Spec.AuthorEmailDomain)
	if err != nil {
		c.release(in.workerKey)
		return asProblem(err, "SourceUnreachable")
	}
	in.authors = &attribution.Resolver{
		Index: c.cfg.Facts, Provider: in.kp.Name, Consumer: key, Enabled: in.kp.Spec.Audit.Enabled, Grace: c.cfg.Grace,
		Domain: in.gp.Spec.AuthorEmailDomain, Committer: identity.Signature{Name: in.gp.Spec.Committer.Name, Email: in.gp.Spec.Committer.Email},
	}
	in.scopes = scopes
	in.policies = c.restreamCredentials(key, scopes, credentials, in.sealer != nil, in.sealFP)
	c.setTarget(ctx, gt, in)
	c.attach(gt, st, in)
	return nil
}

// preconditions checks, in the order a user would fix them, what a mirror
// rests on, and gathers it: the KubeProvider admits the namespace, the
// GitProvider allows the branch and its Secrets are its writer's, its
// credentials may push, no other target holds the folder, and the source,
// signing key and recipients are usable.
func (c *Controller) preconditions(ctx context.Context, gt *v1.GitTarget) (*mirrorInputs, *problem) {
	in := &mirrorInputs{}
	var err error
	if in.kp, err = c.kps.Get(gt.Spec.KubeProviderRef.Name); err != nil {
		return nil, problemf("KubeProviderNotFound", "KubeProvider %q does not exist: create it or fix spec.kubeProviderRef", gt.Spec.KubeProviderRef.Name)
	}
	allowed, err := tenancy.Consumer(ctx, in.kp, gt.Namespace, c.namespaceLabels)
	if err != nil {
		return nil, asProblem(err, "KubeProviderCheckFailed")
	}
	if !allowed {
		return nil, problemf("KubeProviderNotLent", "KubeProvider %q does not admit GitTargets from namespace %q: add it to spec.consumerNamespaces",
			in.kp.Name, gt.Namespace).in(areaConfig)
	}
	if in.gp, err = c.gps.GitProviders(gt.Namespace).Get(gt.Spec.GitProviderRef.Name); err != nil {
		return nil, problemf("GitProviderNotFound", "GitProvider %q does not exist in namespace %q: create it or fix spec.gitProviderRef",
			gt.Spec.GitProviderRef.Name, gt.Namespace).in(areaGit)
	}
	if !branchAllowed(in.gp, gt.Spec.Branch) {
		return nil, problemf("BranchNotAllowed", "branch %q is not in GitProvider %s's spec.allowedBranches", gt.Spec.Branch, in.gp.Name).in(areaConfig)
	}
	if p := c.secretsAuthorized(ctx, in.gp); p != nil {
		return nil, p
	}
	if in.auth, in.authFP, err = c.cfg.Secrets.Auth(ctx, in.gp); err != nil {
		return nil, asProblem(err, "GitUnreachable").in(areaGit)
	}
	// Before the folder is claimed: a target whose credentials may not push
	// holds no folder against one whose may (overlapping).
	if p := c.pushAllowed(ctx, gt.Namespace+"/"+gt.Name, in.gp, gt.Spec.Branch, in.auth, in.authFP); p != nil {
		return nil, p
	}
	if other := c.overlapping(gt, in.gp); other != nil {
		return nil, pathConflict(gt, other)
	}
	if in.cluster, err = c.cfg.Clusters.Cluster(in.kp); err != nil {
		return nil, asProblem(err, "SourceUnreachable")
	}
	if in.signer, in.signFP, err = c.cfg.Secrets.Signer(ctx, in.gp); err != nil {
		return nil, asProblem(err, "SigningKeyUnreadable").in(areaConfig)
	}
	if in.sealer, in.sealFP, err = c.sealer(gt); err != nil {
		return nil, asProblem(err, "EncryptionInvalid").in(areaConfig)
	}
	return in, nil
}

// pathConflict says which target holds gt's folder; another team's is not
// named: who mirrors where is theirs to tell.
func pathConflict(gt, other *v1.GitTarget) *problem {
	if other.Namespace != gt.Namespace {
		return problemf("PathConflict", "a GitTarget of another namespace, created earlier, already mirrors into branch %s of this "+
			"repository at a path that contains or lies inside %q: choose another path or branch", gt.Spec.Branch, gt.Spec.Path).in(areaConfig)
	}
	return problemf("PathConflict", "GitTarget %s/%s, created earlier, already mirrors into branch %s of this repository at path %q, "+
		"which overlaps %q: choose a path that neither contains nor lies inside it", other.Namespace, other.Name, gt.Spec.Branch,
		other.Spec.Path, gt.Spec.Path).in(areaConfig)
}

// setTarget tells the worker what the target is now.
func (c *Controller) setTarget(ctx context.Context, gt *v1.GitTarget, in *mirrorInputs) {
	gvrs := make([]schema.GroupVersionResource, 0, len(in.scopes))
	kinds := map[schema.GroupVersionResource]string{}
	served, _ := c.cfg.Clusters.Served(in.cluster) // what c.scopes resolved the rules against
	for _, s := range in.scopes {
		gvrs = append(gvrs, s.GVR)
		kinds[s.GVR] = served.Kind(s.GVR)
	}
	in.cluster.Informers.Decide(ctx, gvrs) // before c.mu: it may ask the source
	in.worker.SetTarget(ctx, worker.Target{
		Key:         gt.Namespace + "/" + gt.Name,
		Namespace:   targetNamespace(in.appliedInto, gt.Spec.TargetNamespace, in.scopes),
		Scopes:      in.scopes,
		Claim:       in.claim,
		Applied:     gt.Spec.ApplierRef != nil,
		AppliedBy:   appliedBy(gt),
		Kinds:       kinds,
		Path:        gt.Spec.Path,
		Window:      worker.Window{Silence: gt.Spec.Commit.Window.Silence.Duration, MaxAge: gt.Spec.Commit.Window.MaxAge.Duration},
		PruneAlways: gt.Spec.Prune != v1.PruneOnEvent,
		Authors:     in.authors,
		Seal:        in.sealer,
	})
}

// attach records the mirror and makes its streams those of the scopes:
// new scopes start a stream, dropped ones stop theirs (outside c.mu).
func (c *Controller) attach(gt *v1.GitTarget, st *observed, in *mirrorInputs) {
	key := gt.Namespace + "/" + gt.Name
	var stopped []*stream.Stream
	c.mu.Lock()
	m := c.mirrors[key]
	keepsRef := m == nil
	if m == nil {
		// The new mirror keeps the reference this reconcile took.
		m = &mirrorState{workerKey: in.workerKey, path: gt.Spec.Path, clusterFP: in.cluster.Fingerprint, sealFP: in.sealFP,
			streams: map[document.Scope]*stream.Stream{}, policies: map[document.Scope]string{}}
		c.mirrors[key] = m
	}
	m.domain, m.unnamed = in.gp.Spec.AuthorEmailDomain, in.authors.Unnamed()
	for scope, s := range m.streams {
		if !slices.Contains(in.scopes, scope) {
			stopped = append(stopped, s)
			delete(m.streams, scope)
			delete(m.policies, scope)
		}
	}
	for _, scope := range in.scopes {
		if _, ok := m.streams[scope]; !ok {
			m.streams[scope] = in.cluster.Informers.Stream(c.ctx, key, gt.Spec.Path, scope, in.policies[scope], in.worker)
			m.policies[scope] = in.policies[scope].String()
		}
		st.streams = append(st.streams, m.streams[scope])
		if scope.GVR.GroupResource() == document.SecretsResource && in.sealer == nil {
			st.secrets = true
		}
	}
	c.mu.Unlock()
	if !keepsRef {
		c.release(in.workerKey) // the running mirror holds its own
	}
	for _, s := range stopped {
		s.Stop()
	}
}

// scopes resolves the GitTarget's rules against what the source serves and
// reports each rule's resolution in its status. A rule feeds nothing when its
// source namespace is not lent to it, when its author may not read what it
// selects, or (a ClusterWatchRule) when the target does not accept it.
// The rules are checked ruleChecks at a time; the returned func writes
// their statuses.
func (c *Controller) scopes(ctx context.Context, gt *v1.GitTarget, kp *v1.KubeProvider, cluster *kubeprovider.Cluster,
	st *observed) ([]document.Scope, map[document.Scope][]v1.CredentialField, func(), error) {
	var writes []func()
	statuses := func() {
		for _, write := range writes {
			write()
		}
	}
	served, err := c.cfg.Clusters.Discover(cluster, c.resolvesEverything(gt, cluster))
	if err != nil {
		return nil, nil, statuses, err
	}
	var scopes []document.Scope
	credentials := map[document.Scope][]v1.CredentialField{}
	add := func(res resolve.Result, ns string) {
		for _, gvr := range res.GVRs {
			s := document.Scope{GVR: gvr, Namespace: ns}
			if !slices.Contains(scopes, s) {
				scopes = append(scopes, s)
			}
			credentials[s] = append(credentials[s], res.Credentials[gvr]...)
		}
	}
	// use takes a checked rule's resolution, or its refusal, in the rules'
	// order; write writes its status.
	use := func(kind, name string, r checkedRule, write func(resolve.Result, *problem) (refused bool)) {
		if r.denied != nil {
			r.res.GVRs = nil
			st.refused = append(st.refused, fmt.Sprintf("%s %s: %s", kind, name, r.denied.message))
		}
		add(r.res, r.ns)
		writes = append(writes, func() {
			if write(r.res, r.denied) {
				c.cfg.Events.Warning(gt, event.ReasonRuleRefused, "%s %s: %s", kind, name, r.denied.message)
			}
		})
	}
	rules, err := c.rules.WatchRules(gt.Namespace).List(labels.Everything())
	if err != nil {
		return nil, nil, statuses, err
	}
	wrs := targetRules(rules, gt)
	checked, err := checkRules(ctx, wrs, func(ctx context.Context, wr *v1.WatchRule) (checkedRule, error) {
		return c.checkRule(ctx, gt, kp, served, wr)
	})
	if err != nil {
		return nil, nil, statuses, err
	}
	for i, wr := range wrs {
		use("WatchRule", wr.Name, checked[i], func(res resolve.Result, denied *problem) bool { return c.writeRuleStatus(ctx, wr, res, denied) })
	}
	clusterRules, err := c.clusterRules.List(labels.Everything())
	if err != nil {
		return nil, nil, statuses, err
	}
	cwrs := targetClusterRules(clusterRules, gt)
	checked, err = checkRules(ctx, cwrs, func(ctx context.Context, cwr *v1.ClusterWatchRule) (checkedRule, error) {
		return c.checkClusterRule(ctx, gt, kp, served, cwr)
	})
	if err != nil {
		return nil, nil, statuses, err
	}
	for i, cwr := range cwrs {
		use("ClusterWatchRule", cwr.Name, checked[i], func(res resolve.Result, denied *problem) bool {
			return c.writeClusterRuleStatus(ctx, cwr, res, denied)
		})
	}
	st.rulesChecked = true
	return scopes, credentials, statuses, nil
}

// checkRule resolves a WatchRule and decides whether it may feed gt: its
// source namespace lent (Secrets explicitly, on a remote provider), its
// author still allowed to read what it selects, its credentials encrypted.
func (c *Controller) checkRule(ctx context.Context, gt *v1.GitTarget, kp *v1.KubeProvider, served resolve.Served,
	wr *v1.WatchRule) (checkedRule, error) {
	ns := wr.Spec.SourceNamespace
	if ns == "" {
		ns = wr.Namespace
	}
	res := resolve.Rules(wr.Spec.Rules, served, true)
	secrets := slices.ContainsFunc(res.GVRs, func(gvr schema.GroupVersionResource) bool { return gvr.GroupResource() == document.SecretsResource })
	lent, err := tenancy.Lends(ctx, kp, wr.Namespace, ns, secrets, c.namespaceLabels)
	if err != nil {
		return checkedRule{}, err
	}
	var denied *problem
	switch {
	case !lent && secrets && !kp.Spec.InCluster:
		denied = problemf("NotLent", "KubeProvider %s does not lend the Secrets of source namespace %q to namespace %q: its admin adds a "+
			"spec.lend entry for it with secrets: true, or the rule leaves Secrets out", kp.Name, ns, wr.Namespace)
	case !lent:
		denied = problemf("NotLent", "KubeProvider %s does not lend source namespace %q to namespace %q: its admin adds a spec.lend entry "+
			"(or, for the namespace of the rule's own name, spec.lendSameNamespaces)", kp.Name, ns, wr.Namespace)
	}
	if denied == nil {
		if denied, err = c.authorized(ctx, kp, wr.Status.AuthorizedBy, res.GVRs, ns); err != nil {
			return checkedRule{}, err
		}
		if denied == nil {
			denied = unencrypted(gt, wr.Spec.Rules)
		}
	}
	return checkedRule{res: res, ns: ns, denied: denied}, nil
}

// checkClusterRule resolves a ClusterWatchRule and decides whether it may
// feed gt: accepted by the target, its author still allowed, its
// credentials encrypted.
func (c *Controller) checkClusterRule(ctx context.Context, gt *v1.GitTarget, kp *v1.KubeProvider, served resolve.Served,
	cwr *v1.ClusterWatchRule) (checkedRule, error) {
	res := resolve.Rules(cwr.Spec.Rules, served, false)
	var denied *problem
	var err error
	if !accepts(gt.Spec.AcceptClusterWatchRules, cwr.Name) {
		denied = problemf("NotAccepted", "GitTarget %s/%s does not accept this ClusterWatchRule: its owner adds %q to spec.acceptClusterWatchRules",
			gt.Namespace, gt.Name, cwr.Name)
	} else if denied, err = c.authorized(ctx, kp, cwr.Status.AuthorizedBy, res.GVRs, ""); err != nil {
		return checkedRule{}, err
	} else if denied == nil {
		denied = unencrypted(gt, cwr.Spec.Rules)
	}
	return checkedRule{res: res, denied: denied}, nil
}

// checkedRule is what a rule feeds, from which namespace ("" for a
// ClusterWatchRule), or why nothing.
type checkedRule struct {
	res    resolve.Result
	ns     string
	denied *problem
}

// ruleChecks is how many rules are checked at once: each check may ask the
// API server SubjectAccessReviews, one answer at a time, so a GitTarget of
// a hundred rules would wait for two hundred answers in turn.
const ruleChecks = 16

// checkRules checks rules ruleChecks at a time; the results are in the
// rules' order.
func checkRules[R any](ctx context.Context, rules []R, check func(context.Context, R) (checkedRule, error)) ([]checkedRule, error) {
	out := make([]checkedRule, len(rules))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(ruleChecks)
	for i, r := range rules {
		g.Go(func() (err error) {
			out[i], err = check(ctx, r)
			return err
		})
	}
	return out, g.Wait()
}

func accepts(accepted []string, name string) bool {
	return slices.Contains(accepted, "*") || slices.Contains(accepted, name)
}

// authorized repeats, for a rule on this cluster, the check the API server
// made when the rule was written: its author may list and watch what it
// selects. A rule on a remote cluster is authorised by lending alone, since
// this cluster's RBAC says nothing about another cluster's.
func (c *Controller) authorized(ctx context.Context, kp *v1.KubeProvider, by *v1.Author, gvrs []schema.GroupVersionResource,
	ns string) (*problem, error) {
	if !kp.Spec.InCluster || len(gvrs) == 0 {
		return nil, nil
	}
	if by == nil || by.Username == "" {
		return problemf("NotAuthorized", "the rule records no author in status.authorizedBy: re-apply it as a user who may list and watch "+
			"what it selects, so the API server records who authorises it"), nil
	}
	if c.cfg.Authorizer == nil {
		return nil, errors.New("no authorizer is configured to check rules with")
	}
	now := time.Now()
	missing, err := tenancy.MissingToRead(ctx, c.cfg.Authorizer, tenancy.Subject(by, now, c.cfg.RecordedGroupsMaxAge), gvrs, ns)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return problemf("NotAuthorized", "%s%s. Grant them again, or have someone who may re-apply the rule",
			tenancy.Denied(by.Username, missing), tenancy.StaleHint(by, now, c.cfg.RecordedGroupsMaxAge)), nil
	}
	return nil, nil
}

// NamespaceLabels reads a namespace's labels from the controller's cache,
// for the claims controller's consumerNamespaces checks.
func (c *Controller) NamespaceLabels(ctx context.Context, name string) (labels.Set, error) {
	return c.namespaceLabels(ctx, name)
}

// namespaceLabels reads a Namespace's labels from the informer; one it does
// not hold yet (created a moment ago) is asked for.
func (c *Controller) namespaceLabels(ctx context.Context, name string) (labels.Set, error) {
	ns, err := c.nsLister.Get(name)
	if apierrors.IsNotFound(err) {
		ns, err = c.cfg.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	return ns.Labels, nil
}

// resolvesEverything says whether the source's last discovery serves all
// that the GitTarget's rules ask for; when it does not, the resource may
// have been added since (a new CRD), and the source is discovered again.
func (c *Controller) resolvesEverything(gt *v1.GitTarget, cluster *kubeprovider.Cluster) bool {
	served, ok := c.cfg.Clusters.Served(cluster)
	if !ok {
		return false
	}
	rules, err := c.rules.WatchRules(gt.Namespace).List(labels.Everything())
	if err != nil {
		return false
	}
	for _, wr := range targetRules(rules, gt) {
		if len(resolve.Rules(wr.Spec.Rules, served, true).Unresolved) > 0 {
			return false
		}
	}
	clusterRules, err := c.clusterRules.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, cwr := range targetClusterRules(clusterRules, gt) {
		if len(resolve.Rules(cwr.Spec.Rules, served, false).Unresolved) > 0 {
			return false
		}
	}
	return true
}

func targetRules(rules []*v1.WatchRule, gt *v1.GitTarget) []*v1.WatchRule {
	return slices.DeleteFunc(slices.Clone(rules), func(wr *v1.WatchRule) bool { return wr.Spec.GitTargetRef.Name != gt.Name })
}

func targetClusterRules(rules []*v1.ClusterWatchRule, gt *v1.GitTarget) []*v1.ClusterWatchRule {
	return slices.DeleteFunc(slices.Clone(rules), func(cwr *v1.ClusterWatchRule) bool {
		return cwr.Spec.GitTargetRef.Namespace != gt.Namespace || cwr.Spec.GitTargetRef.Name != gt.Name
	})
}

// workerKey names the branch worker of one GitProvider's branch: a worker
// pushes with one provider's credentials only, so two providers of the same
// repository never share one.
func workerKey(gp *v1.GitProvider, branch string) string {
	return gp.Namespace + "/" + gp.Name + "\x00" + gp.Spec.URL + "\x00" + branch
}

// worker returns the branch worker of a GitProvider's branch, starting it,
// and hands it rotated credentials and signing keys. The caller holds a
// reference to it until it calls release.
func (c *Controller) worker(ctx context.Context, gp *v1.GitProvider, branch string, auth transport.AuthMethod, authFP string,
	signer gitrepo.Signer, signFP string) (*worker.Worker, string, error) {
	key := workerKey(gp, branch)
	w, err := c.workers.acquire(ctx, key, workerSetup{url: gp.Spec.URL, branch: branch, auth: auth, authFP: authFP,
		committer: identity.Signature{Name: gp.Spec.Committer.Name, Email: gp.Spec.Committer.Email}, signer: signer, signFP: signFP})
	return w, key, err
}

// release drops a mirror's use of a worker; when it was the last, the
// remote's push-rights answer is forgotten with it.
func (c *Controller) release(key string) {
	if c.workers.release(key) {
		c.mu.Lock()
		delete(c.pushable, key)
		c.mu.Unlock()
	}
}

// teardown stops a mirror: its streams, and its target in the worker, whose
// open windows and waiting saves end with it. It holds c.mu only to unhook
// the mirror, never while stopping streams or calling the worker.
func (c *Controller) teardown(key string) {
	c.mu.Lock()
	m, ok := c.mirrors[key]
	var w *runningWorker
	if ok {
		delete(c.mirrors, key)
		w = c.workers.get(m.workerKey)
	}
	if rep := c.reports[key]; rep != nil {
		rep.unapplied, rep.judged = "", false // the next worker judges again
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	for _, s := range m.streams {
		s.Stop()
	}
	if w != nil {
		w.RemoveTarget(c.ctx, key)
		c.release(m.workerKey)
	}
}

// reporter turns worker reports into status updates.
type reporter struct{ c *Controller }

func (r reporter) update(targets []string, f func(*report)) {
	r.c.mu.Lock()
	for _, t := range targets {
		rep, ok := r.c.reports[t]
		if !ok {
			rep = &report{}
			r.c.reports[t] = rep
		}
		f(rep)
	}
	r.c.mu.Unlock()
	for _, t := range targets {
		r.c.statusQueue.AddAfter(t, 200*time.Millisecond) // coalesce bursts of reports
	}
}

func (r reporter) Committed(target, sha string, at time.Time) {
	r.update([]string{target}, func(rep *report) { rep.lastCommit = &v1.CommitRef{SHA: sha, Time: &metav1.Time{Time: at}} })
}

func (r reporter) Pushed(targets []string, sha string, at time.Time) {
	r.update(targets, func(rep *report) {
		rep.lastPush = &v1.CommitRef{SHA: sha, Time: &metav1.Time{Time: at}}
		rep.gitErr = nil
	})
	r.record(targets, func(gt *v1.GitTarget) {
		r.c.cfg.Events.Normal(gt, event.ReasonPushed, "Pushed commit %s to branch %s", sha, gt.Spec.Branch)
	})
}

func (r reporter) Rejected(targets []string) {
	r.record(targets, func(gt *v1.GitTarget) {
		r.c.cfg.Events.Normal(gt, event.ReasonReplayed, "Branch %s had moved (a commit Reverser did not make): "+
			"Reverser fetched it and replays its open commits on top, then the cluster's state", gt.Spec.Branch)
	})
}

// record calls f with each target's GitTarget, from the lister: reports
// must not block.
func (r reporter) record(targets []string, f func(*v1.GitTarget)) {
	if r.c.cfg.Events == nil {
		return
	}
	for _, t := range targets {
		ns, name, err := cache.SplitMetaNamespaceKey(t)
		if err != nil {
			continue
		}
		if gt, err := r.c.targets.GitTargets(ns).Get(name); err == nil {
			f(gt)
		}
	}
}

func (r reporter) Failed(targets []string, err error) {
	r.update(targets, func(rep *report) { rep.gitErr = err })
}

func (r reporter) Refused(target string, refusals []string) {
	r.update([]string{target}, func(rep *report) { rep.refused = refusals })
}

func (r reporter) Unapplied(target, message string) {
	r.update([]string{target}, func(rep *report) { rep.unapplied, rep.judged = message, true })
}

// Saver returns where a GitTarget's CommitRequests are saved: its branch
// worker, the email domain its authors are mapped with and the author of
// the changes nobody is named for; ok=false while the GitTarget is not
// mirrored (yet).
func (c *Controller) Saver(target string) (t commitrequest.SaveTarget, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.mirrors[target]
	if !ok {
		return t, false
	}
	rw := c.workers.get(m.workerKey)
	if rw == nil {
		return t, false
	}
	return commitrequest.SaveTarget{Saver: rw.Worker, Domain: m.domain, Unnamed: m.unnamed}, true
}

// targetNamespace is the namespace the GitTarget's folder is applied into
// (feature R1): the claimed applier's, else spec.targetNamespace, else the
// one namespace every namespaced scope reads; "" when none is known.
func targetNamespace(appliedInto, spec string, scopes []document.Scope) string {
	if appliedInto != "" {
		return appliedInto
	}
	if spec != "" {
		return spec
	}
	only := ""
	for _, s := range scopes {
		switch {
		case s.Namespace == "":
			continue // cluster-scoped: no namespace to leave out
		case s.Namespace == "*" || only != "" && s.Namespace != only:
			return ""
		}
		only = s.Namespace
	}
	return only
}
