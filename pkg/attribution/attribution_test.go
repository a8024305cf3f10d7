package attribution

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
)

// t0 is when the tests' requests are received.
var t0 = time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)

func event(verb, user, rv string, mut ...func(*auditv1.Event)) auditv1.Event {
	ev := auditv1.Event{
		Stage: auditv1.StageResponseComplete, Verb: verb, RequestURI: "/api/v1/namespaces/demo/configmaps/app",
		User:                     authnv1.UserInfo{Username: user, UID: "uid-" + user, Groups: []string{"devs"}},
		ObjectRef:                &auditv1.ObjectReference{Resource: "configmaps", Namespace: "demo", Name: "app", APIVersion: "v1"},
		ResponseStatus:           &metav1.Status{Code: 200},
		RequestReceivedTimestamp: metav1.NewMicroTime(t0),
		StageTimestamp:           metav1.NewMicroTime(t0),
	}
	if rv != "" {
		ev.ResponseObject = &runtime.Unknown{Raw: []byte(`{"metadata":{"name":"app","resourceVersion":"` + rv + `"}}`)}
	}
	for _, m := range mut {
		m(&ev)
	}
	return ev
}

// respond sets the event's responseObject.
func respond(raw string) func(*auditv1.Event) {
	return func(e *auditv1.Event) { e.ResponseObject = &runtime.Unknown{Raw: []byte(raw)} }
}

// receivedAt sets the event's RequestReceivedTimestamp.
func receivedAt(t time.Time) func(*auditv1.Event) {
	return func(e *auditv1.Event) { e.RequestReceivedTimestamp = metav1.NewMicroTime(t) }
}

func ref(group, resource, sub, name string) func(*auditv1.Event) {
	return func(e *auditv1.Event) {
		e.ObjectRef.APIGroup, e.ObjectRef.Resource, e.ObjectRef.Subresource, e.ObjectRef.Name = group, resource, sub, name
	}
}

func key(rv string) Key {
	return Key{Provider: "local", Resource: "configmaps", Namespace: "demo", Name: "app", ResourceVersion: rv}
}

func deleteKey(uid types.UID) Key {
	return Key{Provider: "local", Resource: "configmaps", Namespace: "demo", Name: "app", UID: uid, ResourceVersion: DeleteMarker}
}

func TestFacts(t *testing.T) {
	deployment := func(rv string) Key {
		return Key{Provider: "local", Group: "apps", Resource: "deployments", Namespace: "demo", Name: "web", ResourceVersion: rv}
	}
	for _, tc := range []struct {
		name string
		ev   auditv1.Event
		want []Key
		user User
	}{
		{name: "update", ev: event("update", "alice", "10"), want: []Key{key("10")}},
		{name: "patch", ev: event("patch", "alice", "10"), want: []Key{key("10")}},
		{name: "create with generateName: the name comes from the response",
			ev: event("create", "alice", "10", func(e *auditv1.Event) { e.ObjectRef.Name = "" }), want: []Key{key("10")}},
		{name: "response not complete", ev: event("patch", "alice", "11", func(e *auditv1.Event) { e.Stage = auditv1.StageResponseStarted })},
		{name: "read", ev: event("get", "alice", "12")},
		{name: "failed", ev: event("update", "alice", "13", func(e *auditv1.Event) { e.ResponseStatus.Code = 409 })},
		{name: "dry run", ev: event("update", "alice", "14", func(e *auditv1.Event) { e.RequestURI += "?dryRun=All" })},
		{name: "logged at Metadata: nothing to join on", ev: event("update", "alice", "")},
		{name: "response is not JSON", ev: event("update", "alice", "", respond(`{"metadata":`))},
		{name: "an object with fields named items and details still makes its fact",
			ev:   event("update", "alice", "", respond(`{"kind":"Widget","metadata":{"name":"app","resourceVersion":"15"},"items":"x","details":7}`)),
			want: []Key{key("15")}},
		{name: "impersonated",
			ev: event("patch", "admin", "16", func(e *auditv1.Event) {
				e.ImpersonatedUser = &authnv1.UserInfo{Username: "system:serviceaccount:demo:deployer"}
			}),
			want: []Key{key("16")}, user: User{Name: "system:serviceaccount:demo:deployer", Impersonator: "admin"}},
		{name: "status update: keyed on the parent",
			ev: event("update", "alice", "", ref("apps", "deployments", "status", "web"),
				respond(`{"kind":"Deployment","metadata":{"name":"web","namespace":"demo","uid":"d1","resourceVersion":"41"}}`)),
			want: []Key{deployment("41")}},
		{name: "scale patch: keyed on the parent with the Scale's resourceVersion",
			ev: event("patch", "alice", "", ref("apps", "deployments", "scale", "web"),
				respond(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"web","namespace":"demo","uid":"d1","resourceVersion":"42"},"spec":{"replicas":3}}`)),
			want: []Key{deployment("42")}},
		{name: "subresource response naming another object",
			ev: event("patch", "alice", "", ref("apps", "deployments", "scale", "web"),
				respond(`{"kind":"Scale","metadata":{"name":"other","resourceVersion":"43"}}`))},
		{name: "proxied subresource", ev: event("patch", "alice", "44", ref("", "pods", "proxy", "app"))},
		{name: "eviction: create on a subresource", ev: event("create", "alice", "45", ref("", "pods", "eviction", "app"))},
		{name: "token: create on a subresource", ev: event("create", "alice", "46", ref("", "serviceaccounts", "token", "app"))},
		{name: "binding: create on a subresource", ev: event("create", "alice", "47", ref("", "pods", "binding", "app"))},
		{name: "delete answered with a Status",
			ev: event("delete", "alice", "", respond(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",`+
				`"details":{"name":"app","kind":"configmaps","uid":"u1"}}`)),
			want: []Key{deleteKey("u1")}},
		{name: "delete answered with the object",
			ev:   event("delete", "alice", "", respond(`{"kind":"Pod","metadata":{"name":"app","uid":"u2","resourceVersion":"50"}}`)),
			want: []Key{deleteKey("u2")}},
		{name: "delete: a Status without a uid falls back to objectRef.uid",
			ev: event("delete", "alice", "", respond(`{"kind":"Status","status":"Success","details":{"name":"app"}}`),
				func(e *auditv1.Event) { e.ObjectRef.UID = "u3" }),
			want: []Key{deleteKey("u3")}},
		{name: "delete: only objectRef.uid", ev: event("delete", "alice", "", func(e *auditv1.Event) { e.ObjectRef.UID = "u4" }),
			want: []Key{deleteKey("u4")}},
		{name: "delete: an object's own details field is no Status",
			ev: event("delete", "alice", "", respond(`{"kind":"Widget","metadata":{"name":"app"},"details":{"uid":"victim"}}`))},
		{name: "delete without a uid", ev: event("delete", "alice", "")},
		{name: "delete of a subresource", ev: event("delete", "alice", "", ref("", "configmaps", "proxy", "app"),
			func(e *auditv1.Event) { e.ObjectRef.UID = "u5" })},
		{name: "deletecollection: one fact per deleted item",
			ev: event("deletecollection", "alice", "", ref("", "configmaps", "", ""),
				respond(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"60"},"items":[`+
					`{"metadata":{"name":"app","namespace":"demo","uid":"c1","resourceVersion":"58"}},`+
					`{"metadata":{"name":"other","uid":"c2"}},`+
					`{"metadata":{"name":"no-uid"}},`+
					`{"metadata":{"uid":"no-name"}}]}`)),
			want: []Key{deleteKey("c1"), {Provider: "local", Resource: "configmaps", Namespace: "demo", Name: "other", UID: "c2",
				ResourceVersion: DeleteMarker}}},
		{name: "deletecollection answered with a Status", ev: event("deletecollection", "alice", "", ref("", "configmaps", "", ""),
			respond(`{"kind":"Status","status":"Success"}`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex(100, time.Minute)
			assert.Equal(t, len(tc.want), x.Add("local", []auditv1.Event{tc.ev}))
			assert.Equal(t, len(tc.want), x.Len())
			user := tc.user
			if user.Name == "" {
				user = User{Name: "alice", UID: "uid-alice", Groups: []string{"devs"}}
			}
			for _, k := range tc.want {
				f, ok := x.Take(k, "demo/site")
				if assert.True(t, ok, "fact %+v", k) {
					assert.Equal(t, user, f.User)
				}
			}
		})
	}
}

func TestIndexKeepsTheFirstWriteOfAVersion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []auditv1.Event
		want   string
	}{
		{name: "a later no-op patch does not steal the version",
			events: []auditv1.Event{event("update", "alice", "5"), event("patch", "bob", "5", receivedAt(t0.Add(time.Second)))},
			want:   "alice"},
		{name: "the same request time keeps the first",
			events: []auditv1.Event{event("update", "alice", "5"), event("patch", "bob", "5")},
			want:   "alice"},
		{name: "an earlier request arriving later takes the version back",
			events: []auditv1.Event{event("patch", "bob", "5", receivedAt(t0.Add(time.Second))), event("update", "alice", "5")},
			want:   "alice"},
		{name: "no request time keeps the first",
			events: []auditv1.Event{event("update", "alice", "5"), event("patch", "bob", "5", receivedAt(time.Time{}))},
			want:   "alice"},
		{name: "a second delete of a terminating object keeps the first deleter",
			events: []auditv1.Event{
				event("delete", "alice", "", respond(`{"kind":"Pod","metadata":{"name":"app","uid":"u1"}}`)),
				event("delete", "bob", "", respond(`{"kind":"Pod","metadata":{"name":"app","uid":"u1"}}`), receivedAt(t0.Add(time.Second))),
			},
			want: "alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex(100, time.Minute)
			for _, ev := range tc.events {
				x.Add("local", []auditv1.Event{ev})
			}
			k := key("5")
			if tc.events[0].Verb == "delete" {
				k = deleteKey("u1")
			}
			assert.Equal(t, 1, x.Len())
			f, ok := x.Take(k, "demo/site")
			require.True(t, ok)
			assert.Equal(t, tc.want, f.User.Name)
		})
	}

	t.Run("a replaced fact is not taken twice", func(t *testing.T) {
		x := NewIndex(100, time.Minute)
		x.Add("local", []auditv1.Event{event("patch", "bob", "5", receivedAt(t0.Add(time.Second)))})
		_, ok := x.Take(key("5"), "demo/site")
		require.True(t, ok)
		assert.Equal(t, 1, x.Add("local", []auditv1.Event{event("update", "alice", "5")}))
		_, ok = x.Take(key("5"), "demo/site")
		assert.False(t, ok)
		f, ok := x.Take(key("5"), "demo/other")
		require.True(t, ok)
		assert.Equal(t, "alice", f.User.Name)
	})
}

func TestIndexTakeOncePerConsumer(t *testing.T) {
	x := NewIndex(100, time.Minute)
	x.Add("local", []auditv1.Event{event("update", "alice", "5")})
	for i, tc := range []struct {
		consumer string
		want     bool
	}{
		{"demo/site", true},
		{"demo/site", false},
		{"demo/mirror", true},
		{"demo/site", false},
		{"demo/mirror", false},
	} {
		_, ok := x.Take(key("5"), tc.consumer)
		assert.Equal(t, tc.want, ok, "take %d by %s", i, tc.consumer)
	}
	_, ok := x.Take(key("6"), "demo/site")
	assert.False(t, ok, "no fact for another version")

	bounded := NewIndex(100, time.Minute)
	bounded.Add("local", []auditv1.Event{event("update", "alice", "5")})
	for i := range MaxConsumers {
		_, ok := bounded.Take(key("5"), "demo/t"+string(rune('a'+i)))
		require.True(t, ok, "consumer %d", i)
	}
	_, ok = bounded.Take(key("5"), "demo/one-too-many")
	assert.False(t, ok, "the consumers of a fact are bounded")
}

func TestIndexIsBounded(t *testing.T) {
	x := NewIndex(3, time.Minute)
	now := t0
	x.clock = func() time.Time { return now }
	evicted := testutil.ToFloat64(metrics.AuditFactsEvicted)
	for i := range 5 {
		x.Add("local", []auditv1.Event{event("update", "alice", string(rune('a'+i)))})
	}
	assert.Equal(t, 3, x.Len(), "the oldest facts are evicted")
	assert.Equal(t, evicted+2, testutil.ToFloat64(metrics.AuditFactsEvicted))
	_, ok := x.Take(key("a"), "demo/site")
	assert.False(t, ok)
	_, ok = x.Take(key("e"), "demo/site")
	assert.True(t, ok)
	assert.Equal(t, 3, x.Len(), "a taken fact stays for other consumers")

	now = now.Add(30 * time.Second)
	x.Add("local", []auditv1.Event{event("update", "alice", "f")})
	now = now.Add(40 * time.Second)
	_, ok = x.Take(key("f"), "demo/site")
	assert.True(t, ok, "a fact lives for its TTL from when it arrived")
	assert.Equal(t, 1, x.Len(), "older facts expire after their TTL")
	now = now.Add(time.Minute)
	assert.Equal(t, 0, func() int { x.Take(key("f"), "demo/other"); return x.Len() }())
	last, ok := x.LastReceived("local")
	assert.True(t, ok)
	assert.Equal(t, t0.Add(30*time.Second), last)
}

func TestIndexNotifies(t *testing.T) {
	x := NewIndex(10, time.Minute)
	ch := x.Subscribe()
	x.Add("local", []auditv1.Event{event("get", "alice", "1")})
	select {
	case <-ch:
		t.Fatal("no fact, no notification")
	default:
	}
	x.Add("local", []auditv1.Event{event("update", "alice", "2")})
	select {
	case <-ch:
	default:
		t.Fatal("a new fact notifies subscribers")
	}
	x.Add("local", []auditv1.Event{event("patch", "bob", "2", receivedAt(t0.Add(time.Second)))})
	select {
	case <-ch:
		t.Fatal("a no-op write is no new fact")
	default:
	}
}

func TestResolver(t *testing.T) {
	committer := identity.Signature{Name: "Reverser", Email: "r@example.org"}
	seen := t0
	write := document.Change{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "demo", Name: "app",
		ResourceVersion: "20", UID: "u1", Content: []byte("x"), Seen: seen}
	del := write
	del.Content, del.ResourceVersion = nil, "25"
	snapshot := write
	snapshot.Snapshot = true
	unresolved := identity.Signature{Name: identity.UnresolvedName, Email: "attribution=unresolved@example.org"}
	alice := identity.Signature{Name: "alice", Email: "alice@example.org"}

	type ask struct {
		ch        document.Change
		at        time.Duration // after seen
		want      identity.Signature
		wantReady bool
	}
	for _, tc := range []struct {
		name     string
		disabled bool
		events   []auditv1.Event
		asks     []ask
	}{
		{name: "within the grace a change waits; past it, it is unresolved",
			asks: []ask{{ch: write, at: time.Second}, {ch: write, at: 3 * time.Second, want: unresolved, wantReady: true}}},
		{name: "a fact names the author", events: []auditv1.Event{event("update", "alice", "20")},
			asks: []ask{{ch: write, at: time.Second, want: alice, wantReady: true}}},
		{name: "a fact is taken once", events: []auditv1.Event{event("update", "alice", "20")},
			asks: []ask{{ch: write, want: alice, wantReady: true}, {ch: write, at: time.Second}}},
		{name: "a delete is joined on its uid",
			events: []auditv1.Event{event("delete", "alice", "", func(e *auditv1.Event) { e.ObjectRef.UID = "u1" })},
			asks:   []ask{{ch: del, want: alice, wantReady: true}}},
		{name: "a delete of another object of the same name waits",
			events: []auditv1.Event{event("delete", "alice", "", func(e *auditv1.Event) { e.ObjectRef.UID = "u0" })},
			asks:   []ask{{ch: del, at: time.Second}}},
		{name: "a stream's initial state waits for nobody", events: []auditv1.Event{event("update", "alice", "20")},
			asks: []ask{{ch: snapshot, want: committer, wantReady: true}, {ch: write, want: alice, wantReady: true}}},
		{name: "attribution off: the configured identity", disabled: true, events: []auditv1.Event{event("update", "alice", "20")},
			asks: []ask{{ch: write, want: committer, wantReady: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex(10, time.Minute)
			x.Add("local", tc.events)
			r := &Resolver{Index: x, Provider: "local", Consumer: "demo/site", Enabled: !tc.disabled, Grace: 2 * time.Second,
				Domain: "example.org", Committer: committer}
			for i, a := range tc.asks {
				author, ready, retry := r.Author(a.ch, seen.Add(a.at))
				assert.Equal(t, a.wantReady, ready, "ask %d", i)
				assert.Equal(t, a.want, author, "ask %d", i)
				if !ready {
					assert.Equal(t, seen.Add(2*time.Second), retry, "ask %d", i)
				}
			}
		})
	}
}

// TestEachProviderHasItsOwnBudget (#27, finding 8): a burst of one
// provider's audit route evicts its own oldest facts, never another's.
func TestEachProviderHasItsOwnBudget(t *testing.T) {
	x := NewIndex(3, time.Minute)
	x.clock = func() time.Time { return t0 }
	x.Add("local", []auditv1.Event{event("update", "alice", "a")})
	for i := range 10 {
		x.Add("noisy", []auditv1.Event{event("update", "mallory", string(rune('b'+i)))})
	}
	assert.Equal(t, 4, x.Len(), "three of noisy's, one of local's")
	_, ok := x.Take(key("a"), "demo/site")
	assert.True(t, ok, "local's fact outlived noisy's burst")
}
