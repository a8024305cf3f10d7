package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"reverser.dev/reverser/artifacts"
	"reverser.dev/reverser/pkg/pki"
	"reverser.dev/reverser/test/gitserver"
)

// Options say where the binaries are and where state goes.
type Options struct {
	// Dir holds all state: PKI, data, logs, pids, env. Up empties it first.
	Dir string
	// ControlPlaneBin holds etcd, kube-apiserver and kube-controller-manager.
	ControlPlaneBin string
	// ReverserBin holds reverser-apiserver and reverser-gitserver.
	ReverserBin string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	// ControllerBlackhole puts reverser-blackhole (from ReverserBin) between
	// reverser-controller and kube-apiserver, so that a test can stall the
	// controller's connections by writing Env.BlackholeControl.
	ControllerBlackhole bool
	// ControllerDataTmpfs, when set (a size such as "64m"), mounts a tmpfs
	// of that size as the controller's data directory, so that a test can
	// fill it: it needs root. Env.ControllerDataDir says where it is.
	ControllerDataTmpfs string
	// FluxBin, when set, holds Flux's source-controller, kustomize-controller
	// and their CRDs (crds/source, crds/kustomize), as hack/build-flux.sh
	// builds them: Up installs the CRDs and runs both controllers out of
	// cluster, in FluxNamespace, each as its own service account.
	FluxBin string
	// ArgoCDBin, when set, holds Argo CD's application controller, repo
	// server and core-install.yaml, as hack/build-argocd.sh builds them: Up
	// installs what that manifest gives them and runs both out of cluster,
	// in ArgoCDNamespace, with reverser-redis (from ReverserBin).
	ArgoCDBin string
	// NoReverser starts neither reverser-apiserver, nor its APIService, nor
	// reverser-controller, and creates none of their RBAC: the install
	// test brings them up from artifacts/deploy, as their ServiceAccounts.
	NoReverser bool
	// HA runs kube-apiserver on a 3-member etcd cluster, three
	// reverser-apiserver replicas on it behind a balancer, and two
	// controllers that elect a leader; the audit webhook reaches the leader
	// through the EndpointSlice it publishes (see ha.go).
	HA bool
	// AuditRelay puts reverser-auditrelay (from ReverserBin) between
	// kube-apiserver's audit webhook and the controller: the events'
	// timestamps move by the skew Env.AuditSkewControl names.
	AuditRelay bool
	// AuditBatchMaxWait is kube-apiserver's --audit-webhook-batch-max-wait:
	// attribution waits that long for an edit's audit event. 0 is the 1s
	// the install docs use.
	AuditBatchMaxWait time.Duration
}

// Users of the local cluster. alice and bob are in group devs; only alice
// may save GitTargets (ClusterRole reverser-saver).
const (
	UserAdmin = "admin"
	UserAlice = "alice"
	UserBob   = "bob"
	GroupDevs = "devs"

	// ReverserNamespace holds the Service behind the APIService.
	ReverserNamespace = "reverser-system"
	// DemoNamespace is where examples and tests put their objects.
	DemoNamespace = "demo"
	// AuditRoute is the controller's audit path for the local KubeProvider.
	AuditRoute = "/audit/local"
	// FluxNamespace is where Flux's objects live, as in a real install.
	FluxNamespace = "flux-system"
	// The users Flux's controllers act as: their service accounts', as in
	// a real install, bound to cluster-admin.
	UserFluxSource    = "system:serviceaccount:flux-system:source-controller"
	UserFluxKustomize = "system:serviceaccount:flux-system:kustomize-controller"
)

type ports struct {
	etcdClient, etcdPeer, kubeAPI, kcm, reverserAPI, git, audit, metrics, health, blackhole     int
	pprof, auditRelay                                                                           int
	fluxSourceMetrics, fluxSourceHealth, fluxStorage, fluxKustomizeMetrics, fluxKustomizeHealth int
	argoRedis, argoRepo, argoRepoMetrics, argoControllerMetrics                                 int
	ha                                                                                          haPorts
}

// startAuditRelay serves the audit webhook's URL with the controller's
// audit certificate and relays to the controller's audit ingress.
func startAuditRelay(ctx context.Context, env *Env, o Options, p ports, files *configFiles) error {
	check, err := startProcess(env.Dir, env.LogDir, "auditrelay", filepath.Join(o.ReverserBin, "reverser-auditrelay"),
		fmt.Sprintf("--listen=127.0.0.1:%d", p.auditRelay), fmt.Sprintf("--upstream=https://127.0.0.1:%d", p.audit),
		"--tls-cert-file="+files.controllerServing+".crt", "--tls-private-key-file="+files.controllerServing+".key",
		"--upstream-ca-file="+files.reverserCAFile, "--control="+env.AuditSkewControl)
	if err != nil {
		return err
	}
	return waitTCP(ctx, check, fmt.Sprintf("127.0.0.1:%d", p.auditRelay))
}

// Up starts the control plane and returns where it is. On error, whatever
// started is stopped again.
func Up(ctx context.Context, o Options) (env *Env, err error) {
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	began := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(progress, "  %5.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}

	// Absolute paths, so Restart and `make down` work from any directory.
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	if o.ControlPlaneBin, err = filepath.Abs(o.ControlPlaneBin); err != nil {
		return nil, err
	}
	if o.ReverserBin, err = filepath.Abs(o.ReverserBin); err != nil {
		return nil, err
	}
	if err := Down(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("stopping what ran in %s before: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for _, d := range []string{"pki", "logs", "git", "config"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			_ = Down(dir)
		}
	}()

	p, err := freePorts()
	if err != nil {
		return nil, err
	}
	env = &Env{
		Dir:                     dir,
		LogDir:                  filepath.Join(dir, "logs"),
		KubeAPIServerURL:        fmt.Sprintf("https://127.0.0.1:%d", p.kubeAPI),
		KubeconfigAdmin:         filepath.Join(dir, "admin.kubeconfig"),
		KubeconfigAlice:         filepath.Join(dir, "alice.kubeconfig"),
		KubeconfigBob:           filepath.Join(dir, "bob.kubeconfig"),
		KubeconfigServer:        filepath.Join(dir, "reverser-apiserver.kubeconfig"),
		KubeconfigCtrl:          filepath.Join(dir, "reverser-controller.kubeconfig"),
		KubeconfigFluxSource:    filepath.Join(dir, "flux-source-controller.kubeconfig"),
		KubeconfigFluxKustomize: filepath.Join(dir, "flux-kustomize-controller.kubeconfig"),
		KubeconfigArgoCD:        filepath.Join(dir, "argocd-application-controller.kubeconfig"),
		MetricsURL:              fmt.Sprintf("http://127.0.0.1:%d/metrics", p.metrics),
		ReverserAPIServer:       fmt.Sprintf("https://127.0.0.1:%d", p.reverserAPI),
		GitBaseURL:              fmt.Sprintf("http://127.0.0.1:%d%s", p.git, gitserver.PathPrefix),
		GitRoot:                 filepath.Join(dir, "git"),
		AuditWebhookURL:         fmt.Sprintf("https://127.0.0.1:%d%s", p.audit, AuditRoute),
		KubeEtcdURL:             fmt.Sprintf("http://127.0.0.1:%d", p.etcdClient),
	}
	if o.AuditRelay {
		env.AuditSkewControl = filepath.Join(dir, "audit-skew")
		env.AuditWebhookURL = fmt.Sprintf("https://127.0.0.1:%d%s", p.auditRelay, AuditRoute)
	}
	controllerKubeURL := env.KubeAPIServerURL
	if o.ControllerBlackhole {
		env.BlackholeControl = filepath.Join(dir, "blackhole")
		controllerKubeURL = fmt.Sprintf("https://127.0.0.1:%d", p.blackhole)
	}

	step("certificates and credentials")
	files, err := writeConfig(env, controllerKubeURL)
	if err != nil {
		return nil, err
	}

	if o.AuditRelay {
		step("reverser-auditrelay between kube-apiserver's audit webhook and the controller, skew in %s", env.AuditSkewControl)
		if err := startAuditRelay(ctx, env, o, p, files); err != nil {
			return nil, err
		}
	}

	cp := func(b string) string { return filepath.Join(o.ControlPlaneBin, b) }
	if err := startEtcd(ctx, env, cp("etcd"), p, o, step); err != nil {
		return nil, err
	}

	step("kube-apiserver on %s", env.KubeAPIServerURL)
	check, err := startProcess(dir, env.LogDir, "kube-apiserver", cp("kube-apiserver"), kubeAPIServerArgs(env, p, files, o.AuditBatchMaxWait)...)
	if err != nil {
		return nil, err
	}
	admin, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAdmin)
	if err != nil {
		return nil, err
	}
	admin.Timeout = 5 * time.Second
	adminHTTP, err := rest.HTTPClientFor(admin)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, check, "kube-apiserver", env.KubeAPIServerURL+"/readyz", adminHTTP, true); err != nil {
		return nil, err
	}

	if o.NoReverser {
		step("namespaces and the audit token")
		if err := kubectlApply(ctx, env.KubeconfigAdmin, namespaceManifests(files)); err != nil {
			return nil, err
		}
	} else {
		step("namespaces, RBAC and the reverser-apiserver Service")
		if err := kubectlApply(ctx, env.KubeconfigAdmin, namespaceManifests(files)+"---\n"+bootstrapManifests(p)); err != nil {
			return nil, err
		}
	}

	step("kube-controller-manager")
	check, err = startProcess(dir, env.LogDir, "kube-controller-manager", cp("kube-controller-manager"),
		"--kubeconfig="+env.KubeconfigAdmin,
		"--authentication-kubeconfig="+env.KubeconfigAdmin, "--authorization-kubeconfig="+env.KubeconfigAdmin,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.kcm),
		"--leader-elect=false", "--use-service-account-credentials=false",
		"--service-account-private-key-file="+files.saKey, "--root-ca-file="+files.kubeCA,
		"--cluster-signing-cert-file="+files.kubeCA, "--cluster-signing-key-file="+files.kubeCAKey)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, check, "kube-controller-manager", fmt.Sprintf("https://127.0.0.1:%d/healthz", p.kcm), plainClient(true), true); err != nil {
		return nil, err
	}

	switch {
	case o.NoReverser:
	case o.HA:
		if err := startHAAPIServers(ctx, env, o, p, step); err != nil {
			return nil, err
		}
	default:
		step("reverser-apiserver on %s, delegating to kube-apiserver", env.ReverserAPIServer)
		check, err = startProcess(dir, env.LogDir, "reverser-apiserver", filepath.Join(o.ReverserBin, "reverser-apiserver"),
			"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.reverserAPI),
			"--tls-cert-file="+files.reverserServing+".crt", "--tls-private-key-file="+files.reverserServing+".key",
			"--embedded-etcd-dir="+filepath.Join(dir, "reverser-etcd"),
			"--kubeconfig="+env.KubeconfigServer,
			"--authentication-kubeconfig="+env.KubeconfigServer, "--authorization-kubeconfig="+env.KubeconfigServer,
			// A refusal is not cached for long, so a RoleBinding just created
			// takes effect on the next try.
			"--authorization-webhook-cache-unauthorized-ttl=1s")
		if err != nil {
			return nil, err
		}
		if err := waitHTTP(ctx, check, "reverser-apiserver", env.ReverserAPIServer+"/readyz", plainClient(true), true); err != nil {
			return nil, err
		}

		step("APIService v1alpha1.reverser.dev")
		if err := kubectlApply(ctx, env.KubeconfigAdmin, apiServiceManifest(p, files.reverserCAPEM)); err != nil {
			return nil, err
		}
		if err := WaitAPIServiceAvailable(ctx, env); err != nil {
			return nil, err
		}
	}

	step("Git server on %s", env.GitBaseURL)
	check, err = startProcess(dir, env.LogDir, "git-server", filepath.Join(o.ReverserBin, "reverser-gitserver"),
		"--root="+env.GitRoot, fmt.Sprintf("--listen=127.0.0.1:%d", p.git))
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, check, "git server", strings.TrimSuffix(env.GitBaseURL, gitserver.PathPrefix)+"/", plainClient(false), false); err != nil {
		return nil, err
	}

	if o.FluxBin != "" {
		step("Flux: CRDs, source-controller and kustomize-controller in %s", FluxNamespace)
		if err := startFlux(ctx, env, o.FluxBin, p); err != nil {
			return nil, err
		}
	}
	if o.ArgoCDBin != "" {
		step("Argo CD: core install, Redis, repo server and application controller in %s", ArgoCDNamespace)
		if err := startArgoCD(ctx, env, o, p); err != nil {
			return nil, err
		}
	}

	env.ControllerDataDir = filepath.Join(dir, "controller")
	if o.ControllerDataTmpfs != "" {
		step("a tmpfs of %s as the controller's data directory", o.ControllerDataTmpfs)
		if err := mountTmpfs(env.ControllerDataDir, o.ControllerDataTmpfs); err != nil {
			return nil, err
		}
	}
	if o.ControllerBlackhole {
		step("reverser-blackhole between reverser-controller and kube-apiserver, control file %s", env.BlackholeControl)
		check, err = startProcess(dir, env.LogDir, "blackhole", filepath.Join(o.ReverserBin, "reverser-blackhole"),
			fmt.Sprintf("--listen=127.0.0.1:%d", p.blackhole), fmt.Sprintf("--upstream=127.0.0.1:%d", p.kubeAPI),
			"--control="+env.BlackholeControl)
		if err != nil {
			return nil, err
		}
		if err := waitTCP(ctx, check, fmt.Sprintf("127.0.0.1:%d", p.blackhole)); err != nil {
			return nil, err
		}
	}

	switch {
	case o.NoReverser:
	case o.HA:
		if err := startHAControllers(ctx, env, o, p, step); err != nil {
			return nil, err
		}
	default:
		env.PprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", p.pprof)
		step("reverser-controller, metrics on %s, profiles on %s", env.MetricsURL, env.PprofURL)
		check, err = startProcess(dir, env.LogDir, "reverser-controller", filepath.Join(o.ReverserBin, "reverser-controller"),
			append(controllerArgs(env),
				fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", p.metrics),
				fmt.Sprintf("--audit-bind-address=127.0.0.1:%d", p.audit),
				"--audit-tls-cert-file="+files.controllerServing+".crt", "--audit-tls-private-key-file="+files.controllerServing+".key",
				fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", p.health),
				fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", p.pprof),
				"--leader-elect=false")...)
		if err != nil {
			return nil, err
		}
		if err := waitHTTP(ctx, check, "reverser-controller", fmt.Sprintf("http://127.0.0.1:%d/readyz", p.health), plainClient(false), true); err != nil {
			return nil, err
		}
	}

	if err := env.write(); err != nil {
		return nil, err
	}
	return env, nil
}

// Down stops what Up started in dir. It is safe to call twice.
func Down(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "pids")); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := stopProcesses(dir); err != nil {
		return err
	}
	return unmountTmpfs(filepath.Join(dir, "controller"))
}

// tmpfsMarker, beside a mounted folder, says that Down unmounts it.
const tmpfsMarker = ".tmpfs"

func mountTmpfs(dir, size string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s (this needs root): %w: %s", dir, err, out)
	}
	return os.WriteFile(dir+tmpfsMarker, nil, 0o644)
}

func unmountTmpfs(dir string) error {
	if _, err := os.Stat(dir + tmpfsMarker); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("unmounting %s: %w: %s", dir, err, out)
	}
	return os.Remove(dir + tmpfsMarker)
}

// WaitAPIServiceAvailable waits until kube-apiserver reports the APIService
// Available, i.e. it reaches reverser-apiserver through the aggregator, and
// publishes our OpenAPI, which `kubectl explain` and server-side apply need
// and the aggregator fetches a moment later.
func WaitAPIServiceAvailable(ctx context.Context, env *Env) error {
	var last string
	kubectl := func(ctx context.Context, args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", env.KubeconfigAdmin}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := kubectl(ctx, "get", "apiservice", "v1alpha1.reverser.dev",
			"-o", `jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].message}`)
		last = "APIService: " + out
		if err != nil || !strings.HasPrefix(out, "True") {
			return false, nil
		}
		out, err = kubectl(ctx, "get", "--raw", "/openapi/v3")
		last = "OpenAPI v3 does not list apis/reverser.dev/v1alpha1 yet"
		return err == nil && strings.Contains(out, `"apis/reverser.dev/v1alpha1"`), nil
	})
	if err != nil {
		return fmt.Errorf("the reverser.dev API is not served through kube-apiserver (last: %s): %w", last, err)
	}
	return nil
}

type configFiles struct {
	kubeCA, kubeCAKey, saKey, saPub string
	kubeServing                     string // path without .crt/.key
	frontProxyCA, frontProxyClient  string
	reverserServing                 string
	controllerServing               string
	reverserCAFile                  string
	reverserCAPEM, reverserCAKeyPEM []byte
	auditToken                      string
	tokens, auditPolicy, auditHook  string
}

// writeConfig writes certificates, tokens, kubeconfigs and audit settings.
func writeConfig(env *Env, controllerKubeURL string) (*configFiles, error) {
	pkiDir := filepath.Join(env.Dir, "pki")
	cfgDir := filepath.Join(env.Dir, "config")
	f := &configFiles{
		kubeCA: filepath.Join(pkiDir, "kube-ca.crt"), kubeCAKey: filepath.Join(pkiDir, "kube-ca.key"),
		saKey: filepath.Join(pkiDir, "sa.key"), saPub: filepath.Join(pkiDir, "sa.pub"),
		kubeServing:       filepath.Join(pkiDir, "kube-apiserver"),
		frontProxyCA:      filepath.Join(pkiDir, "front-proxy-ca.crt"),
		frontProxyClient:  filepath.Join(pkiDir, "front-proxy-client"),
		reverserServing:   filepath.Join(pkiDir, "reverser-apiserver"),
		controllerServing: filepath.Join(pkiDir, "reverser-controller-audit"),
		reverserCAFile:    filepath.Join(pkiDir, "reverser-ca.crt"),
		tokens:            filepath.Join(cfgDir, "tokens.csv"),
		auditPolicy:       filepath.Join(cfgDir, "audit-policy.yaml"),
		auditHook:         filepath.Join(cfgDir, "audit-webhook.kubeconfig"),
	}
	loopback := []net.IP{net.ParseIP("127.0.0.1")}

	kubeCA, err := writeKubePKI(pkiDir, f)
	if err != nil {
		return nil, err
	}
	reverserCA, err := pki.LoadOrCreateCA(pkiDir, "reverser-ca")
	if err != nil {
		return nil, err
	}
	f.reverserCAPEM = reverserCA.CertPEM
	if f.reverserCAKeyPEM, err = os.ReadFile(filepath.Join(pkiDir, "reverser-ca.key")); err != nil {
		return nil, err
	}
	if err := pki.EnsurePair(pkiDir, "reverser-apiserver", func() ([]byte, []byte, error) {
		return reverserCA.IssueServing("reverser-apiserver",
			[]string{"reverser-apiserver." + ReverserNamespace + ".svc", "localhost"}, loopback)
	}); err != nil {
		return nil, err
	}
	if err := pki.EnsurePair(pkiDir, "reverser-controller-audit", func() ([]byte, []byte, error) {
		return reverserCA.IssueServing("reverser-controller", []string{"localhost", AuditServerName}, loopback)
	}); err != nil {
		return nil, err
	}

	// Static tokens: token,user,uid,"groups".
	users := []struct{ name, uid, groups, kubeconfig, server string }{
		{UserAdmin, "uid-admin", "system:masters", env.KubeconfigAdmin, env.KubeAPIServerURL},
		{UserAlice, "uid-alice", GroupDevs, env.KubeconfigAlice, env.KubeAPIServerURL},
		{UserBob, "uid-bob", GroupDevs, env.KubeconfigBob, env.KubeAPIServerURL},
		{"reverser-apiserver", "uid-reverser-apiserver", "", env.KubeconfigServer, env.KubeAPIServerURL},
		{"reverser-controller", "uid-reverser-controller", "", env.KubeconfigCtrl, controllerKubeURL},
		{UserFluxSource, "uid-flux-source", "system:serviceaccounts,system:serviceaccounts:" + FluxNamespace, env.KubeconfigFluxSource,
			env.KubeAPIServerURL},
		{UserFluxKustomize, "uid-flux-kustomize", "system:serviceaccounts,system:serviceaccounts:" + FluxNamespace,
			env.KubeconfigFluxKustomize, env.KubeAPIServerURL},
		{UserArgoCDController, "uid-argocd-application-controller", "system:serviceaccounts,system:serviceaccounts:" + ArgoCDNamespace,
			env.KubeconfigArgoCD, env.KubeAPIServerURL},
	}
	var csv strings.Builder
	for _, u := range users {
		token := randomToken()
		fmt.Fprintf(&csv, "%s,%s,%s,%q\n", token, u.name, u.uid, u.groups)
		if err := pki.WriteKubeconfig(u.kubeconfig, u.server, kubeCA.CertPEM, pki.Credentials{Token: token}); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(f.tokens, []byte(csv.String()), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.auditPolicy, []byte(artifacts.AuditPolicy), 0o644); err != nil {
		return nil, err
	}
	// The controller's audit ingress starts last; until it listens, the
	// batching webhook backend retries and drops events without blocking
	// any request. The token is also in the Secret the KubeProvider names.
	f.auditToken = randomToken()
	if err := writeAuditHook(f.auditHook, env.AuditWebhookURL, reverserCA.CertPEM, f.auditToken); err != nil {
		return nil, err
	}
	return f, nil
}

// writeKubePKI writes what a kube-apiserver serves and signs with: its CA
// and serving certificate, the front proxy's CA and client certificate, and
// the service-account key pair, at the paths f names.
func writeKubePKI(pkiDir string, f *configFiles) (*pki.CA, error) {
	kubeCA, err := pki.LoadOrCreateCA(pkiDir, "kube-ca")
	if err != nil {
		return nil, err
	}
	if err := pki.EnsurePair(pkiDir, "kube-apiserver", func() ([]byte, []byte, error) {
		return kubeCA.IssueServing("kube-apiserver",
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
			[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")})
	}); err != nil {
		return nil, err
	}
	frontCA, err := pki.LoadOrCreateCA(pkiDir, "front-proxy-ca")
	if err != nil {
		return nil, err
	}
	if err := pki.EnsurePair(pkiDir, "front-proxy-client", func() ([]byte, []byte, error) {
		return frontCA.IssueClient("front-proxy-client")
	}); err != nil {
		return nil, err
	}
	if err := writeServiceAccountKey(f.saKey, f.saPub); err != nil {
		return nil, err
	}
	return kubeCA, nil
}

// writeAuditHook writes kube-apiserver's audit webhook kubeconfig: url,
// trusting caPEM, presenting token. As in
// artifacts/deploy/audit/webhook-kubeconfig.yaml, the audit certificate
// names the Service, not the address dialled.
func writeAuditHook(path, url string, caPEM []byte, token string) error {
	if err := pki.WriteKubeconfig(path, url, caPEM, pki.Credentials{Token: token}); err != nil {
		return err
	}
	hook, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for _, c := range hook.Clusters {
		c.TLSServerName = AuditServerName
	}
	return clientcmd.WriteToFile(*hook, path)
}

// controllerArgs are the flags every reverser-controller of the local
// plane shares.
func controllerArgs(env *Env) []string {
	return []string{"--kubeconfig=" + env.KubeconfigCtrl, "--data-dir=" + env.ControllerDataDir,
		// Rotations and late CRDs show within seconds on a development cluster,
		// and finished CommitRequests do not pile up.
		"--resync=10s", "--commit-request-ttl=15s",
		// Foreign commits reach a claimed applier within seconds.
		"--applier-remote-poll=2s", "--apply-window-grace=2s",
		// A failure in CI shows the converges and barriers.
		"-v=2"}
}

func kubeAPIServerArgs(env *Env, p ports, f *configFiles, auditWait time.Duration) []string {
	if auditWait == 0 {
		auditWait = time.Second
	}
	return []string{
		"--etcd-servers=" + env.KubeEtcdServers,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", p.kubeAPI),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--tls-cert-file=" + f.kubeServing + ".crt", "--tls-private-key-file=" + f.kubeServing + ".key",
		"--client-ca-file=" + f.kubeCA,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f.saPub, "--service-account-signing-key-file=" + f.saKey,
		"--token-auth-file=" + f.tokens,
		"--authorization-mode=Node,RBAC",
		"--audit-policy-file=" + f.auditPolicy,
		"--audit-webhook-config-file=" + f.auditHook,
		"--audit-webhook-mode=batch", "--audit-webhook-batch-max-wait=" + auditWait.String(), "--audit-webhook-initial-backoff=1s",
		"--requestheader-client-ca-file=" + f.frontProxyCA,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f.frontProxyClient + ".crt",
		"--proxy-client-key-file=" + f.frontProxyClient + ".key",
		"--enable-aggregator-routing=false",
	}
}

func writeServiceAccountKey(keyPath, pubPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyPEM, err := pki.EncodeKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startFlux installs Flux's CRDs and starts its two controllers out of
// cluster, on loopback ports, and waits until both are ready.
func startFlux(ctx context.Context, env *Env, bin string, p ports) error {
	var manifests strings.Builder
	manifests.WriteString(fluxManifests)
	for _, c := range []string{"source", "kustomize"} {
		files, err := filepath.Glob(filepath.Join(bin, "crds", c, "*.yaml"))
		if err != nil || len(files) == 0 {
			return fmt.Errorf("no Flux CRDs in %s (run hack/build-flux.sh): %v", filepath.Join(bin, "crds", c), err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			manifests.WriteString("\n---\n")
			manifests.Write(data)
		}
	}
	if err := kubectlApply(ctx, env.KubeconfigAdmin, manifests.String()); err != nil {
		return fmt.Errorf("installing Flux's CRDs: %w", err)
	}
	if err := waitCRDs(ctx, env.KubeconfigAdmin); err != nil {
		return err
	}
	env.FluxStorageURL = fmt.Sprintf("http://127.0.0.1:%d", p.fluxStorage)
	if err := os.MkdirAll(filepath.Join(env.Dir, "flux-storage"), 0o755); err != nil {
		return err
	}
	controllers := []struct {
		name, kubeconfig string
		health           int
		args             []string
	}{
		{"source-controller", env.KubeconfigFluxSource, p.fluxSourceHealth, []string{
			fmt.Sprintf("--metrics-addr=127.0.0.1:%d", p.fluxSourceMetrics),
			"--storage-path=" + filepath.Join(env.Dir, "flux-storage"),
			fmt.Sprintf("--storage-addr=127.0.0.1:%d", p.fluxStorage),
			fmt.Sprintf("--storage-adv-addr=127.0.0.1:%d", p.fluxStorage),
		}},
		{"kustomize-controller", env.KubeconfigFluxKustomize, p.fluxKustomizeHealth, []string{
			fmt.Sprintf("--metrics-addr=127.0.0.1:%d", p.fluxKustomizeMetrics),
		}},
	}
	for _, c := range controllers {
		args := append([]string{fmt.Sprintf("--health-addr=127.0.0.1:%d", c.health)}, c.args...)
		check, err := startProcessEnv(env.Dir, env.LogDir, "flux-"+c.name, filepath.Join(bin, c.name),
			[]string{"KUBECONFIG=" + c.kubeconfig, "RUNTIME_NAMESPACE=" + FluxNamespace}, args...)
		if err != nil {
			return err
		}
		if err := waitHTTP(ctx, check, c.name, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.health), plainClient(false), true); err != nil {
			return err
		}
	}
	return nil
}

// waitCRDs waits until every CRD is served: a controller started before
// its kinds are exits at once ("no matches for kind"). kubectl wait fails,
// rather than waits, on a CRD that has no conditions yet: ask again.
func waitCRDs(ctx context.Context, kubeconfig string) error {
	var out []byte
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		out, err = exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "wait", "--for=condition=Established",
			"--timeout=30s", "crd", "--all").CombinedOutput()
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("waiting for the CRDs: %w: %s", err, out)
	}
	return nil
}

// fluxManifests are Flux's namespace and its controllers' rights.
var fluxManifests = `apiVersion: v1
kind: Namespace
metadata: {name: ` + FluxNamespace + `}
---
` + Binding("flux-controllers", "", "ClusterRole", "cluster-admin", "User", UserFluxSource, UserFluxKustomize)

// waitTCP polls addr until it accepts a connection, for at most 30 seconds.
func waitTCP(ctx context.Context, running func() error, addr string) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if err := running(); err != nil {
			return false, err
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false, nil
		}
		_ = c.Close()
		return true, nil
	})
}

// waitHTTP polls url until it answers with a status below 500 (or exactly
// 200 when strict), for at most 90 seconds, and gives up at once when the
// process behind it is no longer running.
func waitHTTP(ctx context.Context, running func() error, what, url string, client *http.Client, strict bool) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := running(); err != nil {
			return false, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		last = resp.Status + " " + string(body)
		if strict {
			return resp.StatusCode == http.StatusOK, nil
		}
		return resp.StatusCode < 500, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not answer on %s (last: %s): %w", what, url, last, err)
	}
	return nil
}

// plainClient reaches our own loopback servers; with insecure it skips
// verification, which only health checks of self-signed servers need.
func plainClient(insecure bool) *http.Client {
	//nolint:gosec // loopback health checks of servers whose certificates their binaries self-sign
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: insecure}}}
}

func kubectlApply(ctx context.Context, kubeconfig, manifests string) error {
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", "-")
	cmd.Stdin = strings.NewReader(manifests)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl apply: %w: %s", err, out)
	}
	return nil
}

// apiServiceManifest is the APIService, trusting caPEM; without it the
// caBundle is left to the server (--apiservice).
func apiServiceManifest(p ports, caPEM []byte) string {
	bundle := ""
	if caPEM != nil {
		bundle = "  caBundle: " + base64.StdEncoding.EncodeToString(caPEM) + "\n"
	}
	return `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1alpha1.reverser.dev
spec:
  group: reverser.dev
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  service:
    namespace: ` + ReverserNamespace + `
    name: reverser-apiserver
    port: ` + strconv.Itoa(p.reverserAPI) + "\n" + bundle
}
