package attribution

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/watch"
)

func event(verb, user, rv string, mut ...func(*auditv1.Event)) auditv1.Event {
	ev := auditv1.Event{
		Stage: auditv1.StageResponseComplete, Verb: verb, RequestURI: "/api/v1/namespaces/demo/configmaps/app",
		User:           authnv1.UserInfo{Username: user, UID: "uid-" + user, Groups: []string{"devs"}},
		ObjectRef:      &auditv1.ObjectReference{Resource: "configmaps", Namespace: "demo", Name: "app", APIVersion: "v1"},
		ResponseStatus: &metav1.Status{Code: 200},
		StageTimestamp: metav1.NewMicroTime(time.Now()),
	}
	if rv != "" {
		ev.ResponseObject = &runtime.Unknown{Raw: []byte(`{"metadata":{"name":"app","resourceVersion":"` + rv + `"}}`)}
	}
	for _, m := range mut {
		m(&ev)
	}
	return ev
}

func key(rv string) Key {
	return Key{Provider: "local", Resource: "configmaps", Namespace: "demo", Name: "app", ResourceVersion: rv}
}

func TestIndexKeepsOnlyCompletedWrites(t *testing.T) {
	x := NewIndex(100, time.Minute)
	kept := x.Add("local", []auditv1.Event{
		event("update", "alice", "10"),
		event("patch", "bob", "11", func(e *auditv1.Event) { e.Stage = auditv1.StageResponseStarted }),
		event("get", "carol", "12"),
		event("update", "dave", "13", func(e *auditv1.Event) { e.ResponseStatus.Code = 409 }),
		event("update", "erin", "14", func(e *auditv1.Event) { e.RequestURI += "?dryRun=All" }),
		event("update", "frank", "15", func(e *auditv1.Event) { e.ObjectRef.Subresource = "status" }),
		event("update", "grace", ""), // logged at Metadata level: nothing to join on
		event("delete", "heidi", ""),
		event("patch", "admin", "16", func(e *auditv1.Event) {
			e.ImpersonatedUser = &authnv1.UserInfo{Username: "system:serviceaccount:demo:deployer"}
		}),
		event("create", "ivan", "17", func(e *auditv1.Event) { e.ObjectRef.Name = "" }), // generateName
	})
	assert.Equal(t, 4, kept)
	f, ok := x.Lookup(key("10"))
	require.True(t, ok)
	assert.Equal(t, User{Name: "alice", UID: "uid-alice", Groups: []string{"devs"}}, f.User)
	for _, rv := range []string{"11", "12", "13", "14", "15"} {
		_, ok := x.Lookup(key(rv))
		assert.False(t, ok, "rv %s makes no fact", rv)
	}
	f, ok = x.Lookup(key(DeleteMarker))
	require.True(t, ok)
	assert.Equal(t, "heidi", f.User.Name)
	f, ok = x.Lookup(key("16"))
	require.True(t, ok)
	assert.Equal(t, User{Name: "system:serviceaccount:demo:deployer", Impersonator: "admin"}, f.User)
	_, ok = x.Lookup(key("17"))
	assert.True(t, ok, "a create's name comes from its response")
	last, ok := x.LastReceived("local")
	assert.True(t, ok)
	assert.WithinDuration(t, time.Now(), last, time.Minute)
}

func TestIndexIsBounded(t *testing.T) {
	x := NewIndex(3, time.Minute)
	now := time.Now()
	x.clock = func() time.Time { return now }
	for i := range 5 {
		x.Add("local", []auditv1.Event{event("update", "alice", string(rune('a'+i)))})
	}
	assert.Equal(t, 3, x.Len(), "the oldest facts are evicted")
	_, ok := x.Lookup(key("a"))
	assert.False(t, ok)
	_, ok = x.Lookup(key("e"))
	assert.True(t, ok)
	now = now.Add(2 * time.Minute)
	assert.Equal(t, 0, func() int { x.Lookup(key("e")); return x.Len() }(), "facts expire after their TTL")
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
}

func TestIdentity(t *testing.T) {
	for user, want := range map[string]gitrepo.Signature{
		"alice":                              {Name: "alice", Email: "alice@example.org"},
		"Alice Smith":                        {Name: "Alice Smith", Email: "alice-smith@example.org"},
		"jane@corp.example":                  {Name: "jane@corp.example", Email: "jane@corp.example"},
		"system:serviceaccount:ops:deployer": {Name: "system:serviceaccount:ops:deployer", Email: "deployer.ops.serviceaccount@example.org"},
		"oidc:https://issuer#1234":           {Name: "oidc:https://issuer#1234", Email: "oidc-https---issuer-1234@example.org"},
		"system:kube-controller-manager":     {Name: "system:kube-controller-manager", Email: "system-kube-controller-manager@example.org"},
	} {
		assert.Equal(t, want, Identity(user, "example.org"), user)
	}
	assert.Equal(t, "alice@"+DefaultEmailDomain, Identity("alice", "").Email)
}

func TestResolver(t *testing.T) {
	x := NewIndex(10, time.Minute)
	committer := gitrepo.Signature{Name: "Reverser", Email: "r@example.org"}
	r := &Resolver{Index: x, Provider: "local", Enabled: true, Grace: 2 * time.Second, Domain: "example.org", Committer: committer}
	seen := time.Now()
	ch := watch.Change{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "demo", Name: "app",
		ResourceVersion: "20", Content: []byte("x"), Seen: seen}

	_, ready, retry := r.Author(ch, seen.Add(time.Second))
	assert.False(t, ready, "within the grace the change waits")
	assert.Equal(t, seen.Add(2*time.Second), retry)

	x.Add("local", []auditv1.Event{event("update", "alice", "20")})
	author, ready, _ := r.Author(ch, seen.Add(time.Second))
	assert.True(t, ready)
	assert.Equal(t, gitrepo.Signature{Name: "alice", Email: "alice@example.org"}, author)

	ch.ResourceVersion = "21"
	author, ready, _ = r.Author(ch, seen.Add(3*time.Second))
	assert.True(t, ready)
	assert.Equal(t, UnresolvedName, author.Name, "past the grace the change is unresolved")

	ch.Snapshot = true
	author, ready, _ = r.Author(ch, seen)
	assert.True(t, ready)
	assert.Equal(t, committer, author, "a stream's initial state waits for nobody")
	ch.Snapshot = false

	off := &Resolver{Index: x, Provider: "local", Committer: committer}
	author, ready, _ = off.Author(ch, seen)
	assert.True(t, ready)
	assert.Equal(t, committer, author, "attribution off: the configured identity")
}

func TestIngress(t *testing.T) {
	x := NewIndex(100, time.Minute)
	in := &Ingress{Index: x, MaxBody: 4096, Routes: func(p string) (Route, bool) {
		switch p {
		case "local":
			return Route{Token: []byte("s3cret")}, true
		case "certs":
			return Route{CommonNames: []string{"kube-apiserver"}}, true
		}
		return Route{}, false
	}}
	post := func(path, token string, body []byte, tlsState *tls.ConnectionState) int {
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		r.TLS = tlsState
		w := httptest.NewRecorder()
		in.ServeHTTP(w, r)
		return w.Code
	}
	good, err := json.Marshal(auditv1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "audit.k8s.io/v1"},
		Items: []auditv1.Event{event("update", "alice", "30")}})
	require.NoError(t, err)
	before := testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("local", "401"))

	assert.Equal(t, http.StatusNotFound, post("/audit/nobody", "s3cret", good, nil))
	assert.Equal(t, http.StatusNotFound, post("/elsewhere", "s3cret", good, nil))
	assert.Equal(t, http.StatusUnauthorized, post("/audit/local", "", good, nil))
	assert.Equal(t, http.StatusUnauthorized, post("/audit/local", "wrong", good, nil))
	assert.Equal(t, http.StatusBadRequest, post("/audit/local", "s3cret", []byte("{garbage"), nil))
	assert.Equal(t, http.StatusBadRequest, post("/audit/local", "s3cret", []byte(`{"kind":"Pod"}`), nil))
	assert.Equal(t, http.StatusRequestEntityTooLarge, post("/audit/local", "s3cret", []byte(`{"items":[`+strings.Repeat(" ", 5000)+`]}`), nil))
	assert.Equal(t, 0, x.Len(), "nothing was indexed from refused requests")
	assert.Equal(t, http.StatusOK, post("/audit/local", "s3cret", good, nil))
	_, ok := x.Lookup(key("30"))
	assert.True(t, ok)
	assert.Equal(t, before+2, testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("local", "401")))

	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver"}}
	verified := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	assert.Equal(t, http.StatusOK, post("/audit/certs", "", good, verified))
	other := &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "mallory"}}}}}
	assert.Equal(t, http.StatusUnauthorized, post("/audit/certs", "", good, other))
}
