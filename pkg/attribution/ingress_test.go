package attribution

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
)

func newIngress(x *Index) *Ingress {
	return &Ingress{Index: x, MaxBody: 4096, Routes: func(p string) (Route, bool) {
		switch p {
		case "local":
			return Route{Token: []byte("s3cret")}, true
		case "certs":
			return Route{CommonNames: []string{"kube-apiserver"}}, true
		}
		return Route{}, false // "disabled" exists with audit off: the same as no provider
	}}
}

type request struct {
	method, path, token string
	body                io.Reader
	tls                 *tls.ConnectionState
}

func (in *Ingress) serve(r request) *httptest.ResponseRecorder {
	if r.method == "" {
		r.method = http.MethodPost
	}
	req := httptest.NewRequest(r.method, "https://reverser.example"+r.path, r.body)
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	req.TLS = r.tls
	w := httptest.NewRecorder()
	in.ServeHTTP(w, req)
	return w
}

func eventList(t *testing.T, events ...auditv1.Event) []byte {
	b, err := json.Marshal(map[string]any{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": events})
	require.NoError(t, err)
	return b
}

func verified(cn string) *tls.ConnectionState {
	return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}}
}

func TestIngressUnauthorizedIsUniform(t *testing.T) {
	x := NewIndex(100, time.Minute)
	in := newIngress(x)
	good := eventList(t, event("update", "alice", "30"))
	unknown := testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("unknown", "401"))
	local := testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("local", "401"))

	cases := []struct {
		name string
		req  request
	}{
		{"unknown provider", request{path: "/audit/nobody", token: "s3cret"}},
		{"provider with audit disabled", request{path: "/audit/disabled", token: "s3cret"}},
		{"missing token", request{path: "/audit/local"}},
		{"wrong token", request{path: "/audit/local", token: "wrong"}},
		{"another route's token", request{path: "/audit/certs", token: "s3cret"}},
		{"certificate with another name", request{path: "/audit/certs", tls: verified("mallory")}},
		{"certificate where a token is expected", request{path: "/audit/local", tls: verified("kube-apiserver")}},
		{"no provider in the path", request{path: "/audit/", token: "s3cret"}},
		{"nested path", request{path: "/audit/local/x", token: "s3cret"}},
		{"outside the prefix", request{path: "/elsewhere", token: "s3cret"}},
		{"unknown provider, wrong method", request{method: http.MethodGet, path: "/audit/nobody"}},
		{"known provider, wrong method, no token", request{method: http.MethodGet, path: "/audit/local"}},
	}
	var first *httptest.ResponseRecorder
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.body = bytes.NewReader(good)
			w := in.serve(tc.req)
			assert.Equal(t, http.StatusUnauthorized, w.Code)
			if first == nil {
				first = w
				assert.Equal(t, `Bearer realm="reverser-audit"`, w.Header().Get("WWW-Authenticate"))
				return
			}
			assert.Equal(t, first.Body.String(), w.Body.String(), "the body does not tell the cases apart")
			assert.Equal(t, first.Header(), w.Header(), "the headers do not tell the cases apart")
		})
	}
	assert.Equal(t, 0, x.Len(), "nothing was indexed from refused requests")
	assert.Equal(t, unknown+float64(len(cases)), testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("unknown", "401")),
		"unauthenticated requests are counted under route unknown")
	assert.Equal(t, local, testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("local", "401")))
	assert.Equal(t, 0.0, testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("nobody", "401")), "no label for a made-up route")
}

func TestIngressRequests(t *testing.T) {
	good := eventList(t, event("update", "alice", "30"))
	for _, tc := range []struct {
		name      string
		req       request
		wantCode  int
		wantAllow string
		wantFacts int
	}{
		{name: "token", req: request{path: "/audit/local", token: "s3cret", body: bytes.NewReader(good)}, wantCode: 200, wantFacts: 1},
		{name: "client certificate", req: request{path: "/audit/certs", tls: verified("kube-apiserver"), body: bytes.NewReader(good)},
			wantCode: 200, wantFacts: 1},
		{name: "wrong method after authentication", req: request{method: http.MethodGet, path: "/audit/local", token: "s3cret"},
			wantCode: http.StatusMethodNotAllowed, wantAllow: http.MethodPost},
		{name: "not JSON", req: request{path: "/audit/local", token: "s3cret", body: strings.NewReader("{garbage")},
			wantCode: http.StatusBadRequest},
		{name: "not an EventList", req: request{path: "/audit/local", token: "s3cret", body: strings.NewReader(`{"kind":"Pod"}`)},
			wantCode: http.StatusBadRequest},
		{name: "too large", req: request{path: "/audit/local", token: "s3cret",
			body: strings.NewReader(`{"items":[` + strings.Repeat(" ", 5000) + `]}`)}, wantCode: http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex(100, time.Minute)
			route := strings.TrimPrefix(tc.req.path, RoutePrefix)
			before := testutil.ToFloat64(metrics.AuditRequests.WithLabelValues(route, strconv.Itoa(tc.wantCode)))
			w := newIngress(x).serve(tc.req)
			assert.Equal(t, tc.wantCode, w.Code, w.Body.String())
			assert.Equal(t, tc.wantAllow, w.Header().Get("Allow"))
			assert.Equal(t, tc.wantFacts, x.Len())
			assert.Equal(t, before+1, testutil.ToFloat64(metrics.AuditRequests.WithLabelValues(route, strconv.Itoa(tc.wantCode))))
		})
	}
}

func TestIngressLimitsRequestsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInFlight int
		blocked     int
	}{
		{name: "configured", maxInFlight: 2, blocked: 2},
		{name: "default", maxInFlight: 0, blocked: DefaultMaxInFlight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex(100, time.Minute)
			in := newIngress(x)
			in.MaxInFlight = tc.maxInFlight
			tooMany := testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("local", "429"))

			type inFlight struct {
				body *io.PipeWriter
				done chan int
			}
			var held []inFlight
			for range tc.blocked {
				pr, pw := io.Pipe()
				f := inFlight{body: pw, done: make(chan int, 1)}
				go func() { f.done <- in.serve(request{path: "/audit/local", token: "s3cret", body: pr}).Code }()
				// The write returns once the handler reads: it holds its slot.
				_, err := pw.Write([]byte(`{"kind":"EventList","items":[`))
				require.NoError(t, err)
				held = append(held, f)
			}

			w := in.serve(request{path: "/audit/local", token: "s3cret", body: bytes.NewReader(eventList(t))})
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "1", w.Header().Get("Retry-After"))
			assert.Equal(t, tooMany+1, testutil.ToFloat64(metrics.AuditRequests.WithLabelValues("local", "429")))
			w = in.serve(request{path: "/audit/local", token: "wrong", body: bytes.NewReader(eventList(t))})
			assert.Equal(t, http.StatusUnauthorized, w.Code, "authentication comes first")

			for i, f := range held {
				body, err := json.Marshal(event("update", "alice", "7"+strconv.Itoa(i)))
				require.NoError(t, err)
				_, err = f.body.Write(append(body, []byte(`]}`)...))
				require.NoError(t, err)
				require.NoError(t, f.body.Close())
				assert.Equal(t, http.StatusOK, <-f.done)
			}
			assert.Equal(t, tc.blocked, x.Len())
			w = in.serve(request{path: "/audit/local", token: "s3cret", body: bytes.NewReader(eventList(t))})
			assert.Equal(t, http.StatusOK, w.Code, "finished requests free their slots")
		})
	}
}

// TestIngressFacts posts audit events and asks a GitTarget's resolver who
// made the changes its streams saw.
func TestIngressFacts(t *testing.T) {
	configmaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	write := func(gvr schema.GroupVersionResource, name, rv string) document.Change {
		return document.Change{GVR: gvr, Namespace: "demo", Name: name, ResourceVersion: rv, UID: "u1", Content: []byte("x"), Seen: t0}
	}
	deleted := func(name string, uid types.UID) document.Change {
		return document.Change{GVR: configmaps, Namespace: "demo", Name: name, ResourceVersion: "99", UID: uid, Seen: t0}
	}
	type ask struct {
		consumer string
		ch       document.Change
		want     string // the author's name; "" when the change still waits
	}
	for _, tc := range []struct {
		name   string
		events []auditv1.Event
		asks   []ask
	}{
		{name: "a delete is keyed by uid",
			events: []auditv1.Event{event("delete", "alice", "", respond(
				`{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"app","kind":"configmaps","uid":"first"}}`))},
			asks: []ask{
				{consumer: "demo/site", ch: deleted("app", "second")},
				{consumer: "demo/site", ch: deleted("app", "first"), want: "alice"},
			}},
		{name: "deletecollection attributes every item",
			events: []auditv1.Event{event("deletecollection", "bob", "", ref("", "configmaps", "", ""), respond(
				`{"kind":"ConfigMapList","items":[{"metadata":{"name":"a","namespace":"demo","uid":"ua"}},`+
					`{"metadata":{"name":"b","namespace":"demo","uid":"ub"}}]}`))},
			asks: []ask{
				{consumer: "demo/site", ch: deleted("a", "ua"), want: "bob"},
				{consumer: "demo/site", ch: deleted("b", "ub"), want: "bob"},
				{consumer: "demo/site", ch: deleted("c", "uc")},
			}},
		{name: "a scale patch is attributed to the deployment",
			events: []auditv1.Event{event("patch", "carol", "", ref("apps", "deployments", "scale", "web"), respond(
				`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"web","namespace":"demo","uid":"u1","resourceVersion":"42"}}`))},
			asks: []ask{{consumer: "demo/site", ch: write(deployments, "web", "42"), want: "carol"}}},
		{name: "a no-op patch does not steal authorship",
			events: []auditv1.Event{
				event("update", "alice", "50"),
				event("patch", "mallory", "50", receivedAt(t0.Add(time.Second))),
			},
			asks: []ask{{consumer: "demo/site", ch: write(configmaps, "app", "50"), want: "alice"}}},
		{name: "a fact is taken once per consumer",
			events: []auditv1.Event{event("update", "alice", "60")},
			asks: []ask{
				{consumer: "demo/site", ch: write(configmaps, "app", "60"), want: "alice"},
				{consumer: "demo/site", ch: write(configmaps, "app", "60")},
				{consumer: "demo/mirror", ch: write(configmaps, "app", "60"), want: "alice"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex(100, time.Minute)
			in := newIngress(x)
			for _, ev := range tc.events {
				w := in.serve(request{path: "/audit/local", token: "s3cret", body: bytes.NewReader(eventList(t, ev))})
				require.Equal(t, http.StatusOK, w.Code, w.Body.String())
			}
			for i, a := range tc.asks {
				r := &Resolver{Index: x, Provider: "local", Consumer: a.consumer, Enabled: true, Grace: 2 * time.Second,
					Domain: "example.org", Committer: identity.Signature{Name: "Reverser", Email: "r@example.org"}}
				author, ready, _ := r.Author(a.ch, t0)
				assert.Equal(t, a.want != "", ready, "ask %d", i)
				assert.Equal(t, a.want, author.Name, "ask %d", i)
			}
		})
	}
}
