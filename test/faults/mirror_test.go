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
	"reflect"
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
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
	"reverser.dev/reverser/test/ledger"
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
	// row is the table's row for this mirror's fault: a poll that gives up
	// says why there.
	row *result
}

const folder = "mirror"

// The two authors of every burst: alice writes the even objects, bob the odd
// ones, so every document has one human who may be its author.
var authors = []string{controlplane.UserAlice, controlplane.UserBob}

// newMirror sets a mirror up on env; private puts the repository behind the Git
// server's basic authentication, with credentials in the Secret
// git-credentials (user m.ns, password "first").
func newMirror(t *testing.T, env *controlplane.Env, private bool, row *result) *mirror {
	t.Helper()
	m := &mirror{t: t, env: env, row: row, admin: client(t, env.KubeconfigAdmin), authors: map[string]kubernetes.Interface{
		controlplane.UserAlice: client(t, env.KubeconfigAlice), controlplane.UserBob: client(t, env.KubeconfigBob),
	}}
	m.ns = fmt.Sprintf("faults-%d-%d", time.Now().Unix()%100000, rand.IntN(1000))
	name := m.ns
	var err error
	m.bare, err = gitserver.CreateRepo(env.GitRoot, name)
	if err != nil {
		t.Fatal(err)
	}
	must(t, gitserver.RecordPushes(m.bare))
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
		m.row.note = "gave up waiting for " + what
		m.t.Fatalf("%s: %v (last error: %v)", what, err, last)
	}
}

// burst makes changes by both authors over objects ConfigMaps at a steady
// pace until ctx is done, and records each in the ledger with a value no
// other write has. Writes refused while a server is down are not retried:
// they did not happen; those whose answer was lost may have (uncertain).
func (m *mirror) burst(stop context.Context, objects int, l *ledger.Ledger) {
	// A request under way when the burst stops is finished and recorded:
	// cancelled, it might have happened unrecorded.
	ctx := context.WithoutCancel(stop)
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
				case <-stop.Done():
					return
				case <-tick.C:
				}
				name := fmt.Sprintf("cm-%03d", 2*rnd.IntN(objects/2)+a)
				e := ledger.Write{Object: name, Writer: author}
				var obj corev1.ConfigMap
				var err error
				switch {
				case !exists[name]:
					e.Value = fmt.Sprintf("%s-%d", author, i)
					var got *corev1.ConfigMap
					got, err = kube.CoreV1().ConfigMaps(m.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
						Data: map[string]string{"v": e.Value}}, metav1.CreateOptions{})
					if err == nil {
						obj = *got
					}
					if err == nil || apierrors.IsAlreadyExists(err) {
						exists[name] = true
					}
				case rnd.IntN(4) == 0:
					// A delete is answered with a Status: it has no
					// resourceVersion to record.
					err = kube.CoreV1().ConfigMaps(m.ns).Delete(ctx, name, metav1.DeleteOptions{})
					if err == nil || apierrors.IsNotFound(err) {
						exists[name] = false
					}
				default:
					e.Value = fmt.Sprintf("%s-%d", author, i)
					var got *corev1.ConfigMap
					got, err = kube.CoreV1().ConfigMaps(m.ns).Patch(ctx, name, "application/merge-patch+json",
						fmt.Appendf(nil, `{"data":{"v":%q}}`, e.Value), metav1.PatchOptions{})
					if err == nil {
						obj = *got
					}
					if apierrors.IsNotFound(err) {
						exists[name] = false
					}
				}
				e.At = time.Now()
				switch {
				case err == nil:
					e.RV, _ = strconv.ParseInt(obj.ResourceVersion, 10, 64)
					l.Add(e)
				case !apierrors.IsNotFound(err) && !apierrors.IsAlreadyExists(err):
					e.Uncertain = true
					l.Add(e)
				}
			}
		}()
	}
	wg.Wait()
}

// differences lists the documents of the folder that differ from the
// cluster (missing, different or left over), and the value (data.v) each
// object's document holds in Git.
func (m *mirror) differences() ([]string, map[string]string, error) {
	want, err := m.expectedDocs()
	if err != nil {
		return nil, nil, err
	}
	got := map[string]map[string]any{}
	final := map[string]string{}
	out, err := exec.Command("git", "-C", m.bare, "ls-tree", "-r", "--name-only", "main", "--", folder+"/").Output()
	if err == nil {
		for _, p := range strings.Fields(string(out)) {
			doc, err := docAt(m.bare, "main", p)
			if err != nil {
				return nil, nil, err
			}
			got[p] = doc
			name := strings.TrimSuffix(path.Base(p), ".yaml")
			final[name] = ledger.Foreign
			if data, ok := doc["data"].(map[string]any); ok {
				if v, ok := data["v"].(string); ok {
					final[name] = v
				}
			}
		}
	}
	var diff []string
	for p, d := range want {
		if !reflect.DeepEqual(got[p], d) {
			diff = append(diff, p)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diff = append(diff, p+" (left over)")
		}
	}
	slices.Sort(diff)
	return diff, final, nil
}

// expectedDocs are the documents the folder must hold for the cluster's
// ConfigMaps, by path. They are built here, not by the product: the object
// as the API server returns it, less the fields "What a document holds" in
// docs/layout.md says a document leaves out (dropFields).
func (m *mirror) expectedDocs() (map[string]map[string]any, error) {
	list, err := m.admin.CoreV1().ConfigMaps(m.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	want := map[string]map[string]any{}
	for i := range list.Items {
		cm := &list.Items[i]
		if cm.Name == document.RootCAConfigMap {
			continue
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
		if err != nil {
			return nil, err
		}
		obj["apiVersion"], obj["kind"] = "v1", "ConfigMap"
		for _, f := range dropFields {
			unstructured.RemoveNestedField(obj, f...)
		}
		// Through JSON, as a parsed document is: numbers and nils alike.
		data, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, err
		}
		want[path.Join(folder, m.ns, "configmaps", cm.Name+".yaml")] = doc
	}
	return want, nil
}

// docAt parses the document at p in rev of the bare repository; a file
// that does not parse is {"unparsable": its text}.
func docAt(bare, rev, p string) (map[string]any, error) {
	content, err := exec.Command("git", "-C", bare, "show", rev+":"+p).Output()
	if err != nil {
		return nil, fmt.Errorf("git show %s:%s: %w", rev, p, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(content, &doc); err != nil {
		return map[string]any{"unparsable": string(content)}, nil
	}
	return doc, nil
}

// dropFields are the fields of that list a ConfigMap of the burst can have,
// written here rather than taken from the product.
var dropFields = [][]string{
	{"status"}, {"metadata", "managedFields"}, {"metadata", "resourceVersion"}, {"metadata", "uid"}, {"metadata", "generation"},
	{"metadata", "creationTimestamp"}, {"metadata", "deletionTimestamp"}, {"metadata", "selfLink"},
	{"metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration"},
}

func (m *mirror) head() string {
	out, err := exec.Command("git", "-C", m.bare, "rev-parse", "--verify", "-q", "main").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
