package e2e

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

// kubectl runs the real kubectl as a user of the local cluster.
func kubectl(user, stdin string, args ...string) (string, error) {
	kubeconfig := map[string]string{
		controlplane.UserAdmin: env.KubeconfigAdmin,
		controlplane.UserAlice: env.KubeconfigAlice,
		controlplane.UserBob:   env.KubeconfigBob,
	}[user]
	if kubeconfig == "" {
		return "", fmt.Errorf("no kubeconfig for user %q", user)
	}
	out, err := at(kubeconfig, stdin, args...)
	if err != nil {
		return out, fmt.Errorf("as %s: %w", user, err)
	}
	return out, nil
}

// at runs the real kubectl with a kubeconfig: a user of the local cluster,
// or of a source cluster.
func at(kubeconfig, stdin string, args ...string) (string, error) {
	return harness.Kubectl(kubeconfig, stdin, args...)
}

func kubectlOK(t *testing.T, user, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(user, stdin, args...)
	require.NoError(t, err)
	return out
}

// getJSON reads an object as a user and decodes it into v.
func getJSON(t *testing.T, user string, v any, args ...string) {
	t.Helper()
	out := kubectlOK(t, user, "", append(append([]string{"get"}, args...), "-o", "json")...)
	require.NoError(t, json.Unmarshal([]byte(out), v))
}

var seq atomic.Int64

// uniqueName gives each test its own objects, so tests can share a cluster
// that `make up` started.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().Unix()%100000, seq.Add(1))
}

// namespace creates a namespace for the test and deletes it afterwards.
func namespace(t *testing.T, prefix string, labels ...string) string {
	t.Helper()
	name := uniqueName(prefix)
	kubectlOK(t, controlplane.UserAdmin, "", "create", "namespace", name)
	if len(labels) > 0 {
		kubectlOK(t, controlplane.UserAdmin, "", append([]string{"label", "namespace", name}, labels...)...)
	}
	t.Cleanup(func() { _, _ = kubectl(controlplane.UserAdmin, "", "delete", "namespace", name, "--wait=false") })
	return name
}

func gitTargetYAML(namespace, name string, extra string) string {
	return harness.GitTarget(harness.Target{Namespace: namespace, Name: name, KubeProvider: "local", Path: "clusters/" + name, Spec: extra})
}

func commitRequestYAML(namespace, name, targetNamespace, target string) string {
	return fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: %s, namespace: %s}
spec:
  gitTargetRef: {name: %s, namespace: %s}
  message: "Saved by the e2e suite"
`, name, namespace, target, targetNamespace)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	harness.Eventually(t, timeout, what, cond)
}
