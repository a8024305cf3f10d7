package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// mirror is one GitTarget mirroring the ConfigMaps of a fresh namespace into
// the folder "mirror" of a fresh repository.
type mirror struct {
	t         *testing.T
	env       *controlplane.Env
	ns        string
	url, bare string
	admin     kubernetes.Interface
	authors   map[string]kubernetes.Interface
}

const folder = "mirror"

// The two authors of every burst: alice writes the even objects, bob the odd
// ones, so every document has one human who may be its author.
var authors = []string{controlplane.UserAlice, controlplane.UserBob}

// newMirror sets a mirror up on env; private puts the repository behind the Git
// server's basic authentication, with credentials in the Secret
// git-credentials (user m.ns, password "first").
func newMirror(t *testing.T, env *controlplane.Env, private bool) *mirror {
	t.Helper()
	m := &mirror{t: t, env: env, admin: client(t, env.KubeconfigAdmin), authors: map[string]kubernetes.Interface{
		controlplane.UserAlice: client(t, env.KubeconfigAlice), controlplane.UserBob: client(t, env.KubeconfigBob),
	}}
	m.ns = fmt.Sprintf("faults-%d-%d", time.Now().Unix()%100000, rand.IntN(1000))
	name := m.ns
	var err error
	m.bare, err = gitserver.CreateRepo(env.GitRoot, name)
	if err != nil {
		t.Fatal(err)
	}
	m.url = env.GitBaseURL + "/" + name + ".git"
	url, providerSpec := m.url, ""
	if private {
		url = strings.Replace(m.url, gitserver.PathPrefix+"/", gitserver.PrivatePrefix+"/", 1)
		providerSpec = "  secretRef: {name: git-credentials}\n  allowInsecureHTTP: true"
		m.setCredential(t, m.ns, "first", "")
	}
	m.kubectl(harness.Docs(harness.Namespace(m.ns), harness.AuditedKubeProvider("local"),
		harness.GitProvider(m.ns, "repo", url, providerSpec),
		fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: git-credentials, namespace: %[1]s}\nstringData: {username: %[1]s, password: first}\n", m.ns),
		harness.GitTarget(harness.Target{Namespace: m.ns, KubeProvider: "local", Path: folder, Silence: "200ms", MaxAge: "1s"}),
		harness.WatchRule(m.ns, "configmaps", "site", harness.ConfigMapRules)), "apply", "--server-side", "-f", "-")
	t.Cleanup(func() {
		_ = m.admin.CoreV1().Namespaces().Delete(context.Background(), m.ns, metav1.DeleteOptions{})
	})
	m.poll(time.Minute, "the GitTarget Ready", func() (bool, error) {
		out, err := m.kubectlOut("", "get", "gittarget", "-n", m.ns, "site", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return strings.TrimSpace(out) == "True", err
	})
	return m
}

// setCredential lets user in with password on the Git server's private
// path and, when old is set, no longer with old.
func (m *mirror) setCredential(t *testing.T, user, password, old string) {
	t.Helper()
	file := filepath.Join(m.env.GitRoot, gitserver.CredentialsFile)
	data, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "" && (old == "" || l != user+":"+old) {
			lines = append(lines, l)
		}
	}
	lines = append(lines, user+":"+password)
	must(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
}

func (m *mirror) kubectl(stdin string, args ...string) {
	m.t.Helper()
	if out, err := m.kubectlOut(stdin, args...); err != nil {
		m.t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (m *mirror) kubectlOut(stdin string, args ...string) (string, error) {
	return harness.Kubectl(m.env.KubeconfigAdmin, stdin, args...)
}

// pollCondition waits until the GitTarget's condition typ has status and
// reason and its message names what is wrong: status tells the truth during
// a fault.
func (m *mirror) pollCondition(typ, status, reason, inMessage string) {
	m.t.Helper()
	var last string
	m.poll(2*time.Minute, fmt.Sprintf("GitTarget condition %s=%s %s naming %q", typ, status, reason, inMessage), func() (bool, error) {
		out, err := m.kubectlOut("", "get", "gittarget", "-n", m.ns, "site", "-o",
			fmt.Sprintf(`jsonpath={.status.conditions[?(@.type==%q)]}`, typ))
		if err != nil {
			return false, err
		}
		var c metav1.Condition
		if err := json.Unmarshal([]byte(out), &c); err != nil {
			return false, fmt.Errorf("%w: %s", err, out)
		}
		last = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		ok := string(c.Status) == status && c.Reason == reason && strings.Contains(c.Message, inMessage)
		if !ok {
			return false, fmt.Errorf("the condition says %s", last)
		}
		return true, nil
	})
}

// poll waits for cond with a deadline.
func (m *mirror) poll(timeout time.Duration, what string, cond func() (bool, error)) {
	m.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok, nil
	})
	if err != nil {
		m.t.Fatalf("%s: %v (last error: %v)", what, err, last)
	}
}

// write is one successful change a burst made.
type write struct {
	author string
	name   string
}

// burst makes changes by both authors over objects ConfigMaps at a steady
// pace until ctx is done, and records those that succeeded in made. Writes
// refused while a server is down are not retried: they did not happen.
func (m *mirror) burst(ctx context.Context, objects int, made *countingWrites) {
	var wg sync.WaitGroup
	for a, author := range authors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kube := m.authors[author]
			exists := map[string]bool{}
			rnd := rand.New(rand.NewPCG(uint64(a), uint64(time.Now().UnixNano())))
			tick := time.NewTicker(25 * time.Millisecond) // a steady rate, not a wait for state
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				name := fmt.Sprintf("cm-%03d", 2*rnd.IntN(objects/2)+a)
				cms := kube.CoreV1().ConfigMaps(m.ns)
				var err error
				switch {
				case !exists[name]:
					_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
						Data: map[string]string{"v": author + "-" + strconv.Itoa(i)}}, metav1.CreateOptions{})
					if err == nil || apierrors.IsAlreadyExists(err) {
						exists[name] = true
					}
				case rnd.IntN(4) == 0:
					err = cms.Delete(ctx, name, metav1.DeleteOptions{})
					if err == nil || apierrors.IsNotFound(err) {
						exists[name] = false
					}
				default:
					_, err = cms.Patch(ctx, name, "application/merge-patch+json",
						fmt.Appendf(nil, `{"data":{"v":%q}}`, author+"-"+strconv.Itoa(i)), metav1.PatchOptions{})
					if apierrors.IsNotFound(err) {
						exists[name] = false
					}
				}
				if err == nil {
					made.add(write{author: author, name: name})
				}
			}
		}()
	}
	wg.Wait()
}

// countingWrites collects the writes of a burst, safe for its goroutines.
type countingWrites struct {
	mu     sync.Mutex
	writes []write
}

func (c *countingWrites) add(w write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, w)
}

func (c *countingWrites) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.writes)
}

var configMaps = schema.GroupResource{Resource: "configmaps"}

// differences lists the documents of the folder that differ from the
// cluster: missing, different or left over.
func (m *mirror) differences() ([]string, error) {
	list, err := m.admin.CoreV1().ConfigMaps(m.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	want := map[string]string{}
	for i := range list.Items {
		cm := &list.Items[i]
		if cm.Name == document.RootCAConfigMap {
			continue
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		doc, err := document.Sanitize(configMaps, u)
		if err != nil {
			return nil, err
		}
		want[path.Join(folder, m.ns, "configmaps", cm.Name+".yaml")] = string(doc)
	}
	got := map[string]string{}
	out, err := exec.Command("git", "-C", m.bare, "ls-tree", "-r", "--name-only", "main", "--", folder+"/").Output()
	if err == nil {
		for _, p := range strings.Fields(string(out)) {
			content, err := exec.Command("git", "-C", m.bare, "show", "main:"+p).Output()
			if err != nil {
				return nil, err
			}
			got[p] = string(content)
		}
	}
	var diff []string
	for p, c := range want {
		if got[p] != c {
			diff = append(diff, p)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diff = append(diff, p+" (left over)")
		}
	}
	slices.Sort(diff)
	return diff, nil
}

// commit is one commit of the branch.
type commit struct {
	sha, author, trailer string
	paths                []string
}

// commitsSince lists the branch's commits after base ("" for all), oldest
// first, with the paths each changes.
func (m *mirror) commitsSince(base string) []commit {
	rng := "main"
	if base != "" {
		rng = base + "..main"
	}
	out, err := exec.Command("git", "-C", m.bare, "log", "--reverse", "--format=%x00%H%x1f%an%x1f%(trailers:key=Reverser-Commit-Request,valueonly)",
		"--name-only", "--no-renames", rng).Output()
	if err != nil {
		return nil
	}
	var commits []commit
	for _, rec := range strings.Split(string(out), "\x00") {
		rec = strings.TrimSpace(rec)
		if rec == "" {
			continue
		}
		head, files, _ := strings.Cut(rec, "\n")
		parts := strings.SplitN(head, "\x1f", 3)
		for len(parts) < 3 {
			parts = append(parts, "")
		}
		commits = append(commits, commit{sha: parts[0], author: parts[1], trailer: strings.TrimSpace(parts[2]), paths: strings.Fields(files)})
	}
	return commits
}

func (m *mirror) head() string {
	out, err := exec.Command("git", "-C", m.bare, "rev-parse", "--verify", "-q", "main").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// check counts what the invariant forbids among the commits since base: a
// commit that changes nothing or a save committed twice (duplicates), and a
// document credited to a human who did not write that object
// (misattributed). The committer, and the unresolved author, are never
// wrong: they say Reverser re-asserted the cluster's state, or that no fact
// was to be had.
func (m *mirror) check(base string) (commits, byPeople int, duplicates, wrong []string) {
	seen := map[string]bool{}
	for _, c := range m.commitsSince(base) {
		commits++
		if len(c.paths) == 0 && c.trailer == "" {
			duplicates = append(duplicates, c.sha[:7]+" changes nothing")
		}
		if c.trailer != "" {
			if seen[c.trailer] {
				duplicates = append(duplicates, c.sha[:7]+" saves "+c.trailer+" again")
			}
			seen[c.trailer] = true
		}
		if c.author == "Reverser" || c.author == identity.UnresolvedName || c.author == foreignAuthor {
			continue // re-asserted state, no fact to be had, or the fault itself
		}
		byPeople++
		for _, p := range c.paths {
			if owner := ownerOf(p); owner != "" && owner != c.author {
				wrong = append(wrong, fmt.Sprintf("%s by %s in %s", path.Base(p), c.author, c.sha[:7]))
			}
		}
	}
	return commits, byPeople, duplicates, wrong
}

// ownerOf is the author who writes the object of a document: alice the even
// ones, bob the odd ones.
func ownerOf(p string) string {
	name := strings.TrimSuffix(path.Base(p), ".yaml")
	n, err := strconv.Atoi(strings.TrimPrefix(name, "cm-"))
	if err != nil {
		return ""
	}
	return authors[n%2]
}
