package stream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"

	"reverser.dev/reverser/pkg/document"
)

var secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// typedObjects are a ConfigMap and a Secret with everything a document
// keeps or drops: labels, the last-applied copy, managedFields, binary
// data, immutability, a type.
func typedObjects() []runtime.Object {
	at := func(s int) *metav1.Time { return &metav1.Time{Time: time.Date(2026, 12, 1, 0, 0, s, 0, time.UTC)} }
	md := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: "demo", Name: name, UID: types.UID("u-" + name), ResourceVersion: "7", Generation: 1,
			CreationTimestamp: *at(0), Labels: map[string]string{"app": name},
			Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: `{"big":"copy"}`, "note": "kept"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: at(1), FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:data":{}}`)},
				{Manager: "alice-tool", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: at(2), FieldsType: "FieldsV1",
					FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{}}`)},
			}}
	}
	immutable := true
	return []runtime.Object{
		&corev1.ConfigMap{ObjectMeta: md("app"), Immutable: &immutable, Data: map[string]string{"a": "1", "multi": "x\ny\n"},
			BinaryData: map[string][]byte{"bin": {0, 1, 2}}},
		&corev1.Secret{ObjectMeta: md("token"), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("s3cret")}},
	}
}

// collect runs a stream of scope on h and returns its snapshot's changes.
func collect(t *testing.T, h *Informers, scope document.Scope, policy document.Policy) []document.Change {
	sink := newBlockingSinkReleased()
	s := h.Stream(t.Context(), "t", "base", scope, policy, sink)
	defer s.Stop()
	waitSynced(t, s)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	out := append([]document.Change(nil), sink.changes...)
	for i := range out {
		out[i].Seen = time.Time{}
	}
	return out
}

// TestTypedInformersWriteWhatDynamicOnesWrite: ConfigMaps and Secrets read
// through the typed client give the same documents, names, managers and
// encryption marks as through the dynamic client, and the typed cache is
// trimmed as the unstructured one is.
func TestTypedInformersWriteWhatDynamicOnesWrite(t *testing.T) {
	objs := typedObjects()
	var unstr []runtime.Object
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		require.NoError(t, err)
		u, err := toUnstructured(o)
		require.NoError(t, err)
		u.Object = m
		kinds, _, err := scheme.Scheme.ObjectKinds(o)
		require.NoError(t, err)
		u.SetGroupVersionKind(kinds[0])
		unstr = append(unstr, u)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{configMaps: "ConfigMapList", secrets: "SecretList"}, unstr...)
	typed := kubefake.NewClientset(objs...)
	policy := document.Policy{Secrets: document.SealSecrets}
	for _, gvr := range []schema.GroupVersionResource{configMaps, secrets} {
		scope := document.Scope{GVR: gvr, Namespace: "demo"}
		want := collect(t, NewInformers(dyn, nil), scope, policy)
		// A dynamic client holding nothing: what it gives comes from typed.
		viaTyped := NewInformers(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), nil).WithTyped(typed)
		got := collect(t, viaTyped, scope, policy)
		require.Len(t, want, 1)
		assert.Equal(t, want, got, "%s", gvr.Resource)
		assert.Equal(t, "alice-tool", got[0].Manager)
		assert.NotContains(t, string(got[0].Content), "big", "no last-applied copy")
	}
}

// TestATypedCacheIsTrimmed: what the typed informer caches holds no
// last-applied copy and one managedFields entry without its field set.
func TestATypedCacheIsTrimmed(t *testing.T) {
	typed := kubefake.NewClientset(typedObjects()...)
	h := NewInformers(dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), nil).WithTyped(typed)
	sink := newBlockingSinkReleased()
	s := h.Stream(t.Context(), "t", "base", document.Scope{GVR: configMaps, Namespace: "demo"}, document.Policy{}, sink)
	defer s.Stop()
	waitSynced(t, s)
	var cached []any
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) {
			cached = s.from.inf.GetStore().List()
			return len(cached) == 1, nil
		}))
	cm, ok := cached[0].(*corev1.ConfigMap)
	require.True(t, ok, "cached typed: %T", cached[0])
	assert.Equal(t, map[string]string{"note": "kept"}, cm.Annotations)
	assert.Equal(t, []metav1.ManagedFieldsEntry{{Manager: "alice-tool", Operation: metav1.ManagedFieldsOperationUpdate,
		Time: cm.ManagedFields[0].Time}}, cm.ManagedFields)

	// An update of what no document holds writes nothing; the edit after
	// it does.
	cms := typed.CoreV1().ConfigMaps("demo")
	fresh, err := cms.Get(t.Context(), "app", metav1.GetOptions{})
	require.NoError(t, err)
	fresh.ManagedFields[0].Manager = "someone-else"
	fresh.ResourceVersion = "8"
	_, err = cms.Update(t.Context(), fresh, metav1.UpdateOptions{})
	require.NoError(t, err)
	fresh.Labels["app"] = "changed"
	fresh.ResourceVersion = "9"
	_, err = cms.Update(t.Context(), fresh, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			return len(sink.changes) >= 2, nil
		}))
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.changes, 2, "the snapshot and the label's edit, not the managedFields' update")
	assert.Contains(t, string(sink.changes[1].Content), "app: changed")
	assert.Equal(t, "9", sink.changes[1].ResourceVersion)
}
