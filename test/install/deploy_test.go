package install

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

const (
	apiserverSA  = "reverser-apiserver"
	controllerSA = "reverser-controller"
)

// TestInstallFromArtifacts applies artifacts/deploy, runs both servers as
// its ServiceAccounts with its Deployments' flags, and mirrors and saves
// through them; a tenant with the built-in edit role in one namespace does
// the work, and cannot reach what the install keeps to itself.
func TestInstallFromArtifacts(t *testing.T) {
	apiPort := freePort(t)
	// The README's steps: `make images REGISTRY=...` writes _output/deploy
	// (the images' build is left out here: nothing runs them), which is
	// applied as it is; then the overlay that points the APIService at
	// loopback.
	out := filepath.Join(t.TempDir(), "_output")
	images := exec.Command("go", "run", "./hack/images", "--overlay-only", "--registry", "registry.example", "--version", "v0.1.0", "--out", out)
	images.Dir = root
	written, err := images.CombinedOutput()
	require.NoError(t, err, "%s", written)
	deploy := filepath.Join(out, "deploy")
	assert.Contains(t, string(written), "kubectl apply --server-side -k "+deploy)
	apply := exec.Command("kubectl", "--kubeconfig", env.KubeconfigAdmin, "apply", "--server-side", "-k", deploy)
	applied, err := apply.CombinedOutput()
	require.NoError(t, err, "%s", applied)
	t.Logf("kubectl apply --server-side -k _output/deploy:\n%s", applied)
	for name, want := range map[string]string{"reverser-apiserver": "registry.example/reverser-apiserver:v0.1.0",
		"reverser-controller": "registry.example/reverser-controller:v0.1.0"} {
		assert.Equal(t, want, kubectlOK(t, env.KubeconfigAdmin, "", "get", "deployment", "-n", ns, name, "-o",
			"jsonpath={.spec.template.spec.containers[0].image}"), "the image make images built, not one that exists nowhere")
	}
	// The namespace warns of what Pod Security "restricted" would refuse.
	require.NotContains(t, string(applied), "Warning", "the Deployments' Pods would not run under Pod Security restricted")
	overlay := testOverlay(t, apiPort)
	kubectlOK(t, env.KubeconfigAdmin, "", "apply", "--server-side", "-k", overlay)
	manifests := kubectlOK(t, env.KubeconfigAdmin, "", "kustomize", overlay)
	// Everything the manifests name exists now.
	kubectlOK(t, env.KubeconfigAdmin, "", "get", "-k", overlay)

	t.Run("the overlays validate against the API server", overlaysValidate)
	t.Run("the controller's ClusterRoles name no subresource and no Secret", func(t *testing.T) { leastPrivilege(t, manifests) })
	t.Run("can-i of each ServiceAccount is the committed expectation", func(t *testing.T) {
		for _, sa := range []string{apiserverSA, controllerSA} {
			for _, where := range []string{ns, "kube-system", controlplane.DemoNamespace} {
				checkCanI(t, sa, where)
			}
		}
	})

	dataDir := t.TempDir()
	start(t, "reverser-apiserver", append(deployment(t, manifests, "reverser-apiserver").args,
		// Out of cluster: loopback, and directories of the test's.
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--cert-dir="+filepath.Join(dataDir, "pki"), "--embedded-etcd-dir="+filepath.Join(dataDir, "etcd"),
		"--kubeconfig="+serviceAccountKubeconfig(t, apiserverSA),
		"--authentication-kubeconfig="+serviceAccountKubeconfig(t, apiserverSA),
		"--authorization-kubeconfig="+serviceAccountKubeconfig(t, apiserverSA),
		"--authorization-webhook-cache-unauthorized-ttl=1s")...)
	// The manifest has no caBundle: the server wrote its CA there.
	require.NoError(t, controlplane.WaitAPIServiceAvailable(t.Context(), env))
	caBundle := kubectlOK(t, env.KubeconfigAdmin, "", "get", "apiservice", "v1alpha1.reverser.dev", "-o", "jsonpath={.spec.caBundle}")
	caSecret := kubectlOK(t, env.KubeconfigAdmin, "", "get", "secret", "-n", ns, "reverser-apiserver-ca", "-o", `jsonpath={.data.ca\.crt}`)
	require.Equal(t, caSecret, caBundle, "the APIService trusts the CA the server keeps in its Secret")

	auditPort := strings.TrimPrefix(strings.Split(strings.TrimPrefix(env.AuditWebhookURL, "https://"), "/")[0], "127.0.0.1:")
	health := freePort(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start(t, "reverser-controller", append(deployment(t, manifests, "reverser-controller").args,
		"--kubeconfig="+serviceAccountKubeconfig(t, controllerSA), "--data-dir="+filepath.Join(dataDir, "controller"),
		"--metrics-bind-address="+metricsAddr, fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", health),
		"--audit-bind-address=127.0.0.1:"+auditPort, "--audit-advertise-address="+controlplane.AuditAdvertiseAddress, "--resync=10s")...)
	// It leads (Lease RBAC) and points the audit Service at itself.
	eventually(t, time.Minute, "the controller leading and publishing the audit endpoint", func() (bool, error) {
		out, err := kubectl(env.KubeconfigAdmin, "", "get", "endpointslice", "-n", ns, "reverser-audit-leader",
			"-o", "jsonpath={.endpoints[0].addresses[0]}:{.ports[0].port}")
		return out == controlplane.AuditAdvertiseAddress+":"+auditPort, err
	})

	// A first scrape, so that rates have two samples by the last.
	scrapes := newScraper(t, metricsAddr, apiPort)
	scrapes.scrape(t)

	t.Run("a tenant with edit in its namespace mirrors and saves", func(t *testing.T) { mirrorAndSave(t) })
	t.Run("a tenant cannot reach what the install keeps to itself", tenantIsKeptOut)
	t.Run("the alerts evaluate on a live scrape, and none says the install is broken", func(t *testing.T) { alertsOnALiveScrape(t, scrapes) })
}

// mirrorAndSave: alice, with only the built-in edit role in namespace demo
// (Reverser's roles aggregate into it), sets a mirror up, edits, and saves.
func mirrorAndSave(t *testing.T) {
	admin := env.KubeconfigAdmin
	demo := controlplane.DemoNamespace
	kubectlOK(t, admin, "", "create", "rolebinding", "alice-edit", "-n", demo, "--clusterrole=edit", "--user="+controlplane.UserAlice)
	repo := "install-" + strconv.FormatInt(time.Now().Unix()%100000, 10)
	bare, err := gitserver.CreateRepo(env.GitRoot, repo)
	require.NoError(t, err)
	kubectlOK(t, admin, `apiVersion: reverser.dev/v1alpha1
kind: KubeProvider
metadata: {name: local}
spec:
  inCluster: true
  consumerNamespaces: {from: Names, names: [demo]}
  audit:
    enabled: true
    bearerTokenSecretRef: {namespace: reverser-system, name: audit-local, key: token}
`, "apply", "--server-side", "-f", "-")
	// edit reaches it through aggregation, which kube-controller-manager does.
	eventually(t, time.Minute, "edit aggregating Reverser's roles", func() (bool, error) {
		out, err := kubectl(env.KubeconfigAlice, "", "auth", "can-i", "create", "gittargets.reverser.dev", "-n", demo)
		return strings.TrimSpace(out) == "yes", err
	})
	kubectlOK(t, env.KubeconfigAlice, harness.Docs(
		harness.GitProvider(demo, "repo", env.GitBaseURL+"/"+repo+".git", "  allowInsecureHTTP: true"),
		harness.GitTarget(harness.Target{Namespace: demo, KubeProvider: "local", Path: "clusters/demo", Silence: "10m", MaxAge: "30m"}),
		harness.WatchRule(demo, "configmaps", "site", harness.ConfigMapRules)), "apply", "-f", "-")
	eventually(t, 2*time.Minute, "the GitTarget Ready", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "gittarget", "-n", demo, "site", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", err
	})
	kubectlOK(t, env.KubeconfigAlice, "", "create", "configmap", "-n", demo, "installed", "--from-literal=by=alice")
	kubectlOK(t, env.KubeconfigAlice, `apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: first-save, namespace: demo}
spec:
  gitTargetRef: {name: site}
  message: "Installed from artifacts/deploy"
`, "create", "-f", "-")
	eventually(t, 2*time.Minute, "the save Committed", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "commitrequest", "-n", demo, "first-save", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].reason}`)
		return out == "Committed", err
	})
	log := git(t, bare, "log", "-1", "--format=%an|%s", "main", "--", "clusters/demo/demo/configmaps/installed.yaml")
	assert.Equal(t, "alice|Installed from artifacts/deploy", log, "the change is alice's, with her message, through the installed servers")

	// alice may read demo's Secrets, the controller may not until the
	// admin grants it there (#27, finding 7): the GitTarget says which
	// grant is missing, and mirrors once it is made.
	kubectlOK(t, env.KubeconfigAlice, "", "create", "secret", "generic", "-n", demo, "hers", "--from-literal=a=1")
	kubectlOK(t, env.KubeconfigAlice, `apiVersion: reverser.dev/v1alpha1
kind: WatchRule
metadata: {name: secrets, namespace: demo}
spec:
  gitTargetRef: {name: site}
  rules:
  - apiGroups: [""]
    resources: [secrets]
`, "apply", "-f", "-")
	streams := func() (string, error) {
		return kubectl(admin, "", "get", "gittarget", "-n", demo, "site", "-o",
			`jsonpath={.status.conditions[?(@.type=="StreamsRunning")].reason}|{.status.conditions[?(@.type=="StreamsRunning")].message}`)
	}
	eventually(t, time.Minute, "StreamsRunning=False Forbidden, naming the grant", func() (bool, error) {
		out, err := streams()
		return strings.HasPrefix(out, "Forbidden|") && strings.Contains(out, "reverser-controller-secrets"), err
	})
	kubectlOK(t, admin, "", "create", "rolebinding", "reverser-controller-secrets", "-n", demo, "--clusterrole=reverser-controller-secrets",
		"--serviceaccount="+ns+":"+controllerSA)
	eventually(t, 2*time.Minute, "StreamsRunning=True once granted", func() (bool, error) {
		out, err := streams()
		return strings.HasPrefix(out, "Watching|"), err
	})
}

// leastPrivilege: every ClusterRole the controller's aggregate takes names
// no subresource, no wildcard and no Secret outside reverser.dev's own
// objects (whose status the controller writes): Secrets are granted per
// namespace (reverser-controller-secrets), and the aggregate the cluster
// made holds no more.
func leastPrivilege(t *testing.T, manifests string) {
	check := func(name string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			if slices.Equal(r.APIGroups, []string{"reverser.dev"}) {
				continue
			}
			for _, res := range r.Resources {
				assert.NotContains(t, res, "/", "%s: subresource %s", name, res)
				assert.NotEqual(t, "*", res, "%s: every resource of %v", name, r.APIGroups)
				assert.NotEqual(t, "secrets", res, "%s: a cluster-wide Secret read", name)
			}
			assert.NotContains(t, r.APIGroups, "*", "%s: every group", name)
		}
	}
	taken := 0
	for _, doc := range strings.Split(manifests, "\n---\n") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err != nil || role.Kind != "ClusterRole" ||
			role.Labels["reverser.dev/aggregate-to-controller"] != "true" {
			continue
		}
		taken++
		check(role.Name, role.Rules)
	}
	require.GreaterOrEqual(t, taken, 2, "the roles the aggregate takes")
	var aggregate rbacv1.ClusterRole
	eventually(t, time.Minute, "kube-controller-manager aggregating the controller's roles", func() (bool, error) {
		err := yaml.Unmarshal([]byte(kubectlOK(t, env.KubeconfigAdmin, "", "get", "clusterrole", "reverser-controller", "-o", "yaml")), &aggregate)
		return len(aggregate.Rules) > 0, err
	})
	check("the aggregate", aggregate.Rules)
}

// tenantIsKeptOut: a tenant with edit in a namespace cannot read the CA
// keys, move the audit endpoint, repoint the APIService or lend clusters.
func tenantIsKeptOut(t *testing.T) {
	for _, c := range []struct{ verb, resource, namespace string }{
		{"get", "secret/reverser-apiserver-ca", ns},
		{"get", "secret/reverser-audit-ca", ns},
		{"update", "endpointslices.discovery.k8s.io/reverser-audit-leader", ns},
		{"patch", "apiservices.apiregistration.k8s.io/v1alpha1.reverser.dev", ""},
		{"create", "kubeproviders.reverser.dev", ""},
		{"create", "clusterwatchrules.reverser.dev", ""},
		{"update", "gittargets.reverser.dev", controlplane.DemoNamespace + " --subresource=status"},
		{"create", "leases.coordination.k8s.io", ns},
	} {
		args := []string{"auth", "can-i", c.verb, c.resource}
		if c.namespace != "" {
			args = append(args, append([]string{"-n"}, strings.Fields(c.namespace)...)...)
		}
		// kubectl answers on the first line; a warning may follow.
		out, _ := kubectl(env.KubeconfigAlice, "", args...)
		answer, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		assert.Equal(t, "no", answer, "alice may %s %s in %q", c.verb, c.resource, c.namespace)
	}
}

// checkCanI compares what a ServiceAccount may do in a namespace with
// testdata/can-i/<sa>.<namespace>.txt, so that a widening shows in review.
// REVERSER_UPDATE_CAN_I=1 writes the files instead.
func checkCanI(t *testing.T, sa, namespace string) {
	t.Helper()
	out := kubectlOK(t, env.KubeconfigAdmin, "", "auth", "can-i", "--list", "-n", namespace,
		"--as=system:serviceaccount:"+ns+":"+sa)
	got := normaliseCanI(out)
	file := filepath.Join("testdata", "can-i", sa+"."+namespace+".txt")
	if os.Getenv("REVERSER_UPDATE_CAN_I") == "1" {
		require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
		require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err, "run with REVERSER_UPDATE_CAN_I=1 to write it")
	assert.Equal(t, string(want), got, "%s's rights in %s changed: review the RBAC, then REVERSER_UPDATE_CAN_I=1", sa, namespace)
}

var spaces = regexp.MustCompile(`\s{2,}`)

// normaliseCanI keeps can-i's rows, one per line, columns separated by
// " | ", sorted as kubectl sorts them; column widths do not matter.
func normaliseCanI(out string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		b.WriteString(spaces.ReplaceAllString(strings.TrimSpace(line), " | "))
		b.WriteByte('\n')
	}
	return b.String()
}

// git runs git in dir and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return harness.GitAs(t, harness.Identity{Name: "Install", Email: "install@example.com"}, dir, args...)
}

// overlaysValidate: external-etcd and ha pass the real API server's
// validation (a server-side dry run), ha runs 3 API servers and 2
// controllers with budgets that keep 2 and 1; cert-manager, whose kinds
// this cluster lacks, renders with the CA injection asked for.
func overlaysValidate(t *testing.T) {
	overlays := filepath.Join(root, "artifacts", "deploy", "overlays")
	for _, o := range []string{"external-etcd", "ha", "audit-client-certificates"} {
		kubectlOK(t, env.KubeconfigAdmin, "", "apply", "--server-side", "--dry-run=server", "-k", filepath.Join(overlays, o))
	}
	ha := kubectlOK(t, env.KubeconfigAdmin, "", "kustomize", filepath.Join(overlays, "ha"))
	assert.Equal(t, int32(3), deployment(t, ha, "reverser-apiserver").replicas)
	assert.Equal(t, int32(2), deployment(t, ha, "reverser-controller").replicas)
	assert.Contains(t, deployment(t, ha, "reverser-apiserver").args, "--etcd-servers=https://etcd-0.etcd:2379,https://etcd-1.etcd:2379,https://etcd-2.etcd:2379")
	assert.Contains(t, ha, "minAvailable: 2")
	assert.NotContains(t, ha, "kind: PersistentVolumeClaim", "no embedded etcd volume on an external etcd")
	certs := kubectlOK(t, env.KubeconfigAdmin, "", "kustomize", filepath.Join(overlays, "audit-client-certificates"))
	assert.Contains(t, deployment(t, certs, "reverser-controller").args, "--audit-client-ca-file=/var/run/reverser/audit-client-ca/ca.crt",
		"clientCertificateCommonNames needs the controller to verify client certificates")
	assert.Contains(t, certs, "secretName: reverser-audit-client-ca")
	cm := kubectlOK(t, env.KubeconfigAdmin, "", "kustomize", filepath.Join(overlays, "cert-manager"))
	assert.Contains(t, cm, "cert-manager.io/inject-ca-from: reverser-system/reverser-apiserver")
	assert.NotContains(t, deployment(t, cm, "reverser-apiserver").args, "--serving-ca-secret=reverser-system/reverser-apiserver-ca",
		"with cert-manager the server does not make its own certificate")
}
