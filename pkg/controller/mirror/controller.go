// Package mirror is the control loop that turns GitTargets and their rules
// into running watch streams feeding branch workers, and reports how they do
// in the GitTargets' status.
package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/watch"
	"reverser.dev/reverser/pkg/worker"
)

// Config wires the controller.
type Config struct {
	// Reverser reaches our API; Kube the control cluster (for Secrets).
	Reverser versioned.Interface
	Kube     kubernetes.Interface
	// Source is the cluster the controller runs against: what inCluster
	// KubeProviders mirror.
	Source *rest.Config
	// DataDir holds the branch workers' local repositories.
	DataDir string
	// Resync is how often every GitTarget is reconciled again, which picks
	// up types a source starts serving (a CRD installed later).
	Resync time.Duration
	// Facts holds the audit facts changes are attributed with; Grace is how
	// long a change waits for its fact.
	Facts *attribution.Index
	Grace time.Duration
	// Factory shares informers with other controllers; nil makes one.
	Factory informers.SharedInformerFactory
}

// Controller reconciles GitTargets.
type Controller struct {
	cfg     Config
	factory informers.SharedInformerFactory
	targets listers.GitTargetLister
	rules   listers.WatchRuleLister
	crules  listers.ClusterWatchRuleLister
	gps     listers.GitProviderLister
	kps     listers.KubeProviderLister
	queue   workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	ctx     context.Context
	workers map[string]*runningWorker // by repository URL and branch
	mirrors map[string]*mirrorState   // by GitTarget namespace/name
	sources map[string]*source        // by KubeProvider name
	reports map[string]*report        // what workers said, by GitTarget
}

type mirrorState struct {
	workerKey string
	domain    string // the GitProvider's authorEmailDomain
	path      string
	sourceFP  string // streams restart when the source's credentials change
	streams   map[watch.Scope]*watch.Stream
}

type source struct {
	fingerprint string
	dynamic     dynamic.Interface
	discovery   discovery.DiscoveryInterface
	// discovered is the outcome of the last discovery through this source,
	// for the KubeProvider's Ready condition; nil error and zero time when
	// nothing used it yet.
	discoveredAt time.Time
	discoveryErr error
}

type runningWorker struct {
	*worker.Worker
	authFP string
}

type report struct {
	lastCommit, lastPush *v1.CommitRef
	gitErr               error
}

// New builds the controller and its informers.
func New(cfg Config) *Controller {
	if cfg.Resync == 0 {
		cfg.Resync = 30 * time.Second
	}
	f := cfg.Factory
	if f == nil {
		f = informers.NewSharedInformerFactory(cfg.Reverser, 0)
	}
	r := f.Reverser().V1alpha1()
	c := &Controller{
		cfg: cfg, factory: f,
		targets: r.GitTargets().Lister(), rules: r.WatchRules().Lister(), crules: r.ClusterWatchRules().Lister(),
		gps: r.GitProviders().Lister(), kps: r.KubeProviders().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "gittargets"}),
		workers: map[string]*runningWorker{}, mirrors: map[string]*mirrorState{},
		sources: map[string]*source{}, reports: map[string]*report{},
	}
	enqueueTarget := handler(func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	})
	enqueueAll := handler(func(any) { c.enqueueAll() })
	utilruntime.Must(addHandler(r.GitTargets().Informer(), enqueueTarget))
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
	utilruntime.Must(addHandler(r.GitProviders().Informer(), enqueueAll))
	utilruntime.Must(addHandler(r.KubeProviders().Informer(), enqueueAll))
	return c
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
}

// Run reconciles until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	log := klog.FromContext(ctx)
	c.factory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	log.Info("Mirror controller started")
	for range workers {
		go wait.UntilWithContext(ctx, c.runWorker, time.Second)
	}
	go wait.UntilWithContext(ctx, func(context.Context) { c.enqueueAll() }, c.cfg.Resync)
	go wait.UntilWithContext(ctx, c.reportProviders, 5*time.Second)
	<-ctx.Done()
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.mirrors {
		c.teardownLocked(key)
	}
	return nil
}

// Synced says whether the informers have their initial state, for readiness.
func (c *Controller) Synced() bool {
	r := c.factory.Reverser().V1alpha1()
	return r.GitTargets().Informer().HasSynced() && r.WatchRules().Informer().HasSynced() &&
		r.GitProviders().Informer().HasSynced() && r.KubeProviders().Informer().HasSynced()
}

func (c *Controller) runWorker(ctx context.Context) {
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		err := c.reconcile(ctx, key)
		c.queue.Done(key)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Reconciling GitTarget", "gitTarget", key)
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
	}
}

func (c *Controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	gt, err := c.targets.GitTargets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		c.teardownLocked(key)
		c.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	st := &observed{}
	c.ensure(ctx, gt, st)
	return c.writeStatus(ctx, gt, st)
}

// observed is what one reconcile found, for the status.
type observed struct {
	source, git, config *problem // nil when fine
	streams             []*watch.Stream
	secrets             bool
}

// ensure makes the running streams and worker match the GitTarget.
func (c *Controller) ensure(ctx context.Context, gt *v1.GitTarget, st *observed) {
	key := gt.Namespace + "/" + gt.Name
	kp, err := c.kps.Get(gt.Spec.KubeProviderRef.Name)
	if err != nil {
		st.source = problemf("KubeProviderNotFound", "KubeProvider %q does not exist: create it or fix spec.kubeProviderRef", gt.Spec.KubeProviderRef.Name)
		return
	}
	allowed, err := c.consumerAllowed(ctx, kp, gt.Namespace)
	if err != nil {
		st.source = asProblem(err, "KubeProviderCheckFailed")
		return
	}
	if !allowed {
		st.config = problemf("KubeProviderNotLent", "KubeProvider %q does not admit GitTargets from namespace %q: add it to spec.consumerNamespaces",
			kp.Name, gt.Namespace)
		return
	}
	gp, err := c.gps.GitProviders(gt.Namespace).Get(gt.Spec.GitProviderRef.Name)
	if err != nil {
		st.git = problemf("GitProviderNotFound", "GitProvider %q does not exist in namespace %q: create it or fix spec.gitProviderRef",
			gt.Spec.GitProviderRef.Name, gt.Namespace)
		return
	}
	if !branchAllowed(gp, gt.Spec.Branch) {
		st.config = problemf("BranchNotAllowed", "branch %q is not in GitProvider %s's spec.allowedBranches", gt.Spec.Branch, gp.Name)
		return
	}
	src, err := c.source(ctx, kp)
	if err != nil {
		st.source = asProblem(err, "SourceUnreachable")
		return
	}
	w, err := c.worker(ctx, gp, gt.Spec.Branch)
	if err != nil {
		st.git = asProblem(err, "GitUnreachable")
		return
	}
	scopes, err := c.scopes(ctx, gt, kp, src)
	if err != nil {
		st.source = asProblem(err, "DiscoveryFailed")
		return
	}
	// A mirror whose repository or source changed starts over: the old
	// worker forgets the target (before the new one learns it, so a worker
	// that stays the same starts from an empty state) and streams restart.
	c.mu.Lock()
	m := c.mirrors[key]
	if m != nil && (m.workerKey != workerKey(gp.Spec.URL, gt.Spec.Branch) || m.path != gt.Spec.Path || m.sourceFP != src.fingerprint) {
		c.teardownLocked(key)
		m = nil
	}
	c.mu.Unlock()
	w.SetTarget(ctx, worker.Target{
		Key:         key,
		Path:        gt.Spec.Path,
		Window:      worker.Window{Silence: gt.Spec.Commit.Window.Silence.Duration, MaxAge: gt.Spec.Commit.Window.MaxAge.Duration},
		PruneAlways: gt.Spec.Prune != v1.PruneOnEvent,
		Authors: &attribution.Resolver{
			Index: c.cfg.Facts, Provider: kp.Name, Enabled: kp.Spec.Audit.Enabled, Grace: c.cfg.Grace,
			Domain: gp.Spec.AuthorEmailDomain, Committer: gitrepo.Signature{Name: gp.Spec.Committer.Name, Email: gp.Spec.Committer.Email},
		},
	})

	c.mu.Lock()
	defer c.mu.Unlock()
	if m == nil {
		m = &mirrorState{workerKey: workerKey(gp.Spec.URL, gt.Spec.Branch), path: gt.Spec.Path, sourceFP: src.fingerprint,
			streams: map[watch.Scope]*watch.Stream{}}
		c.mirrors[key] = m
	}
	m.domain = gp.Spec.AuthorEmailDomain
	for scope, s := range m.streams {
		if !slices.Contains(scopes, scope) {
			s.Stop()
			delete(m.streams, scope)
		}
	}
	for _, scope := range scopes {
		if _, ok := m.streams[scope]; !ok {
			m.streams[scope] = watch.StartStream(c.ctx, src.dynamic, key, gt.Spec.Path, scope, w)
		}
		st.streams = append(st.streams, m.streams[scope])
		if scope.GVR.Group == "" && scope.GVR.Resource == "secrets" {
			st.secrets = true
		}
	}
}

// scopes resolves the GitTarget's rules against what the source serves and
// reports each rule's resolution in its status.
func (c *Controller) scopes(ctx context.Context, gt *v1.GitTarget, kp *v1.KubeProvider, src *source) ([]watch.Scope, error) {
	groups, lists, err := src.discovery.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		err = fmt.Errorf("discovering the source's API: %w", err)
	} else {
		err = nil
	}
	c.mu.Lock()
	src.discoveredAt, src.discoveryErr = time.Now(), err
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	served := watch.NewServed(groups, lists)
	var scopes []watch.Scope
	add := func(s watch.Scope) {
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	rules, err := c.rules.WatchRules(gt.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, wr := range rules {
		if wr.Spec.GitTargetRef.Name != gt.Name {
			continue
		}
		ns := wr.Spec.SourceNamespace
		if ns == "" {
			ns = wr.Namespace
		}
		res := watch.Resolve(wr.Spec.Rules, served, true)
		if !namespaceLent(kp, ns) {
			res.Unresolved = append(res.Unresolved, fmt.Sprintf("namespace %q is not in KubeProvider %s's spec.sourceNamespaces", ns, kp.Name))
			res.GVRs = nil
		}
		for _, gvr := range res.GVRs {
			add(watch.Scope{GVR: gvr, Namespace: ns})
		}
		c.writeRuleStatus(ctx, wr, res)
	}
	crules, err := c.crules.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, cwr := range crules {
		if cwr.Spec.GitTargetRef.Namespace != gt.Namespace || cwr.Spec.GitTargetRef.Name != gt.Name {
			continue
		}
		res := watch.Resolve(cwr.Spec.Rules, served, false)
		for _, gvr := range res.GVRs {
			add(watch.Scope{GVR: gvr})
		}
		c.writeClusterRuleStatus(ctx, cwr, res)
	}
	return scopes, nil
}

func namespaceLent(kp *v1.KubeProvider, ns string) bool {
	return slices.Contains(kp.Spec.SourceNamespaces, "*") || slices.Contains(kp.Spec.SourceNamespaces, ns)
}

// consumerAllowed applies a KubeProvider's consumerNamespaces to the
// namespace of a GitTarget that wants to use it.
func (c *Controller) consumerAllowed(ctx context.Context, kp *v1.KubeProvider, ns string) (bool, error) {
	sel := kp.Spec.ConsumerNamespaces
	switch {
	case sel == nil, sel.From == v1.NamespacesFromAll:
		return true, nil
	case sel.From == v1.NamespacesFromNames:
		return slices.Contains(sel.Names, ns), nil
	case sel.From == v1.NamespacesFromSelector && sel.Selector != nil:
		selector, err := metav1.LabelSelectorAsSelector(sel.Selector)
		if err != nil {
			return false, err
		}
		namespace, err := c.cfg.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Errorf("reading the labels of namespace %q: %w", ns, err)
		}
		return selector.Matches(labels.Set(namespace.Labels)), nil
	default:
		return false, nil
	}
}

// source returns clients for a KubeProvider's cluster, rebuilt when its
// kubeconfig Secret is rotated (seen on the next reconcile, at most --resync
// later).
func (c *Controller) source(ctx context.Context, kp *v1.KubeProvider) (*source, error) {
	cfg, fp, err := c.sourceConfig(ctx, kp)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	s, ok := c.sources[kp.Name]
	c.mu.Unlock()
	if ok && s.fingerprint == fp {
		return s, nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s = &source{fingerprint: fp, dynamic: dyn, discovery: disc}
	c.mu.Lock()
	c.sources[kp.Name] = s
	c.mu.Unlock()
	return s, nil
}

func workerKey(url, branch string) string { return url + "\x00" + branch }

// worker returns the branch worker of a GitProvider's branch, starting it,
// and hands it rotated credentials.
func (c *Controller) worker(ctx context.Context, gp *v1.GitProvider, branch string) (*worker.Worker, error) {
	key := workerKey(gp.Spec.URL, branch)
	auth, authFP, err := c.gitAuth(ctx, gp)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	w, ok := c.workers[key]
	rotated := ok && w.authFP != authFP
	if rotated {
		w.authFP = authFP
	}
	c.mu.Unlock()
	if ok {
		if rotated {
			w.SetAuth(ctx, auth)
		}
		return w.Worker, nil
	}
	sum := sha256.Sum256([]byte(key))
	repo, err := gitrepo.Open(filepath.Join(c.cfg.DataDir, "repos", hex.EncodeToString(sum[:8])), gp.Spec.URL, branch, auth)
	if err != nil {
		return nil, err
	}
	committer := gitrepo.Signature{Name: gp.Spec.Committer.Name, Email: gp.Spec.Committer.Email}
	var wake <-chan struct{}
	if c.cfg.Facts != nil {
		wake = c.cfg.Facts.Subscribe()
	}
	w = &runningWorker{Worker: worker.New(repo, committer, reporter{c}, wake), authFP: authFP}
	c.mu.Lock()
	defer c.mu.Unlock()
	if existing, ok := c.workers[key]; ok {
		return existing.Worker, nil
	}
	c.workers[key] = w
	go w.Run(c.ctx)
	return w.Worker, nil
}

func (c *Controller) teardownLocked(key string) {
	m, ok := c.mirrors[key]
	if !ok {
		return
	}
	for _, s := range m.streams {
		s.Stop()
	}
	delete(c.mirrors, key)
	if w, ok := c.workers[m.workerKey]; ok {
		w.RemoveTarget(c.ctx, key)
	}
}

func asProblem(err error, reason string) *problem {
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	return &problem{reason: reason, message: err.Error()}
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
		r.c.queue.AddAfter(t, 200*time.Millisecond) // coalesce bursts of reports
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
}

func (r reporter) Failed(targets []string, err error) {
	r.update(targets, func(rep *report) { rep.gitErr = err })
}

// Saver returns the branch worker mirroring a GitTarget and the email domain
// its authors are mapped with, for CommitRequests; ok=false while the
// GitTarget is not mirrored (yet).
func (c *Controller) Saver(target string) (w *worker.Worker, domain string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.mirrors[target]
	if !ok {
		return nil, "", false
	}
	rw, ok := c.workers[m.workerKey]
	if !ok {
		return nil, "", false
	}
	return rw.Worker, m.domain, true
}
