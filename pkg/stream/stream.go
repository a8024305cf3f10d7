package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/metrics"
)

// Sink receives a stream's changes: a branch worker.
type Sink interface {
	Change(ctx context.Context, key string, ch document.Change)
	Synced(ctx context.Context, key string, scope document.Scope)
}

func change(gvr schema.GroupVersionResource, base string, u *unstructured.Unstructured, content []byte) document.Change {
	return document.Change{
		Path: document.DocumentPath(base, gvr, u.GetNamespace(), u.GetName()), Content: content, Desc: describe(u), Seen: time.Now(),
		GVR: gvr, Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName(), ResourceVersion: u.GetResourceVersion(),
		UID: u.GetUID(), Manager: lastManager(u),
	}
}

// lastManager is the manager of obj's newest managedFields entry.
func lastManager(u *unstructured.Unstructured) string {
	md, _ := u.Object["metadata"].(map[string]any)
	manager, _ := newestManaged(md)["manager"].(string)
	return manager
}

// newestManaged is the newest entry of metadata md's managedFields with a
// time (RFC 3339, as the API server writes it); of two of the same second,
// the later in the list; nil when none has one. It reads the raw maps:
// converting them to typed entries and back cost more than all the rest
// of trimming an object.
func newestManaged(md map[string]any) map[string]any {
	entries, _ := md["managedFields"].([]any)
	var newest map[string]any
	var newestAt time.Time
	for _, e := range entries {
		m, _ := e.(map[string]any)
		s, _ := m["time"].(string)
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			continue
		}
		if newest == nil || !at.Before(newestAt) {
			newest, newestAt = m, at
		}
	}
	return newest
}

// Stream watches one scope for one GitTarget, fed by the source's shared
// informer (Informers). Watch is the only source of object state: the
// informer's objects when the stream attaches are the snapshot, after which
// the sink sweeps; relists after 410 Gone or a lost connection report
// deletes that happened meanwhile.
//
// The informer queues the stream's events; one goroutine of the stream's
// own hands them to the sink, in order, and after Stop returns it never
// calls the sink again: Stop waits for that goroutine, which checks the
// stream's context before each call.
type Stream struct {
	Scope document.Scope
	// list lists the stream's collection, for barriers.
	list   dynamic.ResourceInterface
	cancel context.CancelFunc
	// handled is the newest resourceVersion of an event the stream has
	// handed on (or passed over); numeric is false once one was not a
	// number, which barriers cannot compare.
	handled    atomic.Uint64
	notNumeric atomic.Bool
	done       chan struct{}
	synced     atomic.Bool
	// ended: the end of the snapshot is queued (informer.endSnapshot).
	ended atomic.Bool

	informers *Informers
	from      *informer
	namespace string // what the stream reads of its informer: "" all
	queue     queue
	stopOnce  sync.Once
}

// event is one informer event for a stream; synced marks the end of the
// stream's initial state.
type event struct {
	obj, old any
	deleted  bool
	synced   bool
}

// queue is a stream's unbounded FIFO of events: the informer's handler never
// waits for a stream.
type queue struct {
	mu     sync.Mutex
	events []event
	wake   chan struct{}
}

func (q *queue) push(e event) {
	q.mu.Lock()
	q.events = append(q.events, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// pop waits for the next event; false once ctx is done.
func (q *queue) pop(ctx context.Context) (event, bool) {
	for {
		if ctx.Err() != nil {
			return event{}, false
		}
		q.mu.Lock()
		if len(q.events) > 0 {
			e := q.events[0]
			q.events[0] = event{}
			q.events = q.events[1:]
			q.mu.Unlock()
			return e, true
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
		}
	}
}

// StartStream starts watching scope through an informer of its own; a
// controller shares informers with Informers.Stream.
func StartStream(ctx context.Context, client dynamic.Interface, key, base string, scope document.Scope, policy document.Policy, sink Sink) *Stream {
	return NewInformers(client, nil).Stream(ctx, key, base, scope, policy, sink)
}

// Stream starts watching scope and feeding sink for the GitTarget key whose
// documents live under base; policy says what becomes of credentials.
func (h *Informers) Stream(ctx context.Context, key, base string, scope document.Scope, policy document.Policy, sink Sink) *Stream {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{Scope: scope, cancel: cancel, done: make(chan struct{}), informers: h, queue: queue{wake: make(chan struct{}, 1)}}
	if scope.Namespace != "*" {
		s.namespace = scope.Namespace
	}
	s.list = h.client.Resource(scope.GVR).Namespace(s.namespace)
	// The informer outlives this stream when others share it, so it runs
	// on the caller's context, not the stream's.
	s.from = h.acquire(parent, scope)
	s.from.attach(s, s.namespace)
	var wg sync.WaitGroup
	wg.Go(func() {
		// Everything queued before the informer had handed on its initial
		// objects is the stream's initial state. Its end is queued by the
		// first event after them (or by attach, on a synced informer);
		// this poll queues it when no event comes.
		if cache.WaitForCacheSync(ctx.Done(), s.from.reg.HasSynced) {
			s.from.mu.Lock()
			s.from.endSnapshot(s)
			s.from.mu.Unlock()
		}
	})
	wg.Go(func() { s.run(ctx, key, base, policy, sink) })
	go func() {
		wg.Wait()
		close(s.done)
	}()
	return s
}

// run hands the stream's events to the sink until ctx is done.
func (s *Stream) run(ctx context.Context, key, base string, policy document.Policy, sink Sink) {
	gr := s.Scope.GVR.GroupResource()
	for {
		e, ok := s.queue.pop(ctx)
		if !ok {
			return
		}
		if e.synced {
			s.synced.Store(true)
			sink.Synced(ctx, key, s.Scope)
			continue
		}
		u, err := toUnstructured(e.obj)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Skipping an object", "scope", s.Scope.String())
			continue
		}
		if e.deleted {
			if _, skip := document.Skip(gr, u, policy.Secrets); !skip {
				metrics.WatchEvents.WithLabelValues("deleted").Inc()
				sink.Change(ctx, key, change(s.Scope.GVR, base, u, nil))
			}
			s.handle(u.GetResourceVersion())
			continue
		}
		if ch, ok := s.document(ctx, gr, base, policy, u, e.old); ok {
			sink.Change(ctx, key, ch)
		}
		s.handle(u.GetResourceVersion()) // after the sink has it
	}
}

// document is the change of u's new document; none when it is never
// written, or does not differ from old's (status and runtime churn write
// nothing). Each object is sanitized once.
func (s *Stream) document(ctx context.Context, gr schema.GroupResource, base string, policy document.Policy, u *unstructured.Unstructured,
	old any) (document.Change, bool) {
	if outcome, skip := document.Skip(gr, u, policy.Secrets); skip {
		metrics.WatchEvents.WithLabelValues(string(outcome)).Inc()
		return document.Change{}, false
	}
	content, encrypt, err := policy.Document(gr, u)
	if err != nil {
		metrics.WatchEvents.WithLabelValues(string(document.OutcomeInvalid)).Inc()
		klog.FromContext(ctx).Error(err, "Cannot write object", "scope", s.Scope.String(), "object", klog.KObj(u))
		return document.Change{}, false
	}
	if old != nil {
		if o, err := toUnstructured(old); err == nil {
			if before, _, err := policy.Document(gr, o); err == nil && string(before) == string(content) {
				metrics.WatchEvents.WithLabelValues(string(document.OutcomeUnchanged)).Inc()
				return document.Change{}, false
			}
		}
	}
	metrics.WatchEvents.WithLabelValues(string(document.OutcomeMirrored)).Inc()
	ch := change(s.Scope.GVR, base, u, content)
	ch.Snapshot, ch.Encrypt = !s.synced.Load(), encrypt
	return ch, true
}

// trim drops, before an object is cached, what its document never holds
// and the stream never reads: status, the last-applied annotation, and the
// field sets of managedFields, of which only the newest entry's manager is
// kept (lastManager). A cache of many objects holds a fraction of the
// memory.
func trim(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		if o, typed := obj.(metav1.Object); typed {
			trimTyped(o)
		}
		return obj, nil
	}
	delete(u.Object, "status")
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		document.DropStrings(md, "annotations", func(k string) bool { return k == corev1.LastAppliedConfigAnnotation })
		if _, has := md["managedFields"]; has {
			if m := newestManaged(md); m != nil {
				kept := make(map[string]any, 3)
				for _, k := range []string{"manager", "operation", "time"} {
					if v, _ := m[k].(string); v != "" {
						kept[k] = v
					}
				}
				md["managedFields"] = []any{kept}
			} else {
				delete(md, "managedFields")
			}
		}
	}
	return u, nil
}

// watchErrorReason sorts a watch error for the watch errors metric.
func watchErrorReason(err error) string {
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return "expired"
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return "forbidden"
	case utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded):
		return "unreachable"
	}
	return "other"
}

func describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetKind() + " " + u.GetName()
	}
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// Err is why the stream does not receive events: its informer's last list
// or watch failure, nil once events flow again.
func (s *Stream) Err() error { return s.from.Err() }

// handle records that the event at resourceVersion rv was handed on.
func (s *Stream) handle(rv string) {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		s.notNumeric.Store(true)
		return
	}
	for cur := s.handled.Load(); n > cur && !s.handled.CompareAndSwap(cur, n); cur = s.handled.Load() {
	}
}

// ErrNotNumeric: a source whose resourceVersions are not numbers cannot
// answer a barrier.
var ErrNotNumeric = errors.New("the source's resourceVersions are not numbers")

// newest lists the stream's collection and returns the newest
// resourceVersion of an object in it (0 when empty).
func (s *Stream) newest(ctx context.Context) (uint64, error) {
	var newest uint64
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := s.list.List(ctx, opts)
		if err != nil {
			return 0, fmt.Errorf("listing %s: %w", s.Scope, err)
		}
		for i := range list.Items {
			n, err := strconv.ParseUint(list.Items[i].GetResourceVersion(), 10, 64)
			if err != nil {
				return 0, ErrNotNumeric
			}
			newest = max(newest, n)
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return newest, nil
		}
	}
}

// Barrier waits until every stream has handed on an event at or past the
// newest resourceVersion its collection held when Barrier was called: then
// every write made before it is in the sink's queue. It polls every poll
// until ctx is done.
func Barrier(ctx context.Context, streams []*Stream, poll time.Duration) error {
	marks := make([]uint64, len(streams))
	for i, s := range streams {
		n, err := s.newest(ctx)
		if err != nil {
			return err
		}
		marks[i] = n
	}
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		met := true
		var behind []string
		for i, s := range streams {
			if s.notNumeric.Load() {
				return ErrNotNumeric
			}
			if h := s.handled.Load(); h < marks[i] {
				met = false
				behind = append(behind, fmt.Sprintf("%s at %d of %d", s.Scope, h, marks[i]))
			}
		}
		if met {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: streams behind: %s", ctx.Err(), strings.Join(behind, ", "))
		case <-ticker.C:
		}
	}
}

// Synced says whether the initial state has been delivered.
func (s *Stream) Synced() bool { return s.synced.Load() }

// Stop ends the stream and waits for it: for the sink call under way. After
// Stop returns, the sink is never called again for this stream. The
// informer stops with its last stream.
func (s *Stream) Stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		s.from.detach(s, s.namespace)
		<-s.done
		s.informers.release(s.from)
	})
	<-s.done
}
