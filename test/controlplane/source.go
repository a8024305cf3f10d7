package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"reverser.dev/reverser/artifacts"
	"reverser.dev/reverser/pkg/pki"
)

// Users of a source cluster besides UserAdmin and UserAlice: the identity
// Reverser reaches it as, and a second one a test rotates the credential to.
// None of them has any right until a test binds one.
const (
	UserReverserSource        = "reverser-source"
	UserReverserSourceRotated = "reverser-source-rotated"
)

// SourceOptions say what StartSource starts.
type SourceOptions struct {
	// Name names the cluster: its processes are <Name>-etcd and
	// <Name>-kube-apiserver, for Kill, Restart and Pid, and its state is in
	// <env.Dir>/<Name>. Empty means "source".
	Name string
	// AuditRoute is the KubeProvider whose audit route the source's
	// kube-apiserver posts its events to: <the controller's audit
	// ingress>/audit/<AuditRoute>.
	AuditRoute string
}

// Source is a second cluster, etcd and kube-apiserver only, that a
// KubeProvider of the control plane reaches through a kubeconfig.
type Source struct {
	Name             string
	KubeAPIServerURL string
	EtcdURL          string
	// CAFile is the CA of the source's serving certificate, which every
	// kubeconfig below embeds.
	CAFile string
	// KubeconfigAdmin is system:masters; KubeconfigAlice is UserAlice (uid
	// "uid-src-alice", group GroupDevs), with no rights.
	KubeconfigAdmin, KubeconfigAlice string
	// KubeconfigReverser is UserReverserSource, the identity Reverser uses
	// there, and KubeconfigReverserRotated UserReverserSourceRotated.
	KubeconfigReverser, KubeconfigReverserRotated string
	// AuditToken is the bearer token the source's audit webhook presents:
	// it goes into the KubeProvider's audit Secret.
	AuditToken string
	// AuditWebhookURL is where the source's kube-apiserver posts events.
	AuditWebhookURL string

	env         *Env
	apiServer   string   // the process name of kube-apiserver
	etcd        string   // and of etcd
	bin         string   // kube-apiserver's binary
	args        []string // and its flags, for Start
	adminClient *rest.Config
}

// StartSource starts a source cluster beside the control plane env: its own
// etcd, and a kube-apiserver with its own CA, static tokens, RBAC and the
// control cluster's audit policy, whose audit webhook posts to the
// controller's ingress on route o.AuditRoute. bin holds etcd and
// kube-apiserver (Options.ControlPlaneBin). Its processes are recorded with
// the plane's, so Down stops them too. A source of the same name that ran
// before is stopped and its state removed. It returns once /readyz answers
// the admin and the namespace default exists.
func StartSource(ctx context.Context, env *Env, bin string, o SourceOptions) (s *Source, err error) {
	if o.Name == "" {
		o.Name = "source"
	}
	if strings.ContainsAny(o.Name, `/\`) || o.Name == "." || o.Name == ".." {
		return nil, fmt.Errorf("source name %q: not a plain name", o.Name)
	}
	if o.AuditRoute == "" || strings.Contains(o.AuditRoute, "/") {
		return nil, fmt.Errorf("source %s: audit route %q: want a KubeProvider name", o.Name, o.AuditRoute)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	hook, err := url.Parse(env.AuditWebhookURL)
	if err != nil || hook.Host == "" {
		return nil, fmt.Errorf("the control plane's audit webhook URL %q names no host: %v", env.AuditWebhookURL, err)
	}
	dir := filepath.Join(env.Dir, o.Name)
	s = &Source{
		Name:                      o.Name,
		CAFile:                    filepath.Join(dir, "pki", "kube-ca.crt"),
		KubeconfigAdmin:           filepath.Join(dir, "admin.kubeconfig"),
		KubeconfigAlice:           filepath.Join(dir, "alice.kubeconfig"),
		KubeconfigReverser:        filepath.Join(dir, UserReverserSource+".kubeconfig"),
		KubeconfigReverserRotated: filepath.Join(dir, UserReverserSourceRotated+".kubeconfig"),
		AuditToken:                randomToken(),
		AuditWebhookURL:           (&url.URL{Scheme: "https", Host: hook.Host, Path: "/audit/" + o.AuditRoute}).String(),
		env:                       env,
		apiServer:                 o.Name + "-kube-apiserver",
		etcd:                      o.Name + "-etcd",
		bin:                       filepath.Join(bin, "kube-apiserver"),
	}

	// What ran under this name before goes, with its data.
	if err := s.stopAll(); err != nil {
		return nil, fmt.Errorf("stopping the source %s that ran before: %w", o.Name, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	started := s // the named result is nil once an error is returned
	defer func() {
		if err != nil {
			_ = started.stopAll()
		}
	}()

	p, err := freePorts()
	if err != nil {
		return nil, err
	}
	s.KubeAPIServerURL = fmt.Sprintf("https://127.0.0.1:%d", p.kubeAPI)
	s.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", p.etcdClient)
	files, err := s.writeConfig(dir)
	if err != nil {
		return nil, err
	}

	peer := fmt.Sprintf("http://127.0.0.1:%d", p.etcdPeer)
	check, err := startProcess(env.Dir, env.LogDir, s.etcd, filepath.Join(bin, "etcd"),
		"--name="+s.etcd, "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+s.EtcdURL, "--advertise-client-urls="+s.EtcdURL,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster="+s.etcd+"="+peer, "--initial-cluster-state=new",
		"--listen-metrics-urls=", "--log-level=warn")
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, check, s.etcd, s.EtcdURL+"/health", plainClient(false), true); err != nil {
		return nil, err
	}

	// The control cluster's flags, on the source's etcd, port and files.
	s.args = kubeAPIServerArgs(&Env{KubeEtcdServers: s.EtcdURL}, ports{kubeAPI: p.kubeAPI}, files, 0)
	if s.adminClient, err = clientcmd.BuildConfigFromFlags("", s.KubeconfigAdmin); err != nil {
		return nil, err
	}
	s.adminClient.Timeout = 5 * time.Second
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// writeConfig writes the source's certificates, tokens, kubeconfigs and
// audit settings under dir.
func (s *Source) writeConfig(dir string) (*configFiles, error) {
	pkiDir := filepath.Join(dir, "pki")
	f := &configFiles{
		kubeCA: s.CAFile, kubeCAKey: filepath.Join(pkiDir, "kube-ca.key"),
		saKey: filepath.Join(pkiDir, "sa.key"), saPub: filepath.Join(pkiDir, "sa.pub"),
		kubeServing:      filepath.Join(pkiDir, "kube-apiserver"),
		frontProxyCA:     filepath.Join(pkiDir, "front-proxy-ca.crt"),
		frontProxyClient: filepath.Join(pkiDir, "front-proxy-client"),
		auditToken:       s.AuditToken,
		tokens:           filepath.Join(dir, "tokens.csv"),
		auditPolicy:      filepath.Join(dir, "audit-policy.yaml"),
		auditHook:        filepath.Join(dir, "audit-webhook.kubeconfig"),
	}
	// kubeAPIServerArgs also configures the aggregation layer's front
	// proxy: the source serves no APIService, but the flags want its files.
	kubeCA, err := writeKubePKI(pkiDir, f)
	if err != nil {
		return nil, err
	}

	// Static tokens: token,user,uid[,"groups"].
	users := []struct{ name, uid, groups, kubeconfig string }{
		{UserAdmin, "uid-src-admin", "system:masters", s.KubeconfigAdmin},
		{UserAlice, "uid-src-alice", GroupDevs, s.KubeconfigAlice},
		{UserReverserSource, "uid-" + UserReverserSource, "", s.KubeconfigReverser},
		{UserReverserSourceRotated, "uid-" + UserReverserSourceRotated, "", s.KubeconfigReverserRotated},
	}
	var csv strings.Builder
	for _, u := range users {
		token := randomToken()
		line := token + "," + u.name + "," + u.uid
		if u.groups != "" { // a quoted "" would be a group named ""
			line += fmt.Sprintf(",%q", u.groups)
		}
		csv.WriteString(line + "\n")
		if err := pki.WriteKubeconfig(u.kubeconfig, s.KubeAPIServerURL, kubeCA.CertPEM, pki.Credentials{Token: token}); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(f.tokens, []byte(csv.String()), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.auditPolicy, []byte(artifacts.AuditPolicy), 0o644); err != nil {
		return nil, err
	}

	// The audit webhook reaches the controller's ingress as the control
	// cluster's does (see writeConfig): trusting the reverser CA, verifying
	// the audit Service's name.
	reverserCA, err := os.ReadFile(filepath.Join(s.env.Dir, "pki", "reverser-ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("the control plane's audit CA: %w", err)
	}
	if err := writeAuditHook(f.auditHook, s.AuditWebhookURL, reverserCA, s.AuditToken); err != nil {
		return nil, err
	}
	return f, nil
}

// Kubeconfig is the kubeconfig of user on the source: UserAdmin, UserAlice,
// UserReverserSource or UserReverserSourceRotated; "" for anyone else.
func (s *Source) Kubeconfig(user string) string {
	switch user {
	case UserAdmin:
		return s.KubeconfigAdmin
	case UserAlice:
		return s.KubeconfigAlice
	case UserReverserSource:
		return s.KubeconfigReverser
	case UserReverserSourceRotated:
		return s.KubeconfigReverserRotated
	}
	return ""
}

// Stop stops the source's kube-apiserver, as an outage: its URL refuses
// connections until Start. etcd, and so the data, stay.
func (s *Source) Stop() error {
	if err := stopOne(s.pidFile(s.apiServer)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("stopping %s: %w", s.apiServer, err)
	}
	return nil
}

// Start starts the source's kube-apiserver again, on the same port with the
// same flags, unless it runs, and waits until /readyz answers the admin and
// the namespace default exists.
func (s *Source) Start(ctx context.Context) error {
	if !s.apiServerAlive() {
		if _, err := startProcess(s.env.Dir, s.env.LogDir, s.apiServer, s.bin, s.args...); err != nil {
			return err
		}
	}
	client, err := rest.HTTPClientFor(s.adminClient)
	if err != nil {
		return err
	}
	// Whichever process the pid file names, Restart's included.
	running := func() error {
		if !s.apiServerAlive() {
			return fmt.Errorf("%s exited: %s", s.apiServer, tail(filepath.Join(s.env.LogDir, s.apiServer+".log"), 5))
		}
		return nil
	}
	if err := waitHTTP(ctx, running, s.apiServer, s.KubeAPIServerURL+"/readyz", client, true); err != nil {
		return err
	}
	// The system namespaces are created by kube-apiserver itself, a moment
	// after it starts.
	return waitHTTP(ctx, running, s.apiServer, s.KubeAPIServerURL+"/api/v1/namespaces/default", client, true)
}

// apiServerAlive reports whether the kube-apiserver the pid file names
// runs: Stop removes the file, and Restart rewrites it.
func (s *Source) apiServerAlive() bool {
	pid, bin, err := readPidFile(s.pidFile(s.apiServer))
	return err == nil && alive(pid, bin)
}

func (s *Source) pidFile(name string) string { return filepath.Join(s.env.Dir, "pids", name+".pid") }

// stopAll stops kube-apiserver, then etcd.
func (s *Source) stopAll() error {
	var errs []error
	for _, name := range []string{s.apiServer, s.etcd} {
		if err := stopOne(s.pidFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("stopping %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
