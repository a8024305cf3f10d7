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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/test/harness"
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

// lastAuthor is "name <email>" of the newest commit that touched path.
func (f *mirrorFixture) lastAuthor(path string) string {
	out, err := exec.Command("git", "-C", f.bare, "log", "-1", "--format=%an <%ae>", "main", "--", path).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
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
	assert.Equal(t, []string{identity.UnresolvedName + " <attribution=unresolved@users.reverser.invalid> | Reverser: create ConfigMap " +
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

	post := func(url, bearer, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(answer)
	}
	before := metric(t, `reverser_audit_requests_total{code="400",route="local"}`)
	beforeUnauth := metric(t, `reverser_audit_requests_total{code="401",route="unknown"}`)
	code, _ := post(env.AuditWebhookURL, string(tokenBytes), "{not json")
	assert.Equal(t, http.StatusBadRequest, code)
	// Every unauthenticated post gets the same answer, whether or not the
	// route exists (finding 5: 401 against 404 told which providers exist).
	code, body := post(env.AuditWebhookURL, "", `{"kind":"EventList","items":[]}`)
	assert.Equal(t, http.StatusUnauthorized, code)
	for _, attempt := range [][2]string{
		{env.AuditWebhookURL, "forged"},
		{strings.Replace(env.AuditWebhookURL, "/local", "/nobody", 1), string(tokenBytes)},
		{strings.Replace(env.AuditWebhookURL, "/local", "/nobody", 1), ""},
	} {
		c, b := post(attempt[0], attempt[1], `{"kind":"EventList","items":[]}`)
		assert.Equal(t, http.StatusUnauthorized, c, attempt[0])
		assert.Equal(t, body, b, "the same body for %s", attempt[0])
	}
	assert.Equal(t, before+1, metric(t, `reverser_audit_requests_total{code="400",route="local"}`))
	assert.Equal(t, beforeUnauth+4, metric(t, `reverser_audit_requests_total{code="401",route="unknown"}`),
		"only authenticated requests are counted under their route")

	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "after-garbage", "--from-literal=a=1")
	f.waitFile(f.cmPath("after-garbage"), func(s string) bool { return s != "" }, "mirroring goes on")
	assert.Equal(t, []string{"alice <alice@users.reverser.invalid> | Reverser: create ConfigMap " + f.ns + "/after-garbage"},
		f.commitsTouching("after-garbage"))
}

// metric reads one series from the controller's /metrics (a bare name:
// the sum of its series); 0 when absent.
func metric(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := harness.Metric(env.MetricsURL, series)
	require.True(t, ok, "the controller's /metrics answers")
	return v
}

// TestAuthorsAreExact (finding 4): a delete is attributed to whoever deleted
// that very object, not an earlier one of the same name; a no-op write
// steals nobody's edit; deletecollection and /scale are attributed; a user
// name cannot forge an author address or inject headers.
func TestAuthorsAreExact(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	present := func(string) func(string) bool { return func(s string) bool { return s != "" } }
	gone := func(s string) bool { return s == "" }

	// Same name, two lives, two deleters.
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "again", "--from-literal=a=1")
	f.waitFile(f.cmPath("again"), present("again"), "alice's create")
	kubectlOK(t, alice, "", "delete", "configmap", "-n", f.ns, "again")
	f.waitFile(f.cmPath("again"), gone, "alice's delete")
	kubectlOK(t, bob, "", "create", "configmap", "-n", f.ns, "again", "--from-literal=a=2")
	f.waitFile(f.cmPath("again"), present("again"), "bob's create")
	kubectlOK(t, bob, "", "delete", "configmap", "-n", f.ns, "again")
	f.waitFile(f.cmPath("again"), gone, "bob's delete")
	assert.Equal(t, []string{
		"alice <alice@users.reverser.invalid> | Reverser: create ConfigMap " + f.ns + "/again",
		"alice <alice@users.reverser.invalid> | Reverser: delete ConfigMap " + f.ns + "/again",
		"bob <bob@users.reverser.invalid> | Reverser: create ConfigMap " + f.ns + "/again",
		"bob <bob@users.reverser.invalid> | Reverser: delete ConfigMap " + f.ns + "/again",
	}, f.commitsTouching("again"))

	// bob repeats alice's patch right after her: his write changes nothing
	// and gets the same resourceVersion; the edit stays hers.
	kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, "noop", "--from-literal=v=1")
	f.waitFile(f.cmPath("noop"), present("noop"), "created")
	patch := `{"data":{"v":"2"}}`
	kubectlOK(t, alice, "", "patch", "configmap", "-n", f.ns, "noop", "--type=merge", "-p", patch)
	kubectlOK(t, bob, "", "patch", "configmap", "-n", f.ns, "noop", "--type=merge", "-p", patch)
	f.waitFile(f.cmPath("noop"), func(s string) bool { return strings.Contains(s, `v: "2"`) }, "the edit written")
	assert.Equal(t, "alice <alice@users.reverser.invalid> | Reverser: update ConfigMap "+f.ns+"/noop", f.commitsTouching("noop")[1])

	// deletecollection, as alice.
	for _, n := range []string{"bulk-1", "bulk-2"} {
		kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, n, "--from-literal=a=1")
		kubectlOK(t, admin, "", "label", "configmap", "-n", f.ns, n, "bulk=yes")
		f.waitFile(f.cmPath(n), present(n), n+" written")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAlice)
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	require.NoError(t, kube.CoreV1().ConfigMaps(f.ns).DeleteCollection(t.Context(), metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "bulk=yes"}))
	f.waitFile(f.cmPath("bulk-1"), gone, "bulk-1 deleted")
	f.waitFile(f.cmPath("bulk-2"), gone, "bulk-2 deleted")
	for _, n := range []string{"bulk-1", "bulk-2"} {
		assert.Equal(t, "alice <alice@users.reverser.invalid>", f.lastAuthor(f.cmPath(n)), "deletecollection is attributed")
	}

	// kubectl scale writes through the /scale subresource.
	kubectlOK(t, admin, harness.UserRole(f.ns, "scaler", "alice", `- apiGroups: [apps]
  resources: [deployments, deployments/scale]
  verbs: [get, patch, update]`), "apply", "--server-side", "-f", "-")
	createDeployment(t, f.ns)
	deployment := filepath.Join(mirrorPath, f.ns, "apps", "deployments", "web.yaml")
	f.waitFile(deployment, func(s string) bool { return s != "" }, "the Deployment written")
	kubectlOK(t, alice, "", "scale", "deployment", "-n", f.ns, "web", "--replicas=3")
	f.waitFile(deployment, func(s string) bool { return strings.Contains(s, "replicas: 3") }, "the scale written")
	log := f.authorsOf()
	assert.Equal(t, "alice <alice@users.reverser.invalid> | Reverser: update Deployment "+f.ns+"/web", log[len(log)-1])

	// A user name that looks like an address with a display name: it stays a
	// name, and its address is the mapped one, not the one it contains.
	forger := "Eve <ceo@corp.example>"
	kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, "forged", "--from-literal=a=1", "--as", forger, "--as-group", "system:masters")
	f.waitFile(f.cmPath("forged"), present("forged"), "the forger's create")
	id := identity.For(forger, "")
	assert.NotContains(t, id.Email, "ceo@corp.example")
	assert.Equal(t, id.Name+" <"+id.Email+">", f.lastAuthor(f.cmPath("forged")))
	assert.Equal(t, "Eve %3Cceo@corp.example%3E", id.Name)
}
