// Package harness holds what the suites that run real processes share
// (e2e, install, faults): the real kubectl and git, polling with a
// deadline, and the controller's metrics. Nothing here waits on a fixed
// time: conditions are polled until they hold or the deadline passes.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Kubectl runs the real kubectl with a kubeconfig; on failure the output
// holds stdout and stderr, and the error kubectl's stderr.
func Kubectl(kubeconfig, stdin string, args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// KubectlOK is Kubectl that fails the test on an error.
func KubectlOK(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	out, err := Kubectl(kubeconfig, stdin, args...)
	require.NoError(t, err)
	return out
}

// Identity is who a git command commits as.
type Identity struct{ Name, Email string }

// GitAs runs the git CLI in dir as who, with no system or user config,
// and returns its trimmed output.
func GitAs(t *testing.T, who Identity, dir string, args ...string) string {
	t.Helper()
	out, err := GitAsErr(who, dir, args...)
	require.NoError(t, err)
	return out
}

// GitAsErr is GitAs that returns the failure.
func GitAsErr(who Identity, dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	home := dir
	if home == "" {
		home = os.TempDir()
	}
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+home,
		"GIT_AUTHOR_NAME="+who.Name, "GIT_AUTHOR_EMAIL="+who.Email, "GIT_COMMITTER_NAME="+who.Name, "GIT_COMMITTER_EMAIL="+who.Email)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Eventually polls cond until it holds, and fails the test with what and
// cond's last error when timeout passes first.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	require.NoError(t, err, "%s (last error: %v)", what, last)
}

// Metric reads a series from a /metrics endpoint: an exact series
// (`name{labels}`), or, given a bare name, the sum of its series; 0 when
// absent. ok is false when the endpoint does not answer.
func Metric(url, series string) (value float64, ok bool) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, v, found := strings.Cut(line, " ")
		if !found || (name != series && (strings.Contains(series, "{") || !strings.HasPrefix(name, series+"{"))) {
			continue
		}
		var f float64
		if _, err := fmt.Sscan(v, &f); err == nil {
			value += f
		}
	}
	return value, true
}
