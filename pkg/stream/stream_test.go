package stream

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	watchapi "k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/metrics"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func configMap(namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(namespace)
	u.SetName(name)
	_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"k": name}, "data")
	return u
}

// blockingSink records every call; the first Change hands its context to
// entered and blocks until release is closed.
type blockingSink struct {
	entered chan context.Context
	release chan struct{}

	mu      sync.Mutex
	changes []document.Change
	synced  int
	inside  int
}

func newBlockingSink() *blockingSink {
	return &blockingSink{entered: make(chan context.Context, 1), release: make(chan struct{})}
}

func (s *blockingSink) Change(ctx context.Context, _ string, ch document.Change) {
	s.mu.Lock()
	s.changes = append(s.changes, ch)
	first := len(s.changes) == 1
	s.inside++
	s.mu.Unlock()
	if first {
		s.entered <- ctx
		<-s.release
	}
	s.mu.Lock()
	s.inside--
	s.mu.Unlock()
}

func (s *blockingSink) Synced(context.Context, string, document.Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced++
}

// calls is how many sink calls were made, and how many are under way.
func (s *blockingSink) calls() (n, inside int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.changes) + s.synced, s.inside
}

// TestStopWaitsForHandlers: Stop returns only once every handler call has
// left the sink, and after it returns the sink is never called again.
func TestStopWaitsForHandlers(t *testing.T) {
	ctx := t.Context()
	const ns = "demo"
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"},
		configMap(ns, "a"), configMap(ns, "b"), configMap(ns, "c"))
	cms := client.Resource(configMaps).Namespace(ns)
	sink := newBlockingSink()
	s := StartStream(ctx, client, "key", "base", document.Scope{GVR: configMaps, Namespace: ns}, document.Policy{}, sink)

	// The first change of the initial list is now blocked inside the sink.
	var handlerCtx context.Context
	select {
	case handlerCtx = <-sink.entered:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no change reached the sink")
	}

	stopped := make(chan struct{})
	var insideAtReturn int
	go func() {
		defer close(stopped)
		s.Stop()
		_, insideAtReturn = sink.calls()
	}()

	// Stop has cancelled the stream: the blocked handler's context says so.
	select {
	case <-handlerCtx.Done():
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("Stop did not cancel the stream's context")
	}
	// More events while the handler is blocked and the stream is stopping.
	_, err := cms.Create(ctx, configMap(ns, "d"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, cms.Delete(ctx, "b", metav1.DeleteOptions{}))

	// Stop must not return while the handler is inside the sink. Only a Stop
	// that wrongly returns can end this poll early; a correct Stop always
	// passes, whatever the timing.
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 300*time.Millisecond, true,
		func(context.Context) (bool, error) {
			select {
			case <-stopped:
				return true, nil
			default:
				return false, nil
			}
		})
	assert.True(t, wait.Interrupted(err), "Stop returned while a handler was blocked in the sink")

	close(sink.release)
	select {
	case <-stopped:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("Stop did not return after the handler left the sink")
	}
	assert.Zero(t, insideAtReturn, "Stop returned while a handler was inside the sink")

	// Every handler call after the blocked one began after the stream was
	// cancelled, so none reached the sink; nor did Synced.
	n, inside := sink.calls()
	assert.Equal(t, 1, n, "sink called after Stop cancelled the stream")
	assert.Zero(t, inside)

	// After Stop returned, nothing reaches the sink any more.
	for _, name := range []string{"e", "f"} {
		_, err := cms.Create(ctx, configMap(ns, name), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	a := configMap(ns, "a")
	_ = unstructured.SetNestedStringMap(a.Object, map[string]string{"k": "changed"}, "data")
	_, err = cms.Update(ctx, a, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, cms.Delete(ctx, "c", metav1.DeleteOptions{}))
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 300*time.Millisecond, true,
		func(context.Context) (bool, error) {
			now, _ := sink.calls()
			return now != n, nil
		})
	assert.True(t, wait.Interrupted(err), "sink called after Stop returned")
	now, _ := sink.calls()
	assert.Equal(t, n, now, "sink called after Stop returned")
	assert.False(t, s.Synced())
}

func TestWatchErrorReason(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for err, want := range map[error]string{
		apierrors.NewResourceExpired("too old resource version: 5 (9)"): "expired",
		apierrors.NewForbidden(gr, "", errors.New("no")):                "forbidden",
		io.EOF:                       "unreachable",
		errors.New("something else"): "other",
	} {
		assert.Equal(t, want, watchErrorReason(err), "%v", err)
	}
}

// TestExpiredWatchesAreCounted: a watch that ends with 410 Expired, which the
// reflector handles by listing again without telling its error handler, is
// counted as expired.
func TestExpiredWatchesAreCounted(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}, configMap("demo", "a"))
	expired := false
	var mu sync.Mutex
	client.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watchapi.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		if expired {
			return false, nil, nil // the watches after the first are served as usual
		}
		expired = true
		w := watchapi.NewFake()
		go w.Error(&apierrors.NewResourceExpired("too old resource version: 1 (5)").ErrStatus)
		return true, w, nil
	})
	before := testutil.ToFloat64(metrics.WatchErrors.WithLabelValues("expired"))
	s := StartStream(t.Context(), client, "key", "base", document.Scope{GVR: configMaps, Namespace: "demo"}, document.Policy{}, newBlockingSinkReleased())
	defer s.Stop()
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(metrics.WatchErrors.WithLabelValues("expired")) > before, nil
	}), "the expired watch was not counted")
}

// newBlockingSinkReleased is a sink that records and never blocks.
func newBlockingSinkReleased() *blockingSink {
	s := newBlockingSink()
	close(s.release)
	return s
}

// A cached object keeps what its document and the stream need: not its
// status, its last-applied copy or its managed field sets.
func TestTrimKeepsWhatTheStreamReads(t *testing.T) {
	u := object(t, `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: demo
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"data":{"color":"blue"}}'
    team: shop
  managedFields:
  - {manager: kubectl, operation: Update, time: "2026-12-01T10:00:00Z", fieldsType: FieldsV1, fieldsV1: {"f:data": {"f:color": {}}}}
  - {manager: kustomize-controller, operation: Apply, time: "2026-12-01T10:00:05Z", fieldsType: FieldsV1, fieldsV1: {"f:data": {}}}
  - {manager: old, operation: Update, time: "2026-12-01T09:00:00Z"}
data: {color: blue}
status: {phase: Ready}
`)
	before, err := document.Sanitize(configMaps.GroupResource(), u)
	require.NoError(t, err)
	out, err := trim(u)
	require.NoError(t, err)
	got := out.(*unstructured.Unstructured)
	after, err := document.Sanitize(configMaps.GroupResource(), got)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "the document is the same")
	assert.Equal(t, "kustomize-controller", lastManager(got), "the newest manager is kept")
	assert.Len(t, got.GetManagedFields(), 1)
	assert.Nil(t, got.GetManagedFields()[0].FieldsV1)
	assert.NotContains(t, got.Object, "status")
	assert.Equal(t, map[string]string{"team": "shop"}, got.GetAnnotations())
}

// trimmedBefore is what trim kept of managedFields when it converted them
// to typed entries and back (the newest entry with a time; on a tie, the
// later in the list).
func trimmedBefore(u *unstructured.Unstructured) []metav1.ManagedFieldsEntry {
	var newest *metav1.ManagedFieldsEntry
	entries := u.GetManagedFields()
	for i := range entries {
		if e := &entries[i]; e.Time != nil && (newest == nil || !e.Time.Time.Before(newest.Time.Time)) {
			newest = e
		}
	}
	if newest == nil {
		return nil
	}
	return []metav1.ManagedFieldsEntry{{Manager: newest.Manager, Operation: newest.Operation, Time: newest.Time}}
}

// TestTrimKeepsTheNewestManagerAsBefore: reading the raw maps keeps the
// entry the typed conversion kept, ties and entries without a time included.
func TestTrimKeepsTheNewestManagerAsBefore(t *testing.T) {
	for name, fields := range map[string]string{
		"newest last":      `[{manager: a, operation: Update, time: "2026-12-01T10:00:00Z"}, {manager: b, operation: Apply, time: "2026-12-01T10:00:01Z"}]`,
		"newest first":     `[{manager: a, operation: Update, time: "2026-12-01T11:00:00Z"}, {manager: b, operation: Apply, time: "2026-12-01T10:00:01Z"}]`,
		"a tie":            `[{manager: a, operation: Update, time: "2026-12-01T10:00:00Z"}, {manager: b, operation: Update, time: "2026-12-01T10:00:00Z"}]`,
		"no time":          `[{manager: a, operation: Update}, {manager: b, operation: Apply, time: "2026-12-01T09:00:00Z"}, {manager: c}]`,
		"none has a time":  `[{manager: a, operation: Update}]`,
		"no operation":     `[{manager: a, time: "2026-12-01T10:00:00Z", fieldsType: FieldsV1, fieldsV1: {"f:data": {}}}]`,
		"an empty list":    `[]`,
		"with field sets":  `[{manager: kubectl, operation: Update, time: "2026-12-01T10:00:00Z", fieldsType: FieldsV1, fieldsV1: {"f:data": {"f:a": {}}}}]`,
		"trimmed already":  `[{manager: kubectl, operation: Update, time: "2026-12-01T10:00:00Z"}]`,
		"an offset, later": `[{manager: a, operation: Update, time: "2026-12-01T10:30:00Z"}, {manager: b, operation: Update, time: "2026-12-01T11:00:00+01:00"}]`,
	} {
		t.Run(name, func(t *testing.T) {
			u := object(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  managedFields: "+fields+"\ndata: {a: b}\n")
			want := trimmedBefore(u.DeepCopy())
			manager := ""
			if len(want) > 0 {
				manager = want[0].Manager
			}
			assert.Equal(t, manager, lastManager(u), "before trimming")
			out, err := trim(u)
			require.NoError(t, err)
			got := out.(*unstructured.Unstructured)
			assert.Equal(t, want, got.GetManagedFields())
			assert.Equal(t, manager, lastManager(got), "after trimming")
		})
	}
}

// object reads a YAML document into an object.
func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &u.Object))
	return u
}
