package attribution

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/metrics"
)

// RoutePrefix is where kube-apiserver's audit webhook posts:
// POST /audit/<kubeprovider>.
const RoutePrefix = "/audit/"

// Route is what the ingress needs to know of a KubeProvider's audit route.
type Route struct {
	// Token, when set, must be presented as "Authorization: Bearer <token>".
	Token []byte
	// CommonNames, when set, admit a client certificate (verified by the
	// server's TLS configuration) with one of these common names.
	CommonNames []string
}

// Routes looks up the route of a provider; ok=false for a provider that does
// not exist or has audit disabled. The ingress calls it for every request,
// before authenticating it, so it must answer from memory (an informer
// cache) and never block on the network.
type Routes func(provider string) (route Route, ok bool)

// DefaultMaxInFlight is how many requests the ingress decodes at once when
// Ingress.MaxInFlight is 0.
const DefaultMaxInFlight = 4

// unauthorizedBody is the body of every 401: it says nothing of whether the
// route exists.
const unauthorizedBody = "present the route's bearer token or an admitted client certificate"

// Ingress receives audit.k8s.io/v1 EventLists and feeds the index. Bad input
// is answered with a 4xx and counted; it never stops the server.
//
// A request is authenticated before anything else: an unknown route, a
// provider with audit disabled, a malformed path and a missing or wrong
// token or certificate all get the same 401, so nobody can probe which
// KubeProviders exist. The method is checked after that, then the number of
// requests in flight, then the body.
type Ingress struct {
	Index   *Index
	Routes  Routes
	MaxBody int64
	// MaxInFlight is how many requests are decoded at once; one more is
	// answered 429 with Retry-After: 1 at once, not queued (kube-apiserver's
	// webhook retries). 0 means DefaultMaxInFlight.
	MaxInFlight int

	inFlight atomic.Int64
}

func (in *Ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := "unknown" // a provider name only once authenticated: label values stay bounded
	code := http.StatusOK
	defer func() { metrics.AuditRequests.WithLabelValues(route, strconv.Itoa(code)).Inc() }()
	fail := func(c int, msg string) {
		code = c
		http.Error(w, msg, c)
	}

	provider, ok := strings.CutPrefix(r.URL.Path, RoutePrefix)
	var rt Route
	if ok && provider != "" && !strings.Contains(provider, "/") {
		rt, ok = in.Routes(provider)
	} else {
		ok = false
	}
	if !ok || !authenticated(r, rt) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="reverser-audit"`)
		fail(http.StatusUnauthorized, unauthorizedBody)
		return
	}
	route = provider
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, "audit events are POSTed")
		return
	}
	limit := int64(in.MaxInFlight)
	if limit <= 0 {
		limit = DefaultMaxInFlight
	}
	if in.inFlight.Add(1) > limit {
		in.inFlight.Add(-1)
		w.Header().Set("Retry-After", "1")
		fail(http.StatusTooManyRequests, "too many audit requests in flight; retry later")
		return
	}
	defer in.inFlight.Add(-1)

	body := http.MaxBytesReader(w, r.Body, in.MaxBody)
	var list auditv1.EventList
	if err := json.NewDecoder(body).Decode(&list); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, "the EventList exceeds "+strconv.FormatInt(in.MaxBody, 10)+" bytes")
			return
		}
		fail(http.StatusBadRequest, "the body is not an audit.k8s.io/v1 EventList: "+err.Error())
		return
	}
	if list.Kind != "" && list.Kind != "EventList" {
		fail(http.StatusBadRequest, "the body is a "+list.Kind+", not an audit.k8s.io/v1 EventList")
		return
	}
	kept := in.Index.Add(provider, list.Items)
	klog.V(4).InfoS("Audit events received", "kubeProvider", provider, "events", len(list.Items), "facts", kept)
	w.WriteHeader(http.StatusOK)
}

func authenticated(r *http.Request, rt Route) bool {
	if len(rt.Token) > 0 {
		if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
			subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), rt.Token) == 1 {
			return true
		}
	}
	if len(rt.CommonNames) > 0 && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return slices.Contains(rt.CommonNames, r.TLS.VerifiedChains[0][0].Subject.CommonName)
	}
	return false
}
