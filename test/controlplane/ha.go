package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// AuditServerName is the name the audit certificates carry and
// kube-apiserver's audit webhook verifies (tls-server-name): the audit
// Service's, as in artifacts/deploy.
const AuditServerName = "reverser-audit." + ReverserNamespace + ".svc"

// AuditAdvertiseAddress is what the local plane's controllers put in the
// audit EndpointSlice: kube-apiserver refuses loopback IPs and one-label
// names there, and a name under .localhost is loopback (RFC 6761), which
// the audit proxy resolves so.
const AuditAdvertiseAddress = "reverser-controller.localhost"

// The HA plane's sizes.
const (
	haEtcdMembers = 3
	haAPIServers  = 3
	haControllers = 2
)

// APIServerName and ControllerName name the HA plane's replicas, for Kill,
// Restart and Pid.
func APIServerName(i int) string  { return fmt.Sprintf("reverser-apiserver-%d", i) }
func ControllerName(i int) string { return fmt.Sprintf("reverser-controller-%d", i) }

// AgentEnv is what go-git adds to the User-Agent of its requests: each HA
// controller sets it to its ControllerName.
const AgentEnv = "GO_GIT_USER_AGENT_EXTRA"

// haPorts are the HA plane's ports beyond the single plane's, which its
// first members use.
type haPorts struct {
	etcdClient, etcdPeer [haEtcdMembers - 1]int
	apiServers           [haAPIServers]int
	// metrics, health and audit of each controller.
	controllers [haControllers][3]int
}

func (h *haPorts) all() []*int {
	var out []*int
	for i := range h.etcdClient {
		out = append(out, &h.etcdClient[i], &h.etcdPeer[i])
	}
	for i := range h.apiServers {
		out = append(out, &h.apiServers[i])
	}
	for i := range h.controllers {
		for j := range h.controllers[i] {
			out = append(out, &h.controllers[i][j])
		}
	}
	return out
}

// startEtcd starts kube-apiserver's etcd: one member, or with HA three
// forming a cluster, and waits until each is healthy (which needs quorum).
func startEtcd(ctx context.Context, env *Env, bin string, p ports, o Options, step func(string, ...any)) error {
	type member struct{ name, client, peer string }
	members := []member{{"etcd", env.KubeEtcdURL, fmt.Sprintf("http://127.0.0.1:%d", p.etcdPeer)}}
	if o.HA {
		for i := range p.ha.etcdClient {
			members = append(members, member{fmt.Sprintf("etcd-%d", i+1), fmt.Sprintf("http://127.0.0.1:%d", p.ha.etcdClient[i]),
				fmt.Sprintf("http://127.0.0.1:%d", p.ha.etcdPeer[i])})
		}
	}
	var cluster, clients []string
	for _, m := range members {
		cluster = append(cluster, m.name+"="+m.peer)
		clients = append(clients, m.client)
	}
	env.KubeEtcdServers = strings.Join(clients, ",")
	step("etcd on %s", env.KubeEtcdServers)
	var checks []func() error
	for _, m := range members {
		check, err := startProcess(env.Dir, env.LogDir, m.name, bin,
			"--name="+m.name, "--data-dir="+filepath.Join(env.Dir, m.name),
			"--listen-client-urls="+m.client, "--advertise-client-urls="+m.client,
			"--listen-peer-urls="+m.peer, "--initial-advertise-peer-urls="+m.peer,
			"--initial-cluster="+strings.Join(cluster, ","), "--initial-cluster-state=new",
			"--listen-metrics-urls=", "--log-level=warn")
		if err != nil {
			return err
		}
		checks = append(checks, check)
	}
	for i, m := range members {
		if err := waitHTTP(ctx, checks[i], m.name, m.client+"/health", plainClient(false), true); err != nil {
			return err
		}
	}
	return nil
}

// startHAAPIServers starts three reverser-apiserver replicas on the etcd
// cluster, each issuing its certificate from the CA Secret the first of
// them creates and keeping the APIService's caBundle (no certificate is
// handed to them), and the balancer the APIService's Service points at.
func startHAAPIServers(ctx context.Context, env *Env, o Options, p ports, step func(string, ...any)) error {
	// The APIService first: the replicas write its caBundle.
	step("APIService v1alpha1.reverser.dev, its caBundle left to the replicas")
	if err := kubectlApply(ctx, env.KubeconfigAdmin, apiServiceManifest(p, nil)); err != nil {
		return err
	}
	var urls, upstreams []string
	for i, port := range p.ha.apiServers {
		name := APIServerName(i)
		step("%s on 127.0.0.1:%d, on the etcd cluster", name, port)
		check, err := startProcess(env.Dir, env.LogDir, name, filepath.Join(o.ReverserBin, "reverser-apiserver"),
			"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", port),
			"--cert-dir="+filepath.Join(env.Dir, name, "pki"),
			"--serving-ca-secret="+ReverserNamespace+"/reverser-apiserver-ca",
			"--serving-service="+ReverserNamespace+"/reverser-apiserver", "--apiservice=v1alpha1.reverser.dev",
			"--etcd-servers="+env.KubeEtcdServers,
			"--kubeconfig="+env.KubeconfigServer,
			"--authentication-kubeconfig="+env.KubeconfigServer, "--authorization-kubeconfig="+env.KubeconfigServer,
			"--authorization-webhook-cache-unauthorized-ttl=1s")
		if err != nil {
			return err
		}
		url := fmt.Sprintf("https://127.0.0.1:%d", port)
		if err := waitHTTP(ctx, check, name, url+"/readyz", plainClient(true), true); err != nil {
			return err
		}
		urls = append(urls, url)
		upstreams = append(upstreams, fmt.Sprintf("127.0.0.1:%d", port))
	}
	env.ReverserAPIServerReplicas = strings.Join(urls, ",")
	step("reverser-balancer on %s, in front of the replicas", env.ReverserAPIServer)
	check, err := startProcess(env.Dir, env.LogDir, "reverser-balancer", filepath.Join(o.ReverserBin, "reverser-blackhole"),
		fmt.Sprintf("--listen=127.0.0.1:%d", p.reverserAPI), "--upstream="+strings.Join(upstreams, ","),
		"--control="+filepath.Join(env.Dir, "balancer"))
	if err != nil {
		return err
	}
	if err := waitTCP(ctx, check, fmt.Sprintf("127.0.0.1:%d", p.reverserAPI)); err != nil {
		return err
	}
	return WaitAPIServiceAvailable(ctx, env)
}

// startHAControllers starts two controllers that elect a leader, with audit
// certificates from the audit CA Secret, and the audit proxy: it forwards
// kube-apiserver's audit webhook to whatever the audit Service's
// EndpointSlice names, which the leader writes, as kube-proxy would.
func startHAControllers(ctx context.Context, env *Env, o Options, p ports, step func(string, ...any)) error {
	var checks []func() error
	for i, ports := range p.ha.controllers {
		name := ControllerName(i)
		step("%s, metrics on 127.0.0.1:%d", name, ports[0])
		// Each names itself in its pushes' User-Agent (gitserver.Attempts).
		check, err := startProcessEnv(env.Dir, env.LogDir, name, filepath.Join(o.ReverserBin, "reverser-controller"),
			[]string{AgentEnv + "=" + name}, append(controllerArgs(env),
				"--data-dir="+filepath.Join(env.Dir, name),
				fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[0]),
				fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ports[1]),
				fmt.Sprintf("--audit-bind-address=127.0.0.1:%d", ports[2]),
				"--audit-ca-secret="+ReverserNamespace+"/"+AuditCASecret,
				"--audit-service="+ReverserNamespace+"/reverser-audit", "--audit-advertise-address="+AuditAdvertiseAddress,
				"--leader-elect=true", "--leader-election-namespace="+ReverserNamespace)...)
		if err != nil {
			return err
		}
		checks = append(checks, check)
	}
	for i, ports := range p.ha.controllers {
		if err := waitHTTP(ctx, checks[i], ControllerName(i), fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]),
			plainClient(false), true); err != nil {
			return err
		}
	}
	env.MetricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", p.ha.controllers[0][0])
	step("audit-proxy on 127.0.0.1:%d, to the leader's EndpointSlice", p.audit)
	check, err := startProcess(env.Dir, env.LogDir, "audit-proxy", filepath.Join(o.ReverserBin, "reverser-blackhole"),
		fmt.Sprintf("--listen=127.0.0.1:%d", p.audit), "--endpointslice="+ReverserNamespace+"/reverser-audit",
		"--kubeconfig="+env.KubeconfigAdmin, "--control="+filepath.Join(env.Dir, "audit-proxy"))
	if err != nil {
		return err
	}
	return waitTCP(ctx, check, fmt.Sprintf("127.0.0.1:%d", p.audit))
}
