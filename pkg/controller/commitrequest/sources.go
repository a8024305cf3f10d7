package commitrequest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/loop"
	"reverser.dev/reverser/pkg/controller/providerstatus"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/tenancy"
)

// Reasons of a KubeProvider's CommitRequestsServed condition.
const (
	ReasonWatching         = "Watching"
	ReasonNothingToWatch   = "NothingToWatch"
	ReasonCRDNotInstalled  = "CRDNotInstalled"
	ReasonVersionNotServed = "VersionNotServed"
	ReasonForbidden        = "Forbidden"
	ReasonUnreachable      = "Unreachable"
)

// SourcesConfig wires the source-cluster front ends.
type SourcesConfig struct {
	// Core is what every front end shares: TTL, Collect, SaveTimeout,
	// Savers, Kube (the control cluster, for namespace labels), Clock and
	// Control (the control cluster's GitTargets and KubeProviders).
	Core Config
	// ProviderStatus writes the KubeProviders' status, where the mirror
	// writes its part too.
	ProviderStatus *providerstatus.Writer
	// SourceConfig is the REST config of a KubeProvider's cluster and a
	// fingerprint that changes when its credential is rotated.
	SourceConfig func(*v1.KubeProvider) (*rest.Config, string, error)
	// Facts and Grace attribute requests to their authors.
	Facts *attribution.Index
	Grace time.Duration
	// Resync is how often each provider's service is checked again: a
	// rotated credential, a CRD installed, a right granted or withdrawn.
	Resync time.Duration
}

// Sources runs a front end of the core for every KubeProvider whose
// spec.commitRequests serves CommitRequests, over the source namespaces it
// lends its GitTargets, and reports how that goes in the provider's
// CommitRequestsServed condition and status.commitRequests.
//
// Locks: the front ends it runs are frontEnds', guarded by its own mutex,
// never held while a front end stops. A reconcile blocks on the source
// cluster's discovery and access reviews, each bounded by a timeout.
type Sources struct {
	cfg     SourcesConfig
	kps     listers.KubeProviderLister
	targets listers.GitTargetLister
	queue   workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced
	running *frontEnds
}

// NewSources builds the source-cluster front ends' loop.
func NewSources(cfg SourcesConfig) *Sources {
	ctl := cfg.Core.Control.Reverser().V1alpha1()
	// An unreachable cluster is retried from a second up to a minute.
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Minute)
	s := &Sources{cfg: cfg, kps: ctl.KubeProviders().Lister(), targets: ctl.GitTargets().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{
			Name: "commitrequest-sources", Clock: cfg.Core.Clock}),
		running: &frontEnds{running: map[string]map[string]*frontEnd{}},
	}
	provider := func(obj any) {
		if kp, ok := tombstone(obj).(*v1.KubeProvider); ok {
			s.queue.Add(kp.Name)
		}
	}
	_, err := ctl.KubeProviders().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: provider, UpdateFunc: func(_, obj any) { provider(obj) }, DeleteFunc: provider,
	})
	utilruntime.Must(err)
	// A GitTarget lends its provider's namespace of its own name, and more
	// through loans: adding, moving or deleting one changes what is watched.
	target := func(obj any) {
		if gt, ok := tombstone(obj).(*v1.GitTarget); ok {
			s.queue.Add(gt.Spec.KubeProviderRef.Name)
		}
	}
	_, err = ctl.GitTargets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: target, UpdateFunc: func(_, obj any) { target(obj) }, DeleteFunc: target,
	})
	utilruntime.Must(err)
	s.synced = []cache.InformerSynced{ctl.KubeProviders().Informer().HasSynced, ctl.GitTargets().Informer().HasSynced}
	return s
}

func tombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// Run serves source clusters until ctx is done, then stops every front end.
func (s *Sources) Run(ctx context.Context) error {
	s.running.ctx = ctx
	defer s.running.stopAll()
	return loop.Run(ctx, s.queue, s.synced, 1, "CommitRequest sources", s.reconcile)
}

// served is what a reconcile found: the condition, and the namespaces
// watched while a front end runs.
type served struct {
	reason, message string
}

func (s *Sources) reconcile(ctx context.Context, name string) (time.Duration, error) {
	kp, err := s.kps.Get(name)
	if apierrors.IsNotFound(err) {
		s.running.stop(name)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if kp.Spec.InCluster || kp.Spec.CommitRequests == "" || kp.Spec.CommitRequests == v1.CommitRequestsIgnore {
		s.running.stop(name)
		return 0, s.report(ctx, kp, nil, nil)
	}
	namespaces, err := s.lent(ctx, kp)
	if err != nil {
		return 0, err
	}
	if len(namespaces) == 0 {
		s.running.stop(name)
		return s.cfg.Resync, s.report(ctx, kp, &served{ReasonNothingToWatch, fmt.Sprintf(
			"No GitTarget mirrors through this provider, so no source namespace is lent to watch: create a GitTarget with "+
				"spec.kubeProviderRef.name %s (it lends the source namespace of its own namespace's name, and spec.lend adds more)", name)}, nil)
	}
	cfg, fingerprint, err := s.cfg.SourceConfig(kp)
	if err != nil {
		s.running.stop(name)
		return s.cfg.Resync, s.report(ctx, kp, &served{ReasonUnreachable, fmt.Sprintf("No client for the source cluster: %v", err)}, nil)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 10 * time.Second
	state := probe(ctx, cfg, kp.Spec.CommitRequests, namespaces)
	want := frontEndKey{fingerprint: fingerprint, mode: kp.Spec.CommitRequests}
	switch state.reason {
	case ReasonWatching:
		if err := s.running.ensure(kp.Name, namespaces, want, func(ctx context.Context, ns string) error {
			return s.start(ctx, kp, cfg, ns)
		}); err != nil {
			return 0, err
		}
	case ReasonCRDNotInstalled, ReasonVersionNotServed:
		s.running.stop(name) // nothing to watch until the kind is served
	default:
		// Forbidden or Unreachable: the running front ends stay, their
		// informers retry on their own, and they serve again once the
		// cluster answers.
		s.running.prune(name, namespaces, want)
	}
	var watched []string
	if s.running.serving(name, namespaces, want) {
		watched = namespaces
	}
	if err := s.report(ctx, kp, &state, watched); err != nil {
		return 0, err
	}
	if state.reason == ReasonUnreachable {
		return 0, fmt.Errorf("KubeProvider %s: %s", name, state.message) // retried with backoff
	}
	return s.cfg.Resync, nil
}

// lent is the source namespaces kp lends its GitTargets, sorted: each
// GitTarget's own namespace name and the loans to it; ["*"] when a loan
// lends every namespace.
func (s *Sources) lent(ctx context.Context, kp *v1.KubeProvider) ([]string, error) {
	gts, err := s.targets.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, gt := range gts {
		if gt.Spec.KubeProviderRef.Name != kp.Name {
			continue
		}
		ok, err := tenancy.Consumer(ctx, kp, gt.Namespace, s.cfg.Core.namespaceLabels)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // the provider refuses the GitTarget, which says so
		}
		if kp.Spec.InCluster || kp.Spec.LendSameNamespaces {
			set[gt.Namespace] = true
		}
		for i := range kp.Spec.Lend {
			loan := &kp.Spec.Lend[i]
			ok, err := tenancy.Selects(ctx, &loan.To, "", gt.Namespace, s.cfg.Core.namespaceLabels)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if slices.Contains(loan.SourceNamespaces, "*") {
				return []string{"*"}, nil
			}
			for _, ns := range loan.SourceNamespaces {
				set[ns] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out, nil
}

// start runs the core front end of one watched namespace ("*": the whole
// cluster) until ctx is done.
func (s *Sources) start(ctx context.Context, kp *v1.KubeProvider, cfg *rest.Config, ns string) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0 // watches
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client for KubeProvider %s: %w", kp.Name, err)
	}
	scope := ns
	if ns == "*" {
		scope = metav1.NamespaceAll
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(scope))
	c := New(SourceCluster(s.cfg.Core, Source{Provider: kp.Name, Mode: kp.Spec.CommitRequests, Requests: client, Factory: factory,
		Facts: s.cfg.Facts, Grace: s.cfg.Grace}))
	factory.Start(ctx.Done())
	go func() {
		if err := c.Run(ctx, 1); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Source CommitRequest front end stopped", "kubeProvider", kp.Name, "namespace", ns)
		}
	}()
	klog.FromContext(ctx).Info("Serving source-cluster CommitRequests", "kubeProvider", kp.Name, "namespace", ns,
		"mode", kp.Spec.CommitRequests)
	return nil
}

// probe finds out whether the source cluster serves CommitRequests to the
// provider's credential in every namespace it would watch, with the rights
// the mode needs.
func probe(ctx context.Context, cfg *rest.Config, mode v1.CommitRequestsMode, namespaces []string) served {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return served{ReasonUnreachable, err.Error()}
	}
	gv := v1.SchemeGroupVersion.String()
	resources, err := dc.ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		return notServed(dc)
	case err != nil:
		return fromError(err, "discovery of "+gv)
	}
	if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "commitrequests" }) {
		return notServed(dc)
	}
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return served{ReasonUnreachable, err.Error()}
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return served{ReasonUnreachable, err.Error()}
	}
	verbs := []authorizationv1.ResourceAttributes{{Verb: "watch", Resource: "commitrequests"},
		{Verb: "update", Resource: "commitrequests", Subresource: "status"}}
	if mode == v1.CommitRequestsReconcileAndDeleteFinished {
		verbs = append(verbs, authorizationv1.ResourceAttributes{Verb: "patch", Resource: "commitrequests"},
			authorizationv1.ResourceAttributes{Verb: "delete", Resource: "commitrequests"})
	}
	for _, ns := range namespaces {
		where := "namespace " + ns
		if ns == "*" {
			ns, where = metav1.NamespaceAll, "the whole cluster (a loan lends \"*\")"
		}
		if _, err := client.ReverserV1alpha1().CommitRequests(ns).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			if apierrors.IsNotFound(err) {
				return notServed(dc)
			}
			return fromError(err, "listing commitrequests in "+where)
		}
		var missing []string
		for _, attrs := range verbs {
			attrs.Group, attrs.Namespace = v1.GroupName, ns
			review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
				&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}},
				metav1.CreateOptions{})
			if err != nil {
				return fromError(err, "reviewing the credential's access in "+where)
			}
			if !review.Status.Allowed {
				r := attrs.Resource
				if attrs.Subresource != "" {
					r += "/" + attrs.Subresource
				}
				missing = append(missing, attrs.Verb+" "+r)
			}
		}
		if len(missing) > 0 {
			return served{ReasonForbidden, fmt.Sprintf("The provider's credential may not %s (group %s) in %s: grant it %s",
				strings.Join(missing, ", "), v1.GroupName, where, neededRights(mode))}
		}
	}
	if namespaces[0] == "*" {
		return served{ReasonWatching, "Watching CommitRequests in every namespace of the source cluster."}
	}
	return served{ReasonWatching, fmt.Sprintf("Watching CommitRequests in namespaces %s of the source cluster.", strings.Join(namespaces, ", "))}
}

// neededRights says what RBAC a mode needs on the source cluster.
func neededRights(mode v1.CommitRequestsMode) string {
	rights := "get, list and watch on commitrequests and update on commitrequests/status"
	if mode == v1.CommitRequestsReconcileAndDeleteFinished {
		rights = "get, list, watch, patch and delete on commitrequests and update on commitrequests/status"
	}
	return rights + " there"
}

// notServed tells a cluster without the kind from one serving other
// versions of the group.
func notServed(dc discovery.DiscoveryInterface) served {
	groups, err := dc.ServerGroups()
	if err != nil {
		return fromError(err, "discovery")
	}
	for _, g := range groups.Groups {
		if g.Name != v1.GroupName {
			continue
		}
		var versions []string
		for _, v := range g.Versions {
			versions = append(versions, v.Version)
		}
		return served{ReasonVersionNotServed, fmt.Sprintf("The source cluster serves %s in versions %s, not %s, the one this release "+
			"serves: apply this release's artifacts/source (or, in kcp, its APIResourceSchema and APIExport; docs/kcp.md)",
			v1.GroupName, strings.Join(versions, ", "), v1.SchemeGroupVersion.Version)}
	}
	return served{ReasonCRDNotInstalled, fmt.Sprintf("The source cluster does not serve commitrequests.%s: install the CRD with "+
		"kubectl apply --server-side -k artifacts/source (in kcp, bind the APIExport; docs/kcp.md)", v1.GroupName)}
}

// fromError turns a failed call into Forbidden (the credential lacks a
// right, or is not accepted) or Unreachable.
func fromError(err error, doing string) served {
	switch {
	case apierrors.IsForbidden(err):
		return served{ReasonForbidden, fmt.Sprintf("%s is forbidden to the provider's credential: grant it %s (%v)", doing,
			neededRights(v1.CommitRequestsReconcile), err)}
	case apierrors.IsUnauthorized(err):
		return served{ReasonForbidden, fmt.Sprintf("%s: the source cluster does not accept the provider's credential (%v): "+
			"rotate the kubeconfig Secret", doing, err)}
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return served{ReasonUnreachable, fmt.Sprintf("%s failed: %v", doing, err)}
	}
	return served{ReasonUnreachable, fmt.Sprintf("%s failed: %v: check the kubeconfig's server address and that the cluster runs", doing, err)}
}

// report hands the status writer the provider's CommitRequestsServed
// condition and the namespaces watched; nil removes both
// (spec.commitRequests: Ignore).
func (s *Sources) report(_ context.Context, kp *v1.KubeProvider, state *served, watched []string) error {
	part := providerstatus.Part{Fields: func(status *v1.KubeProviderStatus) {
		status.CommitRequests = nil
		if len(watched) > 0 {
			status.CommitRequests = &v1.CommitRequestsServiceStatus{Namespaces: watched}
		}
	}}
	if state == nil {
		part.Remove = []string{v1.ConditionCommitRequestsServed}
	} else {
		part.Conditions = []metav1.Condition{condition(state.reason == ReasonWatching, state.reason, state.message)}
	}
	s.cfg.ProviderStatus.Report(kp.Name, "commitrequests", part)
	return nil
}

func condition(ok bool, reason, message string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: v1.ConditionCommitRequestsServed, Status: status, Reason: reason, Message: message}
}

// frontEnds are the source front ends running, by KubeProvider and
// namespace: a namespace lent or withdrawn starts or stops its own, and
// leaves the others' saves alone.
type frontEnds struct {
	ctx     context.Context
	mu      sync.Mutex
	running map[string]map[string]*frontEnd // by provider, then namespace
}

// frontEndKey is what a running front end was started for: a rotated
// credential or another mode restarts it.
type frontEndKey struct {
	fingerprint string
	mode        v1.CommitRequestsMode
}

type frontEnd struct {
	key    frontEndKey
	cancel context.CancelFunc
}

// ensure runs a front end for key in each namespace, and none elsewhere.
func (f *frontEnds) ensure(provider string, namespaces []string, key frontEndKey, start func(context.Context, string) error) error {
	f.prune(provider, namespaces, key)
	for _, ns := range namespaces {
		f.mu.Lock()
		_, ok := f.running[provider][ns]
		f.mu.Unlock()
		if ok {
			continue
		}
		ctx, cancel := context.WithCancel(f.ctx)
		if err := start(ctx, ns); err != nil {
			cancel()
			return err
		}
		f.mu.Lock()
		if f.running[provider] == nil {
			f.running[provider] = map[string]*frontEnd{}
		}
		f.running[provider][ns] = &frontEnd{key: key, cancel: cancel}
		f.mu.Unlock()
	}
	return nil
}

// prune stops the provider's front ends outside namespaces or started for
// another key.
func (f *frontEnds) prune(provider string, namespaces []string, key frontEndKey) {
	f.mu.Lock()
	var stopped []*frontEnd
	for ns, fe := range f.running[provider] {
		if fe.key != key || !slices.Contains(namespaces, ns) {
			stopped = append(stopped, fe)
			delete(f.running[provider], ns)
		}
	}
	f.mu.Unlock()
	for _, fe := range stopped {
		fe.cancel()
	}
}

// serving says whether a front end for key runs in every namespace.
func (f *frontEnds) serving(provider string, namespaces []string, key frontEndKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ns := range namespaces {
		if fe, ok := f.running[provider][ns]; !ok || fe.key != key {
			return false
		}
	}
	return len(namespaces) > 0
}

func (f *frontEnds) stop(provider string) {
	f.prune(provider, nil, frontEndKey{})
}

func (f *frontEnds) stopAll() {
	f.mu.Lock()
	providers := make([]string, 0, len(f.running))
	for p := range f.running {
		providers = append(providers, p)
	}
	f.mu.Unlock()
	for _, p := range providers {
		f.stop(p)
	}
}
