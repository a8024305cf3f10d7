// Package integration runs reverser-apiserver in-process, on random loopback
// ports with a real embedded etcd, and drives it through the generated
// clientset as users would.
package integration

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"reverser.dev/reverser/pkg/apiserver"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	reverserv1alpha1 "reverser.dev/reverser/pkg/generated/clientset/versioned/typed/reverser/v1alpha1"
)

// serverSetup says where a test server keeps its state. Two servers given the
// same etcd endpoints share their objects.
type serverSetup struct {
	dir           string   // PKI and, without etcdEndpoints, embedded etcd data
	etcdEndpoints []string // external etcd; empty starts the embedded one
	authz         authorizer.Authorizer
}

type testServer struct {
	t      *testing.T
	setup  serverSetup
	pki    *apiserver.PKI
	admin  *rest.Config
	cancel context.CancelFunc
	done   chan error
}

// startServer starts reverser-apiserver in standalone mode and waits until it
// is ready. It is stopped when the test ends, unless stop was called first.
func startServer(t *testing.T, setup serverSetup) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port

	o := apiserver.NewOptions()
	o.Standalone = true
	o.Authorizer = setup.authz
	o.WriteKubeconfig = filepath.Join(setup.dir, "admin.kubeconfig")
	o.EmbeddedEtcdDir = filepath.Join(setup.dir, "etcd")
	o.Recommended.Etcd.StorageConfig.Transport.ServerList = setup.etcdEndpoints
	o.Recommended.SecureServing.Listener = ln
	o.Recommended.SecureServing.BindPort = port
	o.Recommended.SecureServing.ServerCert.CertDirectory = filepath.Join(setup.dir, "pki")

	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{t: t, setup: setup, cancel: cancel, done: make(chan error, 1)}
	cfg, err := o.Config()
	require.NoError(t, err)
	srv, err := cfg.New()
	if err != nil {
		o.Close()
		require.NoError(t, err)
	}
	go func() {
		defer o.Close()
		s.done <- srv.GenericAPIServer.PrepareRun().RunWithContext(ctx)
	}()
	t.Cleanup(s.stop)

	s.pki = o.PKI()
	s.admin, err = clientcmd.BuildConfigFromFlags("", o.WriteKubeconfig)
	require.NoError(t, err)
	s.admin.QPS, s.admin.Burst = 1000, 1000 // tests are not to be throttled client-side
	s.waitReady()
	return s
}

func (s *testServer) waitReady() {
	s.t.Helper()
	client, err := rest.RESTClientFor(withDefaults(s.admin))
	require.NoError(s.t, err)
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true,
		func(ctx context.Context) (bool, error) {
			return client.Get().AbsPath("/readyz").Do(ctx).Error() == nil, nil
		})
	require.NoError(s.t, err, "server did not become ready")
}

// stop shuts the server down and waits for its etcd to close.
func (s *testServer) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			s.t.Errorf("server exited with error: %v", err)
		}
	case <-time.After(60 * time.Second):
		s.t.Error("server did not stop within 60s")
	}
}

// as returns a client authenticated as user in groups, with a client
// certificate signed by the server's CA.
func (s *testServer) as(user string, groups ...string) reverserv1alpha1.ReverserV1alpha1Interface {
	s.t.Helper()
	cert, key, err := s.pki.CA.IssueClient(user, groups...)
	require.NoError(s.t, err)
	cfg := rest.CopyConfig(s.admin)
	cfg.CertData, cfg.KeyData = cert, key
	return versioned.NewForConfigOrDie(cfg).ReverserV1alpha1()
}

func (s *testServer) adminClient() reverserv1alpha1.ReverserV1alpha1Interface {
	return versioned.NewForConfigOrDie(s.admin).ReverserV1alpha1()
}

func withDefaults(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &metav1.SchemeGroupVersion
	c.NegotiatedSerializer = apiserver.Codecs.WithoutConversion()
	return c
}

// testAuthz stands in for kube-apiserver's RBAC: system:masters may do
// anything; members of "devs" may do anything but save; members of
// "tenants" may do anything in reverser.dev but save, and read (list, watch)
// only what grantRead gives them; save is granted per (user, namespace,
// name), "*" meaning every name.
type testAuthz struct {
	mu     sync.Mutex
	saves  map[string]bool
	reads  map[string]bool
	grants map[string]bool // user/verb/namespace/resource/name
}

func newTestAuthz() *testAuthz {
	return &testAuthz{saves: map[string]bool{}, reads: map[string]bool{}, grants: map[string]bool{}}
}

// grant lets user do verb on one object, for the tenants group.
func (a *testAuthz) grant(user, verb, namespace, resource, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.grants[user+"/"+verb+"/"+namespace+"/"+resource+"/"+name] = true
}

func (a *testAuthz) grantRead(user, namespace, resource string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reads[user+"/"+namespace+"/"+resource] = true
}

func (a *testAuthz) grantSave(user, namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.saves[user+"/"+namespace+"/"+name] = true
}

func (a *testAuthz) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	groups := attrs.GetUser().GetGroups()
	has := func(g string) bool {
		for _, x := range groups {
			if x == g {
				return true
			}
		}
		return false
	}
	if has(apiserver.MastersGroup) || !attrs.IsResourceRequest() {
		return authorizer.DecisionAllow, "", nil
	}
	if attrs.GetVerb() == "save" {
		a.mu.Lock()
		defer a.mu.Unlock()
		u := attrs.GetUser().GetName()
		if attrs.GetResource() == "gittargets" && attrs.GetAPIGroup() == "reverser.dev" &&
			(a.saves[u+"/"+attrs.GetNamespace()+"/"+attrs.GetName()] || a.saves[u+"/"+attrs.GetNamespace()+"/*"]) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "no save grant in the test authorizer", nil
	}
	if has("devs") {
		return authorizer.DecisionAllow, "", nil
	}
	if has("tenants") {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case attrs.GetAPIGroup() == "reverser.dev":
			return authorizer.DecisionAllow, "", nil
		case (attrs.GetVerb() == "list" || attrs.GetVerb() == "watch") &&
			a.reads[attrs.GetUser().GetName()+"/"+attrs.GetNamespace()+"/"+attrs.GetResource()]:
			return authorizer.DecisionAllow, "", nil
		case a.grants[attrs.GetUser().GetName()+"/"+attrs.GetVerb()+"/"+attrs.GetNamespace()+"/"+attrs.GetResource()+"/"+attrs.GetName()]:
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (a *testAuthz) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

func (a *testAuthz) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
