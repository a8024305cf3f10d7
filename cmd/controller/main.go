// Command reverser-controller mirrors the objects GitTargets select into Git:
// it watches the reverser.dev API, runs watch streams on source clusters and
// one branch worker per Git branch, and serves metrics and health checks.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/claims"
	"reverser.dev/reverser/pkg/controller/commitrequest"
	"reverser.dev/reverser/pkg/controller/gitprovider"
	"reverser.dev/reverser/pkg/controller/kubeprovider"
	"reverser.dev/reverser/pkg/controller/mirror"
	"reverser.dev/reverser/pkg/controller/providerstatus"
	"reverser.dev/reverser/pkg/event"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/leaderendpoint"
	"reverser.dev/reverser/pkg/leasefence"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/pki"
	"reverser.dev/reverser/pkg/seal"
	"reverser.dev/reverser/pkg/servingcert"
	"reverser.dev/reverser/pkg/tenancy"
	"reverser.dev/reverser/pkg/version"
)

type options struct {
	kubeconfig, dataDir, metricsAddr, healthAddr string
	pprofAddr                                    string
	leaderElect                                  bool
	leaseNamespace, leaseName                    string
	leaseDuration, renewDeadline, retryPeriod    time.Duration
	resync                                       time.Duration

	auditAddr, auditCert, auditKey, auditClientCA string
	auditMaxBody                                  int64
	auditMaxFacts                                 int
	auditTTL, grace                               time.Duration
	commitRequestTTL, collect, saveTimeout        time.Duration
	settle                                        time.Duration
	secretNamespace                               string
	digestKeySecret                               string
	auditMaxInFlight                              int
	fluxIdentities, argoIdentities                string
	applyGrace, remotePoll                        time.Duration
	authzFailureGrace, groupsMaxAge               time.Duration
	auditCASecret, auditService, auditAdvertise   string
}

func main() {
	o := options{}
	klog.InitFlags(nil)
	showVersion := o.bindFlags(flag.CommandLine)
	flag.Parse()
	if *showVersion {
		fmt.Println("reverser-controller version", version.Get())
		return
	}
	if o.collect == 0 {
		o.collect = o.grace
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "reverser-controller:", err)
		os.Exit(2)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "reverser-controller failed")
		os.Exit(1)
	}
}

// bindFlags defines the controller's flags on fs; it returns --version.
func (o *options) bindFlags(fs *flag.FlagSet) (showVersion *bool) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the control cluster (the one serving reverser.dev); in-cluster config when empty")
	fs.StringVar(&o.dataDir, "data-dir", "reverser-controller-data", "directory for the branch workers' local repositories")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", "address of the Prometheus /metrics endpoint; empty turns it off")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", "127.0.0.1:8081", "address of /healthz and /readyz")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "",
		"address of Go's /debug/pprof/ profiles (CPU, heap, goroutines), for measuring; empty, the default, turns them off")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader with a coordination.k8s.io Lease, so only one replica mirrors")
	fs.StringVar(&o.leaseNamespace, "leader-election-namespace", "reverser-system", "namespace of the leader election Lease")
	fs.StringVar(&o.leaseName, "leader-election-id", "reverser-controller", "name of the leader election Lease")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 10*time.Second,
		"how long a standby waits after the leader's last renewal before it takes over; with the retry period this bounds failover")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 7*time.Second,
		"how long the leader keeps trying to renew before it gives up leading (and exits, to restart as a standby)")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often candidates try to take or renew the Lease")
	fs.DurationVar(&o.resync, "resync", 30*time.Second, "how often every GitTarget is reconciled again (re-resolving rules against discovery)")
	o.bindAuditFlags(fs)
	o.bindSaveFlags(fs)
	fs.StringVar(&o.secretNamespace, "secret-namespace", kubeprovider.DefaultSecretNamespace,
		"the only namespace whose Secrets KubeProviders may name (kubeconfigs, audit tokens): the controller's own")
	fs.StringVar(&o.digestKeySecret, "sops-digest-key-secret", "reverser-sops-digest",
		"the Secret in --secret-namespace holding the key of sealed Secrets' digests, which tell an unchanged Secret without decrypting it; created when absent")
	fs.IntVar(&o.auditMaxInFlight, "audit-max-in-flight", 4,
		"audit EventLists decoded at once; more get 429 and kube-apiserver's webhook retries them")
	fs.StringVar(&o.fluxIdentities, "flux-identities", "system:serviceaccount:flux-system:kustomize-controller",
		"comma-separated users Flux's kustomize-controller writes as: their writes during an apply window are echoes of Git, not edits")
	fs.StringVar(&o.argoIdentities, "argocd-identities", "system:serviceaccount:argocd:argocd-application-controller",
		"comma-separated users Argo CD's application controller writes as: their writes during an apply window are echoes of Git, not edits")
	fs.DurationVar(&o.authzFailureGrace, "authorization-failure-grace", 5*time.Minute,
		"how long SubjectAccessReviews may fail before the controller's re-checks of rules, claims, GitProviders and saves count as refusals")
	fs.DurationVar(&o.groupsMaxAge, "recorded-groups-max-age", tenancy.DefaultRecordedGroupsMaxAge,
		"how long the groups recorded with a rule, claim, GitProvider or CommitRequest count when its author's rights are checked again; after that the username alone")
	fs.DurationVar(&o.applyGrace, "apply-window-grace", 10*time.Second,
		"how long a claimed applier's writes are still echoes after it reported its converge (and until the barrier is met)")
	fs.DurationVar(&o.remotePoll, "applier-remote-poll", 30*time.Second,
		"how often a claimed GitTarget's remote is looked at for commits someone else pushed, which its applier then applies (ForeignCommit)")
	return fs.Bool("version", false, "print the version and exit")
}

// bindAuditFlags defines the audit ingress's flags.
func (o *options) bindAuditFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.auditAddr, "audit-bind-address", "127.0.0.1:9444",
		"HTTPS address of the audit ingress, POST /audit/<kubeprovider>; empty turns it off")
	fs.StringVar(&o.auditCert, "audit-tls-cert-file", "", "serving certificate of the audit ingress; self-signed in --data-dir when empty")
	fs.StringVar(&o.auditKey, "audit-tls-private-key-file", "", "key of --audit-tls-cert-file")
	fs.StringVar(&o.auditClientCA, "audit-client-ca-file", "",
		"CA whose client certificates may authenticate audit routes that list clientCertificateCommonNames")
	fs.StringVar(&o.auditCASecret, "audit-ca-secret", "",
		"Secret (namespace/name) holding the CA the audit ingress's serving certificate is issued from, created by the first replica; "+
			"kube-apiserver's audit webhook kubeconfig trusts its ca.crt. Instead of --audit-tls-cert-file")
	fs.StringVar(&o.auditService, "audit-service", "",
		"selector-less Service (namespace/name) kube-apiserver's audit webhook reaches; the leader points its EndpointSlice at itself "+
			"(--audit-advertise-address), and the audit certificate names it")
	fs.StringVar(&o.auditAdvertise, "audit-advertise-address", "",
		"this replica's address in --audit-service's EndpointSlice: the Pod IP in a cluster")
	fs.Int64Var(&o.auditMaxBody, "audit-max-body-bytes", 32<<20,
		"largest audit EventList accepted; larger ones get 413 and their facts are lost (RequestResponse events carry whole objects)")
	fs.IntVar(&o.auditMaxFacts, "audit-max-facts", 200000, "most attribution facts held per KubeProvider; a provider's oldest are dropped first")
	fs.DurationVar(&o.auditTTL, "audit-fact-ttl", 10*time.Minute, "how long an attribution fact is kept")
	fs.DurationVar(&o.grace, "author-attribution-grace", 2*time.Second,
		"how long a change waits for its audit fact before it is authored \"unknown (attribution unresolved)\"")
}

// bindSaveFlags defines how CommitRequests are served and kept.
func (o *options) bindSaveFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.commitRequestTTL, "commit-request-ttl", time.Hour,
		"how long a finished CommitRequest stays before it is deleted (annotation reverser.dev/delete-after)")
	fs.DurationVar(&o.collect, "commit-request-collect-delay", 0,
		"how long a saved window stays open after the save attaches, so the author's last edits join; 0 means the attribution grace")
	fs.DurationVar(&o.settle, "commit-request-settle", 50*time.Millisecond,
		"a saved window in which every change is attributed commits this long after the save arrived, without the rest of the collect delay; 0 always waits the collect delay")
	fs.DurationVar(&o.saveTimeout, "save-timeout", 2*time.Minute,
		"how long a CommitRequest that found its window may wait for its commit to be made and pushed (Git down, disk full) before it ends SaveFailed; its changes are still committed and pushed later")
}

func (o options) validate() error {
	var errs []error
	if o.auditCASecret != "" {
		if _, _, err := servingcert.ParseRef(o.auditCASecret); err != nil {
			errs = append(errs, fmt.Errorf("--audit-ca-secret: %w", err))
		}
		if o.auditCert != "" {
			errs = append(errs, errors.New("--audit-ca-secret and --audit-tls-cert-file both name the audit certificate: keep one"))
		}
		if o.auditService == "" {
			errs = append(errs, errors.New("--audit-ca-secret needs --audit-service: the certificate is issued for its DNS names"))
		}
	}
	if o.auditService != "" {
		if _, _, err := servingcert.ParseRef(o.auditService); err != nil {
			errs = append(errs, fmt.Errorf("--audit-service: %w", err))
		}
		if o.auditAdvertise == "" {
			errs = append(errs, errors.New("--audit-service needs --audit-advertise-address (the Pod IP: env from status.podIP)"))
		} else if err := leaderendpoint.CheckAddress(o.auditAdvertise); err != nil {
			errs = append(errs, fmt.Errorf("--audit-advertise-address: %w", err))
		}
		if _, _, err := net.SplitHostPort(o.auditAddr); err != nil {
			errs = append(errs, fmt.Errorf("--audit-service needs --audit-bind-address with a port: %w", err))
		}
	}
	if o.leaderElect && !(o.retryPeriod < o.renewDeadline && o.renewDeadline < o.leaseDuration) {
		errs = append(errs, errors.New("leader election needs retry period < renew deadline < lease duration"))
	}
	return errors.Join(errs...)
}

// leaderEndpoint publishes this replica as the audit Service's only
// endpoint, or is nil without --audit-service.
func leaderEndpoint(o options, kube kubernetes.Interface, identity string) *leaderendpoint.Publisher {
	if o.auditService == "" {
		return nil
	}
	ns, svc, _ := servingcert.ParseRef(o.auditService)
	_, port, _ := net.SplitHostPort(o.auditAddr)
	p, _ := strconv.ParseInt(port, 10, 32)
	return &leaderendpoint.Publisher{Client: kube.DiscoveryV1(), Namespace: ns, Service: svc, Address: o.auditAdvertise,
		Port: int32(p), PortName: "https", Identity: identity}
}

func run(ctx context.Context, o options) error {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	id, _ := os.Hostname()
	id = fmt.Sprintf("%s_%d", id, os.Getpid())
	cs, err := build(ctx, o, cfg, kube, id)
	if err != nil {
		return err
	}
	if o.auditAddr != "" {
		ingress := &attribution.Ingress{Index: cs.facts, MaxBody: o.auditMaxBody, MaxInFlight: o.auditMaxInFlight, Routes: cs.clusters.AuditRoute}
		if err := serveAudit(ctx, o, kube, ingress); err != nil {
			return err
		}
	}
	leading := make(chan struct{})
	if err := serveEndpoints(ctx, o, cs.mirror, leading); err != nil {
		return err
	}
	endpoint := leaderEndpoint(o, kube, id)
	runControllers := func(ctx context.Context) {
		close(leading)
		metrics.Leader.Set(1)
		klog.InfoS("Leading", "identity", id)
		if endpoint != nil {
			go endpoint.Keep(ctx, o.resync)
		}
		cs.run(ctx)
	}
	if !o.leaderElect {
		runControllers(ctx)
		return nil
	}
	return lead(ctx, o, kube, id, runControllers)
}

// controllers are what the leader runs, sharing one informer factory, one
// fact index and one authorizer.
type controllers struct {
	facts        *attribution.Index
	clusters     *kubeprovider.Clusters
	secrets      *gitprovider.Secrets
	gitProviders *gitprovider.Controller
	mirror       *mirror.Controller
	saves        *commitrequest.Controller
	sources      *commitrequest.Sources
	claims       *claims.Controller
	providers    *providerstatus.Writer
}

// recheckAuthorizer answers the controller's re-checks of rules, claims,
// GitProviders and saves with SubjectAccessReviews; answers are cached for
// well under a resync, so a withdrawn right stops what it allowed within
// one, and failures count as refusals after --authorization-failure-grace.
func recheckAuthorizer(o options, kube kubernetes.Interface) authorizer.Authorizer {
	reviews := tenancy.NewReviewer(kube.AuthorizationV1().SubjectAccessReviews(),
		min(o.resync/3, 10*time.Second), min(o.resync/3, 5*time.Second), 8192, clock.RealClock{})
	return &tenancy.FailClosed{Next: authorizer.AuthorizerFunc(reviews.Authorize), Grace: o.authzFailureGrace,
		Clock: clock.RealClock{}}
}

// pushFence is what every push asks first: with leader election, whether
// the replica id still holds the Lease.
func pushFence(o options, kube kubernetes.Interface, id string) gitrepo.Fence {
	if !o.leaderElect {
		return nil
	}
	return (&leasefence.Checker{Leases: kube.CoordinationV1(), Namespace: o.leaseNamespace, Name: o.leaseName, Identity: id,
		MaxAge: o.renewDeadline, Clock: clock.RealClock{}}).Check
}

// build makes the controllers the leader runs; id is this replica's leader
// election identity.
func build(ctx context.Context, o options, cfg *rest.Config, kube kubernetes.Interface, id string) (*controllers, error) {
	rev, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	facts := attribution.NewIndex(o.auditMaxFacts, o.auditTTL)
	factory := informers.NewSharedInformerFactory(rev, 0)
	authz := recheckAuthorizer(o, kube)
	operations := claims.NewOperations()
	// Without the key GitTargets that encrypt Secrets stall, saying so;
	// the rest mirror on.
	digestKey, err := seal.LoadOrCreateKey(ctx, kube.CoreV1().Secrets(o.secretNamespace), o.digestKeySecret)
	if err != nil {
		klog.ErrorS(err, "GitTargets with spec.encryption stall: the controller has no digest key for sealed Secrets; fix this and restart it")
	}
	providers := providerstatus.New(rev, factory)
	events := event.Broadcast(ctx, kube, "reverser-controller")
	clusters := kubeprovider.New(kubeprovider.Config{Kube: kube, Source: cfg, SecretNamespace: o.secretNamespace, Factory: factory,
		Facts: facts, Status: providers, ClientCertificates: o.auditClientCA != ""})
	secrets := gitprovider.New(gitprovider.Config{Kube: kube, DataDir: o.dataDir})
	mirrors := mirror.New(mirror.Config{Clusters: clusters, Secrets: secrets, Reverser: rev, Kube: kube, DataDir: o.dataDir, Resync: o.resync, Facts: facts, Grace: o.grace,
		Factory: factory, Authorizer: authz, FluxIdentities: splitList(o.fluxIdentities),
		ArgoCDIdentities: splitList(o.argoIdentities),
		ApplyGrace:       o.applyGrace, RemotePoll: o.remotePoll, ClaimReports: operations.Record, DigestKey: digestKey,
		RecordedGroupsMaxAge: o.groupsMaxAge, Events: events, PushFence: pushFence(o, kube, id)})
	return &controllers{
		facts:    facts,
		clusters: clusters,
		secrets:  secrets,
		gitProviders: gitprovider.NewController(gitprovider.ControllerConfig{Reverser: rev, Factory: factory, Secrets: secrets, Authorizer: authz,
			RecordedGroupsMaxAge: o.groupsMaxAge, Resync: o.resync}),
		mirror:    mirrors,
		providers: providers,
		saves: commitrequest.New(commitrequest.ControlCluster(commitrequest.Config{Kube: kube, Authorizer: authz, TTL: o.commitRequestTTL,
			Collect: o.collect, Settle: o.settle, SaveTimeout: o.saveTimeout, Savers: mirrors.Saver,
			RecordedGroupsMaxAge: o.groupsMaxAge, Events: events}, rev, factory)),
		// Source clusters' CommitRequests, for KubeProviders whose
		// spec.commitRequests serves them.
		sources: commitrequest.NewSources(commitrequest.SourcesConfig{
			Core: commitrequest.Config{Kube: kube, Control: factory, TTL: o.commitRequestTTL, Collect: o.collect, Settle: o.settle,
				SaveTimeout: o.saveTimeout, Savers: mirrors.Saver, Events: events},
			ProviderStatus: providers, SourceConfig: clusters.Config, Facts: facts, Grace: o.grace, Resync: o.resync,
		}),
		claims: claims.New(claims.Config{Reverser: rev, Factory: factory, Dynamic: dyn, Authorizer: authz, Resync: o.resync,
			Operations: operations, NamespaceLabels: mirrors.NamespaceLabels, RecordedGroupsMaxAge: o.groupsMaxAge, Events: events}),
	}, nil
}

// run runs every controller until ctx ends.
func (cs *controllers) run(ctx context.Context) {
	cs.clusters.Start(ctx)
	go cs.clusters.Run(ctx)
	go cs.secrets.Run(ctx)
	go func() {
		if err := cs.gitProviders.Run(ctx, 1); err != nil {
			klog.ErrorS(err, "GitProvider status controller stopped")
		}
	}()
	go func() {
		if err := cs.providers.Run(ctx); err != nil {
			klog.ErrorS(err, "KubeProvider status writer stopped")
		}
	}()
	go func() {
		if err := cs.saves.Run(ctx, 2); err != nil {
			klog.ErrorS(err, "CommitRequest controller stopped")
		}
	}()
	go func() {
		if err := cs.sources.Run(ctx); err != nil {
			klog.ErrorS(err, "Source-cluster CommitRequest front ends stopped")
		}
	}()
	go func() {
		if err := cs.claims.Run(ctx, 1); err != nil {
			klog.ErrorS(err, "Applier claims controller stopped")
		}
	}()
	if err := cs.mirror.Run(ctx, 2); err != nil {
		klog.ErrorS(err, "Mirror controller stopped")
	}
}

// serveEndpoints serves /healthz and /readyz (ready once leading and
// synced; a standby is ready too), and, when asked, profiles and metrics.
func serveEndpoints(ctx context.Context, o options, mirrors *mirror.Controller, leading <-chan struct{}) error {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-leading:
			if !mirrors.Synced() {
				http.Error(w, "informers not synced", http.StatusServiceUnavailable)
				return
			}
		default:
			if o.leaderElect {
				_, _ = w.Write([]byte("ok: standby, not leading"))
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	if err := serve(ctx, o.healthAddr, health); err != nil {
		return err
	}
	if o.pprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		if err := serve(ctx, o.pprofAddr, mux); err != nil {
			return err
		}
	}
	if o.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
		if err := serve(ctx, o.metricsAddr, mux); err != nil {
			return err
		}
	}
	return nil
}

// lead runs f while this replica holds the leader election Lease.
func lead(ctx context.Context, o options, kube kubernetes.Interface, id string, f func(context.Context)) error {
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaseNamespace, o.leaseName, kube.CoreV1(), kube.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true,
		LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: f,
			OnStoppedLeading: func() { klog.InfoS("Leadership lost", "identity", id) },
		},
	})
	if ctx.Err() == nil {
		// Exit so the Pod restarts as a clean standby: the mirror's state
		// is the new leader's now.
		return fmt.Errorf("lost the leader election Lease %s/%s", o.leaseNamespace, o.leaseName)
	}
	return nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// serve listens on addr and serves h until ctx is done.
func serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Serving", "address", addr)
		}
	}()
	klog.InfoS("Serving", "address", ln.Addr().String())
	return nil
}

// serveAudit serves the audit ingress over TLS, with the certificate of
// auditCertificate.
func serveAudit(ctx context.Context, o options, kube kubernetes.Interface, h http.Handler) error {
	certFile, keyFile, err := auditCertificate(ctx, o, kube)
	if err != nil {
		return err
	}
	certs := &servingcert.Files{Cert: certFile, Key: keyFile}
	if _, err := certs.GetCertificate(nil); err != nil {
		return fmt.Errorf("loading the audit ingress certificate: %w", err)
	}
	tlsCfg := &tls.Config{GetCertificate: certs.GetCertificate, MinVersion: tls.VersionTLS12}
	if o.auditClientCA != "" {
		pem, err := os.ReadFile(o.auditClientCA)
		if err != nil {
			return fmt.Errorf("reading --audit-client-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--audit-client-ca-file holds no certificate")
		}
		tlsCfg.ClientCAs, tlsCfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	ln, err := net.Listen("tcp", o.auditAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.auditAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(attribution.RoutePrefix, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(tls.NewListener(ln, tlsCfg)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Serving the audit ingress")
		}
	}()
	klog.InfoS("Serving the audit ingress", "address", ln.Addr().String())
	return nil
}

// auditCertificate is the audit ingress's certificate: the files given;
// else a leaf of the --audit-ca-secret CA for --audit-service, which every
// replica shares and which is renewed before it expires; else a CA of
// its own in --data-dir/audit-pki, for a single local controller.
func auditCertificate(ctx context.Context, o options, kube kubernetes.Interface) (certFile, keyFile string, err error) {
	if o.auditCert != "" {
		return o.auditCert, o.auditKey, nil
	}
	dir := filepath.Join(o.dataDir, "audit-pki")
	if o.auditCASecret != "" {
		ns, name, _ := servingcert.ParseRef(o.auditCASecret)
		ca, err := servingcert.LoadOrCreateCA(ctx, kube.CoreV1().Secrets(ns), name)
		if err != nil {
			return "", "", err
		}
		svcNS, svc, _ := servingcert.ParseRef(o.auditService)
		leaf := &servingcert.Leaf{CA: ca, Dir: dir, Name: "serving-" + name, DNSNames: servingcert.ServiceNames(svcNS, svc),
			Renew: 90 * 24 * time.Hour}
		if _, err := leaf.Ensure(time.Now()); err != nil {
			return "", "", err
		}
		go servingcert.Keep(ctx, nil, leaf, time.Hour)
		certFile, keyFile = leaf.Files()
		return certFile, keyFile, nil
	}
	ca, err := pki.LoadOrCreateCA(dir, "ca")
	if err != nil {
		return "", "", err
	}
	if err := pki.EnsurePair(dir, "serving", func() ([]byte, []byte, error) {
		return ca.IssueServing("reverser-controller", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	}); err != nil {
		return "", "", err
	}
	klog.InfoS("Audit ingress uses a self-signed certificate", "ca", filepath.Join(dir, "ca.crt"))
	return filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key"), nil
}
