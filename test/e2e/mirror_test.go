package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// mirrorFixture is one GitTarget mirroring a fresh namespace into a fresh
// repository, with a short commit window.
type mirrorFixture struct {
	t      *testing.T
	ns     string
	url    string
	bare   string
	target string
	// flux is the Kustomization a seed had Flux apply with; empty without.
	flux string
}

const mirrorPath = "mirror"

func newMirror(t *testing.T, rules string, extraSpec string) *mirrorFixture {
	t.Helper()
	f := newMirrorWith(t, mirrorOptions{rules: rules, targetSpec: extraSpec})
	f.waitReady()
	return f
}

type mirrorOptions struct {
	rules, targetSpec string
	// providerSpec is added to the GitProvider's spec.
	providerSpec string
	// private uses the Git server's password-protected path.
	private bool
	// kubeProvider replaces the audited "local" provider by another inCluster
	// one whose audit route never receives events.
	kubeProvider string
	// targetSpec may say ${NAMESPACE} for the namespace mirrored.
	// seed, when set, runs before the GitTarget exists: the repository
	// and the cluster people had before Reverser.
	seed func(f *mirrorFixture)
	// remote, when set, is the GitProvider's URL of the repository name
	// (another transport than the Git server's HTTP).
	remote func(name string) string
	// provider, when set, is a KubeProvider the test made (a source
	// cluster's): the GitTarget mirrors through it and none is applied.
	provider string
	// path is the GitTarget's folder, mirrorPath when empty.
	path string
}

// newMirrorWith applies a mirror without waiting for it to be Ready.
func newMirrorWith(t *testing.T, o mirrorOptions) *mirrorFixture {
	t.Helper()
	rules, extraSpec, providerSpec, private := o.rules, o.targetSpec, o.providerSpec, o.private
	kubeProvider := "local"
	if o.kubeProvider != "" {
		kubeProvider = o.kubeProvider
	}
	ns := namespace(t, "mirror")
	name := uniqueName("repo")
	bare, err := gitserver.CreateRepo(env.GitRoot, name)
	require.NoError(t, err)
	f := &mirrorFixture{t: t, ns: ns, url: env.GitBaseURL + "/" + name + ".git", bare: bare, target: "site"}
	if o.seed != nil {
		o.seed(f)
	}
	url := f.url
	if o.remote != nil {
		url = o.remote(name)
	}
	if private {
		url = strings.Replace(url, gitserver.PathPrefix+"/", gitserver.PrivatePrefix+"/", 1)
	}
	extraSpec = strings.ReplaceAll(extraSpec, "${NAMESPACE}", ns)
	targetPath := mirrorPath
	if o.path != "" {
		targetPath = o.path
	}
	provider := harness.AuditedKubeProvider(kubeProvider)
	if o.provider != "" {
		kubeProvider, provider = o.provider, ""
	}
	kubectlOK(t, admin, harness.Docs(provider,
		harness.GitProvider(ns, "repo", url, providerSpec),
		harness.GitTarget(harness.Target{Namespace: ns, KubeProvider: kubeProvider, Path: targetPath, Silence: "200ms", MaxAge: "5s", Spec: extraSpec}),
		harness.WatchRule(ns, "rules", "site", "  rules:\n"+rules)), "apply", "--server-side", "-f", "-")
	return f
}

func (f *mirrorFixture) gitTarget() v1.GitTarget {
	var gt v1.GitTarget
	getJSON(f.t, admin, &gt, "gittarget", "-n", f.ns, f.target)
	return gt
}

func (f *mirrorFixture) waitReady() {
	f.t.Helper()
	eventually(f.t, 60*time.Second, "GitTarget Ready", func() (bool, error) {
		out, err := kubectl(admin, "", "get", "gittarget", "-n", f.ns, f.target, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status}{"\n"}{.status.conditions}`)
		status, rest, _ := strings.Cut(out, "\n")
		if err == nil && status != "True" {
			// Says why in the failure, as the user would read it.
			err = fmt.Errorf("Ready is %q: %s", status, rest)
		}
		return status == "True", err
	})
}

// file reads a file of the remote main branch; "" when absent.
func (f *mirrorFixture) file(p string) string {
	out, err := exec.Command("git", "-C", f.bare, "show", "main:"+p).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

func (f *mirrorFixture) files() []string {
	out, err := exec.Command("git", "-C", f.bare, "ls-tree", "-r", "--name-only", "main").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

func (f *mirrorFixture) subjects() []string {
	out, err := exec.Command("git", "-C", f.bare, "log", "--format=%s", "main").Output()
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func (f *mirrorFixture) waitFile(p string, want func(string) bool, what string) {
	f.t.Helper()
	eventually(f.t, 30*time.Second, what, func() (bool, error) { return want(f.file(p)), nil })
}

// barrier makes an edit and waits for its commit: every change the worker
// received before it has been committed by then.
func (f *mirrorFixture) barrier() {
	f.t.Helper()
	marker := uniqueName("barrier")
	kubectlOK(f.t, admin, "", "create", "configmap", "-n", f.ns, marker, "--from-literal=at=now")
	f.waitFile(f.cmPath(marker), func(s string) bool { return s != "" }, "barrier "+marker+" committed")
}

func (f *mirrorFixture) cmPath(name string) string {
	return filepath.Join(mirrorPath, f.ns, "configmaps", name+".yaml")
}

const configMapRule = `  - apiGroups: [""]
    resources: [configmaps, secrets]
  - apiGroups: [apps]
    resources: [deployments]`

func TestMirrorConfigMapLifecycle(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	p := f.cmPath("app")
	kubectlOK(t, alice, "", "create", "configmap", "-n", f.ns, "app", "--from-literal=color=blue")
	f.waitFile(p, func(s string) bool { return s != "" }, "create written")
	assert.Equal(t, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: %s\ndata:\n  color: blue\n", f.ns), f.file(p))

	kubectlOK(t, alice, "", "patch", "configmap", "-n", f.ns, "app", "--type=merge", "-p", `{"data":{"color":"green"}}`)
	f.waitFile(p, func(s string) bool { return strings.Contains(s, "color: green") }, "update written")
	assert.Equal(t, "Reverser: update ConfigMap "+f.ns+"/app", f.subjects()[0])

	kubectlOK(t, alice, "", "delete", "configmap", "-n", f.ns, "app")
	f.waitFile(p, func(s string) bool { return s == "" }, "delete written")
	assert.Equal(t, "Reverser: delete ConfigMap "+f.ns+"/app", f.subjects()[0])

	// The cluster's own ConfigMap never appears, nor does a Secret.
	const password = "e2e-lifecycle-hunter2"
	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", f.ns, "password", "--from-literal=p="+password)
	f.barrier()
	for _, file := range f.files() {
		assert.NotContains(t, file, "kube-root-ca.crt")
		assert.NotContains(t, file, "secrets/")
	}
	// The status follows the worker's reports a moment later.
	var gt v1.GitTarget
	eventually(t, 30*time.Second, "the GitTarget reports its commits and streams", func() (bool, error) {
		gt = f.gitTarget()
		return gt.Status.LastCommit != nil && gt.Status.LastPush != nil && gt.Status.Streams.Running == 3, nil
	})
	assert.Equal(t, v1.StreamCounts{Desired: 3, Running: 3}, gt.Status.Streams)
	assert.Contains(t, conditionMessage(gt.Status.Conditions, v1.ConditionStreamsRunning), "Secrets are not written")
	noPlaintext(t, f, password)
}

func conditionMessage(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return c.Message
	}
	return ""
}

func TestMirrorIgnoresStatusChurn(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	createDeployment(t, f.ns)
	p := filepath.Join(mirrorPath, f.ns, "apps", "deployments", "web.yaml")
	f.waitFile(p, func(s string) bool { return s != "" }, "deployment written")
	// kube-controller-manager now writes the Deployment's status, more than once.
	waitDeploymentStatus(t, f.ns)
	f.barrier()
	deploymentCommits := 0
	for _, s := range f.subjects() {
		if strings.Contains(s, "Deployment") {
			deploymentCommits++
		}
	}
	assert.Equal(t, 1, deploymentCommits, "status updates commit nothing: %v", f.subjects())
	assert.NotContains(t, f.file(p), "status:")
	assert.NotContains(t, f.file(p), "resourceVersion")

	kubectlOK(t, admin, "", "scale", "deployment", "-n", f.ns, "web", "--replicas=3")
	f.waitFile(p, func(s string) bool { return strings.Contains(s, "replicas: 3") }, "scale written")
	assert.Equal(t, "Reverser: update Deployment "+f.ns+"/web", f.subjects()[0])
	kubectlOK(t, admin, "", "delete", "deployment", "-n", f.ns, "web")
	f.waitFile(p, func(s string) bool { return s == "" }, "delete written")
}

func TestMirrorClusterScoped(t *testing.T) {
	f := newMirror(t, configMapRule, "  acceptClusterWatchRules: [\"*\"]")
	role := uniqueName("e2e-viewer")
	kubectlOK(t, admin, fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: ClusterWatchRule
metadata: {name: %[1]s}
spec:
  gitTargetRef: {namespace: %[2]s, name: site}
  rules:
  - apiGroups: [rbac.authorization.k8s.io]
    resources: [clusterroles]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]s}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
`, role, f.ns), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "clusterwatchrule,clusterrole", role) })
	p := filepath.Join(mirrorPath, "_cluster", "rbac.authorization.k8s.io", "clusterroles", role+".yaml")
	f.waitFile(p, func(s string) bool { return strings.Contains(s, "kind: ClusterRole") }, "cluster-scoped object under _cluster")
}

// TestMirrorKeepsForeignCommits: a commit pushed by somebody else meanwhile
// is kept, and Reverser's commits land on top of it.
func TestMirrorKeepsForeignCommits(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, "first", "--from-literal=a=1")
	f.waitFile(f.cmPath("first"), func(s string) bool { return s != "" }, "first written")

	work := t.TempDir()
	git(t, work, "clone", "--quiet", f.url, "w")
	clone := filepath.Join(work, "w")
	require.NoError(t, os.WriteFile(filepath.Join(clone, "README.md"), []byte("Written by hand\n"), 0o644))
	git(t, clone, "add", ".")
	git(t, clone, "commit", "--quiet", "-m", "A foreign commit")
	git(t, clone, "push", "--quiet", "origin", "main")

	kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, "second", "--from-literal=b=2")
	f.waitFile(f.cmPath("second"), func(s string) bool { return s != "" }, "second written on top of the foreign commit")
	assert.Equal(t, "Written by hand\n", f.file("README.md"))
	assert.Contains(t, f.subjects(), "A foreign commit")
}

// TestMirrorRecoversFromAKilledController: SIGKILL during a burst, deletes
// while it is down; after a restart Git equals the cluster.
func TestMirrorRecoversFromAKilledController(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	for i := range 5 {
		kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, fmt.Sprintf("keep-%d", i), "--from-literal=i=x")
	}
	f.waitFile(f.cmPath("keep-4"), func(s string) bool { return s != "" }, "initial objects written")

	// A burst, and the controller dies in the middle of it.
	for i := range 10 {
		kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, fmt.Sprintf("burst-%d", i), "--from-literal=i=x")
	}
	require.NoError(t, controlplane.Kill(env, "reverser-controller"))
	kubectlOK(t, admin, "", "delete", "configmap", "-n", f.ns, "keep-0", "keep-1")
	kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, "while-down", "--from-literal=i=x")
	require.NoError(t, controlplane.Restart(env, "reverser-controller"))

	want := func() []string {
		out := kubectlOK(t, admin, "", "get", "configmaps", "-n", f.ns, "-o", "name")
		var names []string
		for _, n := range strings.Fields(out) {
			name := strings.TrimPrefix(n, "configmap/")
			if name != "kube-root-ca.crt" {
				names = append(names, f.cmPath(name))
			}
		}
		return names
	}
	eventually(t, 60*time.Second, "Git equals the cluster after the restart", func() (bool, error) {
		var got []string
		for _, file := range f.files() {
			if strings.HasPrefix(file, filepath.Join(mirrorPath, f.ns, "configmaps")+"/") {
				got = append(got, file)
			}
		}
		return assert.ObjectsAreEqual(slices.Sorted(slices.Values(want())), slices.Sorted(slices.Values(got))), nil
	})
}

// TestMirrorPicksUpACRDInstalledLater: a rule naming a type nobody serves is
// reported, and mirrored once its CRD is installed.
func TestMirrorPicksUpACRDInstalledLater(t *testing.T) {
	group := uniqueName("e2e") + ".example.com"
	f := newMirror(t, configMapRule+fmt.Sprintf(`
  - apiGroups: [%s]
    resources: [widgets]`, group), "")
	eventually(t, 30*time.Second, "the WatchRule reports the unknown type", func() (bool, error) {
		var wr v1.WatchRule
		getJSON(t, admin, &wr, "watchrule", "-n", f.ns, "rules")
		return len(wr.Status.Unresolved) == 1 && strings.Contains(wr.Status.Unresolved[0], group), nil
	})
	crd := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.%[1]s}
spec:
  group: %[1]s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, group)
	kubectlOK(t, admin, crd, "apply", "--server-side", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin, "", "delete", "crd", "widgets."+group) })
	eventually(t, 30*time.Second, "the CRD is served", func() (bool, error) {
		_, err := kubectl(admin, "", "get", "widgets."+group, "-n", f.ns)
		return err == nil, nil
	})
	kubectlOK(t, admin, fmt.Sprintf("apiVersion: %s/v1\nkind: Widget\nmetadata: {name: w1, namespace: %s}\nspec: {size: 3}\n", group, f.ns),
		"apply", "--server-side", "-f", "-")
	p := filepath.Join(mirrorPath, f.ns, group, "widgets", "w1.yaml")
	// Rules are resolved again on every resync (30s).
	eventually(t, 90*time.Second, "the widget is mirrored", func() (bool, error) { return strings.Contains(f.file(p), "size: 3"), nil })
}

// TestMirrorGitCredentials: a refused password shows in GitReachable with
// the remote's answer; rotating the Secret recovers without a restart.
func TestMirrorGitCredentials(t *testing.T) {
	user := uniqueName("robot")
	creds, err := os.OpenFile(filepath.Join(env.GitRoot, gitserver.CredentialsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	wrong, right := "e2e-wrong-password-"+user, "e2e-right-password-"+user
	_, err = fmt.Fprintf(creds, "%s:%s\n", user, right)
	require.NoError(t, err)
	require.NoError(t, creds.Close())

	f := newMirrorWith(t, mirrorOptions{rules: configMapRule, providerSpec: "  secretRef: {name: git-credentials}\n  allowInsecureHTTP: true", private: true})
	kubectlOK(t, admin, "", "create", "secret", "generic", "-n", f.ns, "git-credentials",
		"--from-literal=username="+user, "--from-literal=password="+wrong)
	kubectlOK(t, admin, "", "create", "configmap", "-n", f.ns, "app", "--from-literal=a=1")
	eventually(t, 60*time.Second, "GitReachable is False with the remote's answer", func() (bool, error) {
		gt := f.gitTarget()
		c := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionGitReachable)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "authentication"), nil
	})
	assert.Empty(t, f.files(), "nothing was pushed with a wrong password")

	out := kubectlOK(t, admin, "", "create", "secret", "generic", "-n", f.ns, "git-credentials", "--dry-run=client", "-o", "yaml",
		"--from-literal=username="+user, "--from-literal=password="+right)
	kubectlOK(t, admin, out, "apply", "-f", "-")
	// The rotation is seen on the next reconcile (at most --resync later).
	f.waitFile(f.cmPath("app"), func(s string) bool { return s != "" }, "pushed once the Secret holds the right password")
	f.waitReady()
	noPlaintext(t, f, wrong, right)
}

// TestADeletedGitTargetStopsItsInformers: deleting a GitTarget tears its
// mirror down at once: its informers stop. They ran on, and its worker
// with them, until a rule of its namespace changed, because a delete only
// reconciled the GitTargets that remained.
func TestADeletedGitTargetStopsItsInformers(t *testing.T) {
	f := newMirror(t, configMapRule, "")
	during := metric(t, "reverser_informers")
	require.Positive(t, during)
	kubectlOK(t, admin, "", "delete", "gittarget", "-n", f.ns, "--all", "--wait=true")
	eventually(t, 30*time.Second, "the deleted GitTarget's informers stop, its rules still there", func() (bool, error) {
		now := metric(t, "reverser_informers")
		return now < during, fmt.Errorf("%v informers, %v while it mirrored", now, during)
	})
}
