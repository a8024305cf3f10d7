package attribution

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

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
// not exist or has audit disabled.
type Routes func(provider string) (route Route, ok bool)

// Ingress receives audit.k8s.io/v1 EventLists and feeds the index. Bad input
// is answered with a 4xx and counted; it never stops the server.
type Ingress struct {
	Index   *Index
	Routes  Routes
	MaxBody int64
}

func (in *Ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := "unknown"
	code := http.StatusOK
	defer func() { metrics.AuditRequests.WithLabelValues(route, strconv.Itoa(code)).Inc() }()
	fail := func(c int, msg string) {
		code = c
		http.Error(w, msg, c)
	}

	provider, ok := strings.CutPrefix(r.URL.Path, RoutePrefix)
	if !ok || provider == "" || strings.Contains(provider, "/") {
		fail(http.StatusNotFound, "no such audit route: POST "+RoutePrefix+"<kubeprovider>")
		return
	}
	rt, ok := in.Routes(provider)
	if !ok {
		fail(http.StatusNotFound, "no KubeProvider with audit enabled is named "+strconv.Quote(provider))
		return
	}
	route = provider // only names of existing providers become label values
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, "audit events are POSTed")
		return
	}
	if !authenticated(r, rt) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="reverser-audit"`)
		fail(http.StatusUnauthorized, "present the route's bearer token or an admitted client certificate")
		return
	}
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
