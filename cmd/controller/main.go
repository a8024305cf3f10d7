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
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/claims"
	"reverser.dev/reverser/pkg/controller/commitrequest"
	"reverser.dev/reverser/pkg/controller/mirror"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/pki"
	"reverser.dev/reverser/pkg/version"
)

type options struct {
	kubeconfig, dataDir, metricsAddr, healthAddr string
	leaderElect                                  bool
	leaseNamespace, leaseName                    string
	resync                                       time.Duration

	auditAddr, auditCert, auditKey, auditClientCA string
	auditMaxBody                                  int64
	auditMaxFacts                                 int
	auditTTL, grace                               time.Duration
	commitRequestTTL, collect, saveTimeout        time.Duration
	secretNamespace                               string
	auditMaxInFlight                              int
	fluxIdentities, argoIdentities                string
	applyGrace, remotePoll                        time.Duration
}

func main() {
	o := options{}
	klog.InitFlags(nil)
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the control cluster (the one serving reverser.dev); in-cluster config when empty")
	flag.StringVar(&o.dataDir, "data-dir", "reverser-controller-data", "directory for the branch workers' local repositories")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", "address of the Prometheus /metrics endpoint; empty turns it off")
	flag.StringVar(&o.healthAddr, "health-probe-bind-address", "127.0.0.1:8081", "address of /healthz and /readyz")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader with a coordination.k8s.io Lease, so only one replica mirrors")
	flag.StringVar(&o.leaseNamespace, "leader-election-namespace", "reverser-system", "namespace of the leader election Lease")
	flag.StringVar(&o.leaseName, "leader-election-id", "reverser-controller", "name of the leader election Lease")
	flag.DurationVar(&o.resync, "resync", 30*time.Second, "how often every GitTarget is reconciled again (re-resolving rules against discovery)")
	flag.StringVar(&o.auditAddr, "audit-bind-address", "127.0.0.1:9444",
		"HTTPS address of the audit ingress, POST /audit/<kubeprovider>; empty turns it off")
	flag.StringVar(&o.auditCert, "audit-tls-cert-file", "", "serving certificate of the audit ingress; self-signed in --data-dir when empty")
	flag.StringVar(&o.auditKey, "audit-tls-private-key-file", "", "key of --audit-tls-cert-file")
	flag.StringVar(&o.auditClientCA, "audit-client-ca-file", "",
		"CA whose client certificates may authenticate audit routes that list clientCertificateCommonNames")
	flag.Int64Var(&o.auditMaxBody, "audit-max-body-bytes", 32<<20,
		"largest audit EventList accepted; larger ones get 413 and their facts are lost (RequestResponse events carry whole objects)")
	flag.IntVar(&o.auditMaxFacts, "audit-max-facts", 200000, "most attribution facts held; the oldest are dropped first")
	flag.DurationVar(&o.auditTTL, "audit-fact-ttl", 10*time.Minute, "how long an attribution fact is kept")
	flag.DurationVar(&o.grace, "author-attribution-grace", 2*time.Second,
		"how long a change waits for its audit fact before it is authored \"unknown (attribution unresolved)\"")
	flag.DurationVar(&o.commitRequestTTL, "commit-request-ttl", time.Hour,
		"how long a finished CommitRequest stays before it is deleted (annotation reverser.dev/delete-after)")
	flag.DurationVar(&o.collect, "commit-request-collect-delay", 0,
		"how long a saved window stays open after the save attaches, so the author's last edits join; 0 means the attribution grace")
	flag.DurationVar(&o.saveTimeout, "save-timeout", 2*time.Minute,
		"how long a CommitRequest that found its window may wait for its commit to be made and pushed (Git down, disk full) before it ends SaveFailed; its changes are still committed and pushed later")
	flag.StringVar(&o.secretNamespace, "secret-namespace", mirror.DefaultSecretNamespace,
		"the only namespace whose Secrets KubeProviders may name (kubeconfigs, audit tokens): the controller's own")
	flag.IntVar(&o.auditMaxInFlight, "audit-max-in-flight", 4,
		"audit EventLists decoded at once; more get 429 and kube-apiserver's webhook retries them")
	flag.StringVar(&o.fluxIdentities, "flux-identities", "system:serviceaccount:flux-system:kustomize-controller",
		"comma-separated users Flux's kustomize-controller writes as: their writes during an apply window are echoes of Git, not edits")
	flag.StringVar(&o.argoIdentities, "argocd-identities", "system:serviceaccount:argocd:argocd-application-controller",
		"comma-separated users Argo CD's application controller writes as: their writes during an apply window are echoes of Git, not edits")
	flag.DurationVar(&o.applyGrace, "apply-window-grace", 10*time.Second,
		"how long a claimed applier's writes are still echoes after it reported its converge (and until the barrier is met)")
	flag.DurationVar(&o.remotePoll, "applier-remote-poll", 30*time.Second,
		"how often a claimed GitTarget's remote is looked at for commits someone else pushed, which its applier then applies (ForeignCommit)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("reverser-controller version", version.Get())
		return
	}
	if o.collect == 0 {
		o.collect = o.grace
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "reverser-controller failed")
		os.Exit(1)
	}
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
	rev, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	facts := attribution.NewIndex(o.auditMaxFacts, o.auditTTL)
	factory := informers.NewSharedInformerFactory(rev, 0)
	// Rules and saves are checked again with SubjectAccessReviews; answers
	// are cached for well under a resync, so a withdrawn right stops a rule
	// within one.
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: kube.AuthorizationV1(),
		AllowCacheTTL:             min(o.resync/3, 10*time.Second), DenyCacheTTL: min(o.resync/3, 5*time.Second),
		WebhookRetryBackoff: genericoptions.DefaultAuthWebhookRetryBackoff(),
	}.New()
	if err != nil {
		return fmt.Errorf("building the authorizer: %w", err)
	}
	operations := claims.NewOperations()
	c := mirror.New(mirror.Config{Reverser: rev, Kube: kube, Source: cfg, DataDir: o.dataDir, Resync: o.resync, Facts: facts, Grace: o.grace,
		Factory: factory, Authorizer: authz, SecretNamespace: o.secretNamespace, FluxIdentities: splitList(o.fluxIdentities),
		ArgoCDIdentities: splitList(o.argoIdentities),
		ApplyGrace:       o.applyGrace, RemotePoll: o.remotePoll, ClaimReports: operations.Record})
	saves := commitrequest.New(commitrequest.ControlCluster(commitrequest.Config{Kube: kube, Authorizer: authz, TTL: o.commitRequestTTL,
		Collect: o.collect, SaveTimeout: o.saveTimeout, Savers: func(target string) (commitrequest.Saver, string, bool) {
			w, domain, ok := c.Saver(target)
			if !ok {
				return nil, "", false
			}
			return w, domain, true
		}}, rev, factory))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	held := claims.New(claims.Config{Reverser: rev, Factory: factory, Dynamic: dyn, Authorizer: authz, Resync: o.resync, Operations: operations})
	if o.auditAddr != "" {
		ingress := &attribution.Ingress{Index: facts, MaxBody: o.auditMaxBody, MaxInFlight: o.auditMaxInFlight, Routes: c.AuditRoute}
		if err := serveAudit(ctx, o, ingress); err != nil {
			return err
		}
	}

	var leading = make(chan struct{})
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-leading:
			if !c.Synced() {
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
	if o.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
		if err := serve(ctx, o.metricsAddr, mux); err != nil {
			return err
		}
	}

	runController := func(ctx context.Context) {
		close(leading)
		go func() {
			if err := saves.Run(ctx, 2); err != nil {
				klog.ErrorS(err, "CommitRequest controller stopped")
			}
		}()
		go func() {
			if err := held.Run(ctx, 1); err != nil {
				klog.ErrorS(err, "Applier claims controller stopped")
			}
		}()
		if err := c.Run(ctx, 2); err != nil {
			klog.ErrorS(err, "Mirror controller stopped")
		}
	}
	if !o.leaderElect {
		runController(ctx)
		return nil
	}
	id, _ := os.Hostname()
	id = fmt.Sprintf("%s_%d", id, os.Getpid())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaseNamespace, o.leaseName, kube.CoreV1(), kube.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: runController,
			OnStoppedLeading: func() { klog.InfoS("Leadership lost", "identity", id) },
		},
	})
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

// serveAudit serves the audit ingress over TLS. Without a certificate it
// issues one from a CA kept in --data-dir/audit-pki, whose ca.crt goes into
// kube-apiserver's audit webhook kubeconfig.
func serveAudit(ctx context.Context, o options, h http.Handler) error {
	certFile, keyFile := o.auditCert, o.auditKey
	if certFile == "" {
		dir := filepath.Join(o.dataDir, "audit-pki")
		ca, err := pki.LoadOrCreateCA(dir, "ca")
		if err != nil {
			return err
		}
		if err := pki.EnsurePair(dir, "serving", func() ([]byte, []byte, error) {
			return ca.IssueServing("reverser-controller", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
		}); err != nil {
			return err
		}
		certFile, keyFile = filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
		klog.InfoS("Audit ingress uses a self-signed certificate", "ca", filepath.Join(dir, "ca.crt"))
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("loading the audit ingress certificate: %w", err)
	}
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
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
