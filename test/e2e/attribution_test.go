package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/pkg/attribution"
)

// authorsOf lists the commits of a mirror, oldest first, as
// "author <email> | subject".
func (f *mirrorFixture) authorsOf() []string {
	out, err := exec.Command("git", "-C", f.bare, "log", "--reverse", "--format=%an <%ae> | %s", "main").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func (f *mirrorFixture) commitsTouching(name string) []string {
	var out []string
	for _, line := range f.authorsOf() {
		if strings.HasSuffix(line, "/"+name) {
			out = append(out, line)
		}
	}
	return out
}

// TestAuthorsFromAudit: alice and bob editing at the same time get a commit
// each; one object edited by alice then bob keeps that order.
func TestAuthorsFromAudit(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	var wg sync.WaitGroup
	for _, who := range []string{alice, bob} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := kubectl(who, "", "create", "configmap", "-n", f.ns, who+"-settings", "--from-literal=owner="+who)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	f.waitFile(f.cmPath("alice-settings"), func(s string) bool { return s != "" }, "alice's ConfigMap written")
	f.waitFile(f.cmPath("bob-settings"), func(s string) bool { return s != "" }, "bob's ConfigMap written")
	assert.Equal(t, []string{"alice <alice@users.reverser.invalid> | Reverser: create ConfigMap " + f.ns + "/alice-settings"},
		f.commitsTouching("alice-settings"))
	assert.Equal(t, []string{"bob <bob@users.reverser.invalid> | Reverser: create ConfigMap " + f.ns + "/bob-settings"},
		f.commitsTouching("bob-settings"))
	committer, err := exec.Command("git", "-C", f.bare, "log", "-1", "--format=%cn <%ce>", "main").Output()
	require.NoError(t, err)
	assert.Equal(t, "Reverser <reverser@reverser.dev>", strings.TrimSpace(string(committer)), "the committer stays the configured identity")

	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "shared", "--from-literal=v=1")
	kubectlOK(t, bob, "", "patch", "configmap", "-n", f.ns, "shared", "--type=merge", "-p", `{"data":{"v":"2"}}`)
	f.waitFile(f.cmPath("shared"), func(s string) bool { return strings.Contains(s, `v: "2"`) }, "bob's edit written")
	assert.Equal(t, []string{
		"alice <alice@users.reverser.invalid> | Reverser: create ConfigMap " + f.ns + "/shared",
		"bob <bob@users.reverser.invalid> | Reverser: update ConfigMap " + f.ns + "/shared",
	}, f.commitsTouching("shared"))
}

// TestServiceAccountAuthor: an edit made with a service account's token is
// authored by the service account.
func TestServiceAccountAuthor(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	kubectlOK(t, admin, "", "create", "serviceaccount", "-n", f.ns, "deployer")
	kubectlOK(t, admin, "", "create", "rolebinding", "-n", f.ns, "deployer-edit", "--clusterrole=edit", "--serviceaccount="+f.ns+":deployer")
	token := strings.TrimSpace(kubectlOK(t, admin, "", "create", "token", "-n", f.ns, "deployer"))
	kubectlOK(t, admin, "", "--token", token, "create", "configmap", "-n", f.ns, "deployed", "--from-literal=by=ci")
	f.waitFile(f.cmPath("deployed"), func(s string) bool { return s != "" }, "the service account's ConfigMap written")
	assert.Equal(t, []string{fmt.Sprintf("system:serviceaccount:%[1]s:deployer <deployer.%[1]s.serviceaccount@users.reverser.invalid> | "+
		"Reverser: create ConfigMap %[1]s/deployed", f.ns)}, f.commitsTouching("deployed"))
}

// TestUnresolvedAuthor: a provider whose audit route never receives events
// authors changes "unknown (attribution unresolved)" after the grace.
func TestUnresolvedAuthor(t *testing.T) {
	f := newMirrorWith(t, mirrorOptions{rules: configMapRule, kubeProvider: "elsewhere"})
	f.waitReady()
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "orphan", "--from-literal=a=1")
	f.waitFile(f.cmPath("orphan"), func(s string) bool { return s != "" }, "written after the grace")
	assert.Equal(t, []string{attribution.UnresolvedName + " <unresolved@users.reverser.invalid> | Reverser: create ConfigMap " +
		f.ns + "/orphan"}, f.commitsTouching("orphan"))
	// Provider conditions are written every few seconds.
	eventually(t, 30*time.Second, "the KubeProvider says no audit events arrive", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "kubeprovider", "elsewhere", "-o",
			`jsonpath={.status.conditions[?(@.type=="AuditFactsReceived")].reason}`)
		return strings.TrimSpace(out) == "NoAuditEvents", err
	})
}

// TestAuditIngressRefusesBadInput: garbage and unauthenticated posts are
// refused and counted, and mirroring goes on.
func TestAuditIngressRefusesBadInput(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	ca, err := os.ReadFile(filepath.Join(env.Dir, "pki", "reverser-ca.crt"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	token := strings.TrimSpace(kubectlOK(t, admin, "", "get", "secret", "-n", "reverser-system", "audit-local", "-o",
		"jsonpath={.data.token}"))
	tokenBytes, err := base64.StdEncoding.DecodeString(token)
	require.NoError(t, err)

	post := func(url, bearer, body string) int {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	before := metric(t, `reverser_audit_requests_total{code="400",route="local"}`)
	beforeUnauth := metric(t, `reverser_audit_requests_total{code="401",route="local"}`)
	assert.Equal(t, http.StatusBadRequest, post(env.AuditWebhookURL, string(tokenBytes), "{not json"))
	assert.Equal(t, http.StatusUnauthorized, post(env.AuditWebhookURL, "", `{"kind":"EventList","items":[]}`))
	assert.Equal(t, http.StatusUnauthorized, post(env.AuditWebhookURL, "forged", `{"kind":"EventList","items":[]}`))
	assert.Equal(t, http.StatusNotFound, post(strings.Replace(env.AuditWebhookURL, "/local", "/nobody", 1), string(tokenBytes), "{}"))
	assert.Equal(t, before+1, metric(t, `reverser_audit_requests_total{code="400",route="local"}`))
	assert.Equal(t, beforeUnauth+2, metric(t, `reverser_audit_requests_total{code="401",route="local"}`))

	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "after-garbage", "--from-literal=a=1")
	f.waitFile(f.cmPath("after-garbage"), func(s string) bool { return s != "" }, "mirroring goes on")
	assert.Equal(t, []string{"alice <alice@users.reverser.invalid> | Reverser: create ConfigMap " + f.ns + "/after-garbage"},
		f.commitsTouching("after-garbage"))
}

// metric reads one sample from the controller's /metrics; 0 when absent.
func metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get(env.MetricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			_, err := fmt.Sscan(rest, &v)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}
