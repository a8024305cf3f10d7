package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/harness"
)

// TestStandaloneBinaryWithKubectl runs the real reverser-apiserver binary in
// standalone mode and uses it through the real kubectl, as the README says.
func TestStandaloneBinaryWithKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	require.NoError(t, err, "kubectl is part of this machine kind; install it to run this test")
	dir := t.TempDir()
	bin := filepath.Join(dir, "reverser-apiserver")
	build := exec.Command("go", "build", "-o", bin, "reverser.dev/reverser/cmd/apiserver")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the server: %s", out)

	port := freePort(t)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	var logs bytes.Buffer
	server := exec.Command(bin, "--standalone", "--embedded-etcd-dir", filepath.Join(dir, "etcd"),
		"--cert-dir", filepath.Join(dir, "pki"), "--secure-port", strconv.Itoa(port), "--write-kubeconfig", kubeconfig)
	server.Stdout, server.Stderr = &logs, &logs
	require.NoError(t, server.Start())
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	t.Cleanup(func() {
		_ = server.Process.Kill()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})

	run := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String() + stderr.String(), err
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true,
		func(context.Context) (bool, error) {
			if _, err := os.Stat(kubeconfig); err != nil {
				return false, nil
			}
			_, err := run("", "get", "--raw", "/readyz")
			return err == nil, nil
		})
	require.NoError(t, err, "the server never became ready")

	text := runOK(t, run, "", "api-resources", "--api-group=reverser.dev", "-o", "name")
	assert.ElementsMatch(t, []string{
		"argocdclaims.reverser.dev", "clusterwatchrules.reverser.dev", "commitrequests.reverser.dev", "fluxclaims.reverser.dev",
		"gitproviders.reverser.dev", "gittargets.reverser.dev", "kubeproviders.reverser.dev", "watchrules.reverser.dev",
	}, strings.Fields(text))

	text = runOK(t, run, "", "explain", "gittarget.spec")
	assert.Contains(t, text, "allowedCommitRequests")
	assert.Contains(t, text, "branch to write. It must be allowed by the GitProvider. Immutable.")
	text = runOK(t, run, "", "explain", "commitrequest.spec.window.attachTimeout")
	assert.Contains(t, text, "attachTimeout")

	runOK(t, run, harness.GitTarget(harness.Target{Namespace: "demo", KubeProvider: "local", Path: "clusters/dev"})+`---
apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: first, namespace: demo}
spec:
  gitTargetRef: {name: site}
  message: First save
`, "apply", "--server-side", "-f", "-")

	text = runOK(t, run, "", "get", "commitrequests", "-n", "demo")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	require.Len(t, lines, 2, "%s", text)
	assert.Equal(t, []string{"NAME", "TARGET", "AUTHOR", "READY", "REASON", "COMMIT", "AGE"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"first", "site", "reverser-admin"}, strings.Fields(lines[1])[:3])

	badOut, err := run(`
apiVersion: reverser.dev/v1alpha1
kind: CommitRequest
metadata: {name: bad, namespace: demo}
spec:
  gitTargetRef: {name: site}
  message: ""
`, "apply", "--server-side", "-f", "-")
	require.Error(t, err, "an empty message is refused")
	assert.Contains(t, badOut, "spec.message")
	_, err = run("", "get", "commitrequest", "-n", "demo", "bad")
	assert.Error(t, err, "a refused object is not stored")

	require.NoError(t, server.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		assert.NoError(t, err, "the server exits cleanly on SIGTERM")
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not stop on SIGTERM")
	}
}

func runOK(t *testing.T, run func(string, ...string) (string, error), stdin string, args ...string) string {
	t.Helper()
	out, err := run(stdin, args...)
	require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := controlplane.ReservePort()
	require.NoError(t, err)
	return port
}
