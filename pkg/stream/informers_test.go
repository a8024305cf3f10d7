package stream

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/metrics"
)

func fakeSource(objects ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList"}, objects...)
}

// lists counts the lists of configmaps the source served, by namespace.
func lists(client *dynamicfake.FakeDynamicClient) map[string]int {
	n := map[string]int{}
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource() == configMaps {
			n[a.GetNamespace()]++
		}
	}
	return n
}

func waitSynced(t *testing.T, streams ...*Stream) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) {
			for _, s := range streams {
				if !s.Synced() {
					return false, nil
				}
			}
			return true, nil
		}), "streams did not sync")
}

// seen is what reached a sink, as namespace/name, and whether each was
// part of a snapshot.
func (s *blockingSink) seen() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, ch := range s.changes {
		out[ch.Namespace+"/"+ch.Name] = ch.Snapshot
	}
	return out
}

// TestStreamsShareOneInformerPerResource: GitTargets reading a resource in
// different namespaces, or all of them, share one informer and one list;
// each sees only its own namespace, a stream that attaches late gets the
// informer's objects as its snapshot, and the informer stops with its last
// stream.
func TestStreamsShareOneInformerPerResource(t *testing.T) {
	ctx := t.Context()
	client := fakeSource(configMap("a", "one"), configMap("a", "two"), configMap("b", "three"))
	var asked atomic.Int32
	h := NewInformers(client, func(context.Context, schema.GroupVersionResource) (bool, error) {
		asked.Add(1)
		return true, nil
	})
	h.Decide(ctx, []schema.GroupVersionResource{configMaps})
	h.Decide(ctx, []schema.GroupVersionResource{configMaps})
	before := testutil.ToFloat64(metrics.Informers)
	inA, inB, all := newBlockingSinkReleased(), newBlockingSinkReleased(), newBlockingSinkReleased()
	sa := h.Stream(ctx, "t1", "base", document.Scope{GVR: configMaps, Namespace: "a"}, document.Policy{}, inA)
	waitSynced(t, sa)
	sb := h.Stream(ctx, "t2", "base", document.Scope{GVR: configMaps, Namespace: "b"}, document.Policy{}, inB)
	sall := h.Stream(ctx, "t3", "base", document.Scope{GVR: configMaps, Namespace: "*"}, document.Policy{}, all)
	waitSynced(t, sb, sall)

	assert.Equal(t, map[string]int{"": 1}, lists(client), "one list, across all namespaces")
	assert.Equal(t, 1.0, testutil.ToFloat64(metrics.Informers)-before, "one informer")
	assert.Equal(t, int32(1), asked.Load(), "the source's rights are asked once")
	assert.Equal(t, map[string]bool{"a/one": true, "a/two": true}, inA.seen())
	assert.Equal(t, map[string]bool{"b/three": true}, inB.seen(), "a late stream's snapshot is the informer's objects")
	assert.Equal(t, map[string]bool{"a/one": true, "a/two": true, "b/three": true}, all.seen())

	_, err := client.Resource(configMaps).Namespace("b").Create(ctx, configMap("b", "four"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { _, ok := all.seen()["b/four"]; return ok, nil }))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { _, ok := inB.seen()["b/four"]; return ok, nil }))
	assert.False(t, inB.seen()["b/four"], "an edit after the snapshot is no snapshot")
	assert.NotContains(t, inA.seen(), "b/four", "a stream sees its namespace only")

	sa.Stop()
	sb.Stop()
	assert.Equal(t, 1.0, testutil.ToFloat64(metrics.Informers)-before, "the informer runs while a stream reads it")
	sall.Stop()
	assert.Equal(t, 0.0, testutil.ToFloat64(metrics.Informers)-before, "the informer stops with its last stream")
	h.mu.Lock()
	assert.Empty(t, h.running)
	h.mu.Unlock()

	// A stream after that starts a new informer, which lists again.
	again := h.Stream(ctx, "t1", "base", document.Scope{GVR: configMaps, Namespace: "a"}, document.Policy{}, newBlockingSinkReleased())
	waitSynced(t, again)
	again.Stop()
	assert.Equal(t, map[string]int{"": 2}, lists(client))
}

// TestWithoutClusterWideRightsInformersArePerNamespace: a source whose
// credentials may not list a resource everywhere is informed per namespace,
// still shared by the streams of one namespace.
func TestWithoutClusterWideRightsInformersArePerNamespace(t *testing.T) {
	ctx := t.Context()
	client := fakeSource(configMap("a", "one"), configMap("b", "two"))
	h := NewInformers(client, func(context.Context, schema.GroupVersionResource) (bool, error) { return false, nil })
	h.Decide(ctx, []schema.GroupVersionResource{configMaps})
	s1 := h.Stream(ctx, "t1", "base", document.Scope{GVR: configMaps, Namespace: "a"}, document.Policy{}, newBlockingSinkReleased())
	s2 := h.Stream(ctx, "t2", "other", document.Scope{GVR: configMaps, Namespace: "a"}, document.Policy{}, newBlockingSinkReleased())
	s3 := h.Stream(ctx, "t3", "base", document.Scope{GVR: configMaps, Namespace: "b"}, document.Policy{}, newBlockingSinkReleased())
	defer func() {
		for _, s := range []*Stream{s1, s2, s3} {
			s.Stop()
		}
	}()
	waitSynced(t, s1, s2, s3)
	assert.Equal(t, map[string]int{"a": 1, "b": 1}, lists(client))
}

// TestAnInformersFailureReachesEveryStream: a list the source refuses is
// the error of every stream on that informer, until events flow again.
func TestAnInformersFailureReachesEveryStream(t *testing.T) {
	ctx := t.Context()
	client := fakeSource(configMap("a", "one"), configMap("b", "two"))
	var refuse atomic.Bool
	refuse.Store(true)
	client.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		if refuse.Load() {
			return true, nil, apierrors.NewForbidden(configMaps.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	h := NewInformers(client, func(context.Context, schema.GroupVersionResource) (bool, error) { return true, nil })
	h.Decide(ctx, []schema.GroupVersionResource{configMaps})
	s1 := h.Stream(ctx, "t1", "base", document.Scope{GVR: configMaps, Namespace: "a"}, document.Policy{}, newBlockingSinkReleased())
	s2 := h.Stream(ctx, "t2", "base", document.Scope{GVR: configMaps, Namespace: "b"}, document.Policy{}, newBlockingSinkReleased())
	defer s1.Stop()
	defer s2.Stop()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { return s1.Err() != nil && s2.Err() != nil, nil }))
	assert.True(t, apierrors.IsForbidden(s2.Err()), "%v", s2.Err())
	refuse.Store(false)
	waitSynced(t, s1, s2)
	assert.NoError(t, s1.Err())
	assert.NoError(t, s2.Err())
}

// TestASlowSinkHoldsUpOnlyItsStream: streams share an informer, not a
// goroutine; one whose sink blocks leaves the others running.
func TestASlowSinkHoldsUpOnlyItsStream(t *testing.T) {
	ctx := t.Context()
	client := fakeSource(configMap("a", "one"), configMap("a", "two"), configMap("b", "three"))
	h := NewInformers(client, func(context.Context, schema.GroupVersionResource) (bool, error) { return true, nil })
	h.Decide(ctx, []schema.GroupVersionResource{configMaps})
	stuck, free := newBlockingSink(), newBlockingSinkReleased()
	sa := h.Stream(ctx, "t1", "base", document.Scope{GVR: configMaps, Namespace: "a"}, document.Policy{}, stuck)
	sb := h.Stream(ctx, "t2", "base", document.Scope{GVR: configMaps, Namespace: "b"}, document.Policy{}, free)
	defer sb.Stop()
	select {
	case <-stuck.entered:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no change reached the blocking sink")
	}
	waitSynced(t, sb)
	_, err := client.Resource(configMaps).Namespace("b").Create(ctx, configMap("b", "four"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) { _, ok := free.seen()["b/four"]; return ok, nil }))
	assert.False(t, sa.Synced())
	close(stuck.release)
	waitSynced(t, sa)
	assert.Equal(t, map[string]bool{"a/one": true, "a/two": true}, stuck.seen())
	sa.Stop()
}

// TestAnEditRightAfterTheSnapshotIsNoSnapshot: the end of a stream's
// snapshot is where its informer had handed on its initial objects, not
// where a poll noticed it later: an object created right after is an edit
// (attributed to its author), and the sink hears Synced before it. Holds
// for the stream that starts the informer and for one that attaches to it.
func TestAnEditRightAfterTheSnapshotIsNoSnapshot(t *testing.T) {
	ctx := t.Context()
	client := fakeSource(configMap("a", "one"))
	h := NewInformers(client, func(context.Context, schema.GroupVersionResource) (bool, error) { return true, nil })
	h.Decide(ctx, []schema.GroupVersionResource{configMaps})
	for i, ns := range []string{"a", "a"} {
		sink := newOrderSink()
		s := h.Stream(ctx, "t", "base", document.Scope{GVR: configMaps, Namespace: ns}, document.Policy{}, sink)
		defer s.Stop()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
			func(context.Context) (bool, error) { return s.from.reg.HasSynced(), nil }))
		name := fmt.Sprintf("new-%d", i)
		_, err := client.Resource(configMaps).Namespace(ns).Create(ctx, configMap(ns, name), metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
			func(context.Context) (bool, error) {
				return slices.Contains(sink.log(), "change "+name+" snapshot=false"), nil
			}),
			"stream %d: %v", i, sink.log())
		log := sink.log()
		assert.Less(t, slices.Index(log, "synced"), slices.Index(log, "change "+name+" snapshot=false"), "stream %d: %v", i, log)
		assert.Contains(t, log, "change one snapshot=true", "stream %d", i)
	}
}

// orderSink records the order of its calls.
type orderSink struct {
	mu    sync.Mutex
	calls []string
}

func newOrderSink() *orderSink { return &orderSink{} }

func (s *orderSink) Change(_ context.Context, _ string, ch document.Change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, fmt.Sprintf("change %s snapshot=%t", ch.Name, ch.Snapshot))
}

func (s *orderSink) Synced(context.Context, string, document.Scope) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "synced")
}

func (s *orderSink) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}
