// Package install tests artifacts/deploy against the real control plane
// (G2): it applies the kustomize base server-side to a kube-apiserver that
// runs no Reverser, then runs both binaries out of cluster with the
// Deployments' own flags, as the ServiceAccounts the manifests create
// (tokens from the TokenRequest API) and so with exactly their RBAC, and
// runs the mirror and a save through them. The cluster has no kubelet, so
// the Pods stay Pending; a test overlay points the APIService's Service at
// the out-of-cluster API server on loopback.
package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"reverser.dev/reverser/pkg/pki"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

var (
	env  *controlplane.Env
	root string
)

func TestMain(m *testing.M) {
	root, _ = filepath.Abs("../..")
	controlplane.Main(m, "install", "", nil, func(e *controlplane.Env) { env = e },
		func(o *controlplane.Options) { o.NoReverser = true })
}

const ns = controlplane.ReverserNamespace

// kubectl runs the real kubectl with a kubeconfig.
func kubectl(kubeconfig, stdin string, args ...string) (string, error) {
	return harness.Kubectl(kubeconfig, stdin, args...)
}

func kubectlOK(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	return harness.KubectlOK(t, kubeconfig, stdin, args...)
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	harness.Eventually(t, timeout, what, cond)
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := controlplane.ReservePort()
	require.NoError(t, err)
	return port
}

// testOverlay is artifacts/deploy with the API server's Service turned
// into an ExternalName to loopback, where the test runs it: a loopback
// address is not a valid Endpoint.
func testOverlay(t *testing.T, apiPort int) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(root, "artifacts", "deploy"))
	require.NoError(t, err)
	port := strconv.Itoa(apiPort)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- `+base+`
patches:
- target: {kind: Service, name: reverser-apiserver}
  patch: |
    - op: replace
      path: /spec
      value: {type: ExternalName, externalName: localhost, ports: [{name: https, port: `+port+`, protocol: TCP}]}
- target: {kind: APIService, name: v1alpha1.reverser.dev}
  patch: |
    - {op: replace, path: /spec/service/port, value: `+port+`}
`), 0o644))
	return dir
}

// rendered is a Deployment of rendered manifests: its replicas and its
// first container's args, with $(POD_NAMESPACE) filled in as the kubelet
// would.
type rendered struct {
	replicas int32
	args     []string
}

func deployment(t *testing.T, manifests, name string) rendered {
	t.Helper()
	for _, doc := range strings.Split(manifests, "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" || d.Name != name {
			continue
		}
		r := rendered{replicas: 1}
		if d.Spec.Replicas != nil {
			r.replicas = *d.Spec.Replicas
		}
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			r.args = append(r.args, strings.ReplaceAll(a, "$(POD_NAMESPACE)", ns))
		}
		return r
	}
	t.Fatalf("no Deployment %s in the manifests", name)
	return rendered{}
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// ServiceAccount, from the TokenRequest API, as a Pod's projected token.
func serviceAccountKubeconfig(t *testing.T, sa string) string {
	t.Helper()
	token := strings.TrimSpace(kubectlOK(t, env.KubeconfigAdmin, "", "create", "token", sa, "-n", ns, "--duration=2h"))
	ca, err := os.ReadFile(filepath.Join(env.Dir, "pki", "kube-ca.crt"))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	require.NoError(t, pki.WriteKubeconfig(path, env.KubeAPIServerURL, ca, pki.Credentials{Token: token}))
	return path
}

// start runs a binary until the test ends; its output goes to a log that
// is printed when the test fails.
func start(t *testing.T, name string, args ...string) {
	t.Helper()
	logPath := filepath.Join(env.LogDir, "install-"+name+".log")
	log, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(root, "_output", "install", "bin", name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = log.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			if len(data) > 8000 {
				data = data[len(data)-8000:]
			}
			t.Logf("%s log:\n%s", name, data)
		}
	})
}
