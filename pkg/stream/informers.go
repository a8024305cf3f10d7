package stream

import (
	"context"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/metrics"
)

// ClusterWide says whether the source's credentials may list and watch a
// resource in every namespace; an error counts as no.
type ClusterWide func(ctx context.Context, gvr schema.GroupVersionResource) (bool, error)

// Informers shares the informers of one source among all the streams that
// read it: one informer per resource, across every namespace where the
// source's credentials allow it (ClusterWide, asked by Decide), else one per
// namespace; never one per GitTarget or rule. Each stream is handed only its
// namespace's objects.
//
// Locks: mu guards running and decided, and each informer's refs; it is
// never held while a ClusterWide question runs or while an informer stops.
// Stream never blocks on the source. An informer stops once its last stream
// has stopped, or when the context of the stream that started it ends.
type Informers struct {
	client dynamic.Interface
	// typed, when set, informs on typedKinds.
	typed kubernetes.Interface
	wide  ClusterWide

	mu      sync.Mutex
	running map[informerKey]*informer
	// decided caches ClusterWide's answers that were not errors.
	decided map[schema.GroupVersionResource]bool
}

// informerKey: namespace "" is every namespace, or a cluster-scoped resource.
type informerKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// informer is one shared informer. Its one handler hands each event to the
// queues of the streams of the event's namespace (and of those reading all
// namespaces): a stream never sees, nor pays for, another namespace's
// objects, and a slow sink holds up only its own stream.
//
// Locks: mu guards streams; the handler holds it for reading while it hands
// an event on, attach and detach for writing, so a stream attaching gets the
// informer's objects of its namespace before any event after them.
type informer struct {
	key    informerKey
	inf    cache.SharedIndexInformer
	reg    cache.ResourceEventHandlerRegistration
	cancel context.CancelFunc
	done   chan struct{}
	refs   int // guarded by Informers.mu
	// err is the informer's last list or watch failure, nil once an event
	// arrives again; every stream attached to it reports it.
	err atomic.Pointer[error]

	mu      sync.RWMutex
	streams map[string]map[*Stream]struct{} // by namespace; "" reads all
}

// NewInformers shares informers on client; wide nil informs per namespace.
func NewInformers(client dynamic.Interface, wide ClusterWide) *Informers {
	return &Informers{client: client, wide: wide, running: map[informerKey]*informer{}, decided: map[schema.GroupVersionResource]bool{}}
}

// WithTyped informs on ConfigMaps and Secrets with k (typedKinds), which
// should speak protobuf. Call it before the first Stream.
func (h *Informers) WithTyped(k kubernetes.Interface) *Informers {
	h.typed = k
	return h
}

// acquire returns a running informer that sees scope, starting one with ctx
// when none runs; the caller releases it. A namespace's stream uses the
// informer across all namespaces when one runs, or when Decide found the
// source may list there. It never asks the source: Stream is called under
// its callers' locks.
func (h *Informers) acquire(ctx context.Context, scope document.Scope) *informer {
	h.mu.Lock()
	defer h.mu.Unlock()
	key := informerKey{gvr: scope.GVR}
	if _, wide := h.running[key]; !wide && !h.decided[scope.GVR] && scope.Namespace != "*" {
		key.namespace = scope.Namespace // "" for a cluster-scoped resource
	}
	in := h.running[key]
	if in == nil {
		in = h.start(ctx, key)
		h.running[key] = in
	}
	in.refs++
	return in
}

// Decide asks the source, for each resource it has not answered for yet,
// whether its credentials may list and watch it in every namespace; streams
// started after it share one informer across namespaces where they may. It
// may block on the source, so call it before taking locks that Stream is
// called under. A question that fails is asked again next time; meanwhile
// streams inform per namespace.
func (h *Informers) Decide(ctx context.Context, gvrs []schema.GroupVersionResource) {
	if h.wide == nil {
		return
	}
	for _, gvr := range gvrs {
		h.mu.Lock()
		_, known := h.decided[gvr]
		h.mu.Unlock()
		if known {
			continue
		}
		wide, err := h.wide(ctx, gvr)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot tell whether the source may list a resource in all namespaces; informing per namespace",
				"resource", document.GVRString(gvr), "err", err)
			continue
		}
		h.mu.Lock()
		h.decided[gvr] = wide
		h.mu.Unlock()
	}
}

// start starts the informer of key; h.mu is held.
func (h *Informers) start(ctx context.Context, key informerKey) *informer {
	ctx, cancel := context.WithCancel(ctx)
	in := &informer{key: key, inf: newInformer(h.client, h.typed, key.gvr, key.namespace), cancel: cancel, done: make(chan struct{}),
		streams: map[string]map[*Stream]struct{}{}}
	// Registered before the informer runs, so it can never fail, and its
	// HasSynced says the initial objects have all been handed on.
	in.reg, _ = in.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { in.dispatch(event{obj: obj}) },
		UpdateFunc: func(old, obj any) { in.dispatch(event{obj: obj, old: old}) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			in.dispatch(event{obj: obj, deleted: true})
		},
	})
	// Lists and watches that fail to start come here; errors inside a
	// watch (410 Expired) are counted by newInformer.
	_ = in.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		metrics.WatchErrors.WithLabelValues(watchErrorReason(err)).Inc()
		in.err.Store(&err)
		klog.FromContext(ctx).V(2).Info("Watch failed; retrying", "resource", document.GVRString(key.gvr), "namespace", key.namespace, "err", err)
	})
	metrics.Informers.Inc()
	go func() {
		defer close(in.done)
		defer metrics.Informers.Dec()
		in.inf.RunWithContext(ctx)
	}()
	return in
}

// release drops a reference to in, stopping it after the last one; it
// returns once a stopped informer's goroutines have.
func (h *Informers) release(in *informer) {
	h.mu.Lock()
	in.refs--
	last := in.refs == 0
	if last && h.running[in.key] == in {
		delete(h.running, in.key)
	}
	h.mu.Unlock()
	if last {
		in.cancel()
		<-in.done
	}
}

// Err is the informer's last list or watch failure.
func (in *informer) Err() error {
	if p := in.err.Load(); p != nil {
		return *p
	}
	return nil
}

// dispatch hands e to the streams that read its namespace.
func (in *informer) dispatch(e event) {
	if in.err.Load() != nil {
		in.err.Store(nil) // an event arrived: the watch works again
	}
	o, ok := e.obj.(interface{ GetNamespace() string })
	if !ok {
		return
	}
	ns := o.GetNamespace()
	in.mu.RLock()
	defer in.mu.RUnlock()
	// Once the handler has handed on the informer's initial objects, every
	// event is an edit: a stream's snapshot ends before the first of them.
	synced := in.reg.HasSynced()
	for s := range in.streams[ns] {
		in.push(s, e, synced)
	}
	if ns != "" {
		for s := range in.streams[""] {
			in.push(s, e, synced)
		}
	}
}

// push queues e for s, after the end of its snapshot when the informer has
// synced. The handler calls it holding mu for reading; endSnapshot's other
// callers hold it for writing, so the end is queued once, in its place.
func (in *informer) push(s *Stream, e event, synced bool) {
	if synced {
		in.endSnapshot(s)
	}
	s.queue.push(e)
}

// endSnapshot queues the end of s's snapshot, unless it is queued already;
// in.mu is held.
func (in *informer) endSnapshot(s *Stream) {
	if s.ended.CompareAndSwap(false, true) {
		s.queue.push(event{synced: true})
	}
}

// attach queues the informer's objects of namespace ns ("": all) for s, as
// its initial state, and hands it every event after them. An object whose
// event the handler has not handed on yet reaches s twice, the second time
// as an event: the same document, which writes nothing.
func (in *informer) attach(s *Stream, ns string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	var objs []any
	if ns == "" {
		objs = in.inf.GetStore().List()
	} else {
		objs, _ = in.inf.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	}
	for _, obj := range objs {
		s.queue.push(event{obj: obj})
	}
	if in.reg.HasSynced() {
		in.endSnapshot(s) // the cache is the snapshot
	}
	if in.streams[ns] == nil {
		in.streams[ns] = map[*Stream]struct{}{}
	}
	in.streams[ns][s] = struct{}{}
}

func (in *informer) detach(s *Stream, ns string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.streams[ns], s)
	if len(in.streams[ns]) == 0 {
		delete(in.streams, ns)
	}
}

// Filtered by the API server, since no document is ever written from them:
// the Secrets holding ServiceAccount tokens, and the CA bundle the cluster
// puts in every namespace. Skip still refuses both.
var serverFilters = map[schema.GroupResource]string{
	document.SecretsResource: "type!=" + string(corev1.SecretTypeServiceAccountToken),
	{Resource: "configmaps"}: "metadata.name!=" + document.RootCAConfigMap,
}

// newInformer informs on gvr in ns (all namespaces: ""), as
// dynamicinformer's does, or with the typed client for typedKinds.
func newInformer(client dynamic.Interface, typed kubernetes.Interface, gvr schema.GroupVersionResource, ns string) cache.SharedIndexInformer {
	var lw cache.ListerWatcher
	var object runtime.Object = &unstructured.Unstructured{}
	if tk, ok := typedKinds[gvr]; ok && typed != nil {
		list, w := tk.listWatch(typed, ns)
		lw, object = listWatch(gvr, list, w, typed), tk.object
	} else {
		res := client.Resource(gvr).Namespace(ns)
		list := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return res.List(ctx, o) }
		lw = listWatch(gvr, list, res.Watch, client)
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, object, cache.SharedIndexInformerOptions{ObjectDescription: gvr.String(),
		Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}})
	_ = inf.SetTransform(trim) // only fails once the informer runs
	return inf
}

// listWatch lists and watches with gvr's server-side filter, and counts the
// errors that end a watch: the reflector lists again after them without
// telling its error handler. client tells whether watch-list may be used.
func listWatch(gvr schema.GroupVersionResource, list listFunc, watchFn watchFunc, client any) cache.ListerWatcher {
	filter := serverFilters[gvr.GroupResource()]
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = filter
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = filter
			w, err := watchFn(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if e.Type == watch.Error {
					metrics.WatchErrors.WithLabelValues(watchErrorReason(apierrors.FromObject(e.Object))).Inc()
				}
				return e, true
			}), nil
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}
