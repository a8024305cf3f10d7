package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/util/workqueue"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/resolve"
	"reverser.dev/reverser/pkg/tenancy"
)

func TestBranchAllowed(t *testing.T) {
	gp := &v1.GitProvider{Spec: v1.GitProviderSpec{AllowedBranches: []string{"main", "release/*"}}}
	assert.True(t, branchAllowed(gp, "main"))
	assert.True(t, branchAllowed(gp, "release/1.0"))
	assert.False(t, branchAllowed(gp, "release/1.0/hotfix"), "a glob does not cross '/'")
	assert.False(t, branchAllowed(gp, "dev"))
	assert.True(t, branchAllowed(&v1.GitProvider{Spec: v1.GitProviderSpec{AllowedBranches: []string{"*"}}}, "a/b"))
	assert.False(t, branchAllowed(&v1.GitProvider{Spec: v1.GitProviderSpec{AllowedBranches: []string{}}}, "main"), "an empty list allows nothing")
}

func TestAsProblemKeepsReasons(t *testing.T) {
	p := asProblem(fmt.Errorf("reading: %w", problemf("SecretNotFound", "Secret a/b does not exist")), "GitUnreachable")
	assert.Equal(t, "SecretNotFound", p.reason)
	assert.False(t, p.transient, "a missing Secret stops the mirror")
	p = asProblem(errors.New("dial tcp: refused"), "GitUnreachable")
	assert.Equal(t, "GitUnreachable", p.reason)
	assert.Equal(t, "dial tcp: refused", p.message)
	assert.True(t, p.transient, "an unreachable server leaves the mirror running")
	p = asProblem(errors.New(`Get "https://tok:secret@git.example/r.git": refused`), "GitUnreachable")
	assert.NotContains(t, p.message, "secret", "URLs in messages are redacted")
}

func TestPathsOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"", "x", true},
		{"x", "x", true},
		{"x", "x/y", true},
		{"x/y", "x", true},
		{"x", "xy", false},
		{"a/b", "a/c", false},
		{"x/", "x", true},
	} {
		assert.Equal(t, tc.want, pathsOverlap(tc.a, tc.b), "%q and %q", tc.a, tc.b)
	}
}

func TestRepoIdentity(t *testing.T) {
	same := [][]string{
		{"https://git.example/org/repo.git", "https://GIT.example/org/repo", "https://git.example:443/org/repo/", "http://git.example/org/repo.git"},
		{"ssh://git@git.example/org/repo.git", "git@git.example:org/repo.git", "ssh://git.example:22/org/repo"},
		// #27 finding 8: the common hosts compare paths case-insensitively.
		{"https://git.example/Org/Repo.git", "https://git.example/org/repo", "git@git.example:ORG/repo.git"},
	}
	for _, group := range same {
		for _, u := range group[1:] {
			assert.Equal(t, repoIdentity(group[0]), repoIdentity(u), "%s and %s name one repository", group[0], u)
		}
	}
	assert.NotEqual(t, repoIdentity("https://git.example/org/repo"), repoIdentity("https://git.example/org/other"))
	assert.NotEqual(t, repoIdentity("https://git.example/org/repo"), repoIdentity("https://git.example:8443/org/repo"))
}

func TestOlder(t *testing.T) {
	t0 := metav1.Now()
	t1 := metav1.NewTime(t0.Add(time.Second))
	a := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "x", CreationTimestamp: t0}}
	b := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", CreationTimestamp: t1}}
	assert.True(t, older(a, b))
	assert.False(t, older(b, a))
	b.CreationTimestamp = t0
	assert.True(t, older(b, a), "same second: namespace/name decides")
	assert.False(t, older(a, b))
}

func TestAccepts(t *testing.T) {
	assert.False(t, accepts(nil, "crds"), "a target accepts no ClusterWatchRule unless it says so")
	assert.True(t, accepts([]string{"crds"}, "crds"))
	assert.False(t, accepts([]string{"crds"}, "roles"))
	assert.True(t, accepts([]string{"*"}, "roles"))
}

func TestRuleStatus(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	s := ruleStatus(v1.WatchRuleStatus{}, 4, resolve.Result{GVRs: []schema.GroupVersionResource{cm}}, nil)
	assert.Equal(t, int64(4), s.ObservedGeneration)
	assert.Equal(t, []string{"configmaps.v1"}, s.Resolved)
	assert.True(t, meta.IsStatusConditionTrue(s.Conditions, v1.ConditionReady))

	s = ruleStatus(s, 5, resolve.Result{GVRs: []schema.GroupVersionResource{cm}, Unresolved: []string{"widgets.v1 is not served"}}, nil)
	c := meta.FindStatusCondition(s.Conditions, v1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, "Unresolved", c.Reason)
	assert.Contains(t, c.Message, "widgets.v1 is not served")
	assert.Contains(t, c.Message, "The rest is mirrored")
}

func TestRuleStatusDenied(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	s := ruleStatus(v1.WatchRuleStatus{}, 1, resolve.Result{GVRs: []schema.GroupVersionResource{cm}}, nil)
	s = ruleStatus(s, 1, resolve.Result{}, problemf("NotAuthorized", "user \"bob\" may not read"))
	c := meta.FindStatusCondition(s.Conditions, v1.ConditionReady)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, "NotAuthorized", c.Reason)
	assert.Empty(t, s.Resolved, "a refused rule mirrors nothing")
}

// allowAlice is an authorizer that allows alice what it lists.
func allowAlice(allowed ...tenancy.Access) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		acc := tenancy.Access{Verb: a.GetVerb(), Group: a.GetAPIGroup(), Resource: a.GetResource(), Namespace: a.GetNamespace()}
		if a.GetUser().GetName() == "alice" && slices.Contains(allowed, acc) {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

func TestAuthorizedRechecksTheRulesAuthor(t *testing.T) {
	cm := []schema.GroupVersionResource{{Version: "v1", Resource: "configmaps"}}
	authz := allowAlice(tenancy.Access{Verb: "list", Resource: "configmaps", Namespace: "team"},
		tenancy.Access{Verb: "watch", Resource: "configmaps", Namespace: "team"})
	c := &Controller{cfg: Config{Authorizer: authz}}
	local := &v1.KubeProvider{Spec: v1.KubeProviderSpec{InCluster: true}}
	remote := &v1.KubeProvider{Spec: v1.KubeProviderSpec{KubeConfigSecretRef: &v1.SecretKeyReference{Name: "k"}}}
	alice, bob := &v1.Author{Username: "alice"}, &v1.Author{Username: "bob"}

	for _, tc := range []struct {
		name   string
		kp     *v1.KubeProvider
		by     *v1.Author
		ns     string
		reason string
	}{
		{"author may read", local, alice, "team", ""},
		{"author may not read there", local, alice, "kube-system", "NotAuthorized"},
		{"another author", local, bob, "team", "NotAuthorized"},
		{"no recorded author", local, nil, "team", "NotAuthorized"},
		{"remote: lending decides", remote, bob, "kube-system", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := c.authorized(context.Background(), tc.kp, tc.by, cm, tc.ns)
			require.NoError(t, err)
			if tc.reason == "" {
				assert.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			assert.Equal(t, tc.reason, p.reason)
			assert.False(t, p.transient)
		})
	}
	p, err := c.authorized(context.Background(), local, bob, cm, "team")
	require.NoError(t, err)
	assert.Contains(t, p.message, `user "bob" may not read what the rule selects: it lacks list configmaps in namespace team, watch configmaps in namespace team`)
}

// TestWorkersAreReferenceCounted (issue 10, finding 4): a worker lives as
// long as something uses it, and each GitProvider has its own.
func TestWorkersAreReferenceCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(queue.ShutDown)
	statuses := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(statuses.ShutDown)
	c := &Controller{cfg: Config{DataDir: t.TempDir()}, ctx: ctx, queue: queue, statusQueue: statuses, reports: map[string]*report{}}
	c.workers = newWorkers(c.cfg.DataDir, nil, reporter{c}, nil)
	c.workers.run(ctx)
	gp := &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "repo"},
		Spec: v1.GitProviderSpec{URL: "http://127.0.0.1:1/shared.git"}}
	w1, key, err := c.worker(ctx, gp, "main", nil, "", nil, "")
	require.NoError(t, err)
	w2, _, err := c.worker(ctx, gp, "main", nil, "", nil, "")
	require.NoError(t, err)
	assert.Same(t, w1, w2, "one worker per GitProvider and branch")

	other := gp.DeepCopy()
	other.Namespace = "team-b"
	w3, otherKey, err := c.worker(ctx, other, "main", nil, "", nil, "")
	require.NoError(t, err)
	assert.NotSame(t, w1, w3, "another GitProvider of the same repository gets its own worker, with its own credentials")
	c.release(otherKey)

	rw := c.workers.get(key)
	dir := c.workers.repoDir(key)
	require.DirExists(t, dir, "the worker's local repository")
	c.release(key)
	assert.NotNil(t, c.workers.get(key), "still used once")
	assert.DirExists(t, dir, "the clone stays while a worker uses it")
	c.release(key)
	assert.Nil(t, c.workers.get(key), "the last release closes it")
	select {
	case <-rw.stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the closed worker did not stop")
	}
	require.Eventually(t, func() bool {
		return c.workers.retiring() == 0
	}, 30*time.Second, 10*time.Millisecond, "stopped workers are forgotten")
	assert.NoDirExists(t, dir, "the clone of a branch nothing mirrors any more is removed")
}

// TestRulesAreCheckedSideBySide: a GitTarget's rules are checked ruleChecks
// at a time, not one after another (each check may wait for the API
// server's answers), never more, and the results keep the rules' order.
func TestRulesAreCheckedSideBySide(t *testing.T) {
	rules := make([]int, 5*ruleChecks)
	for i := range rules {
		rules[i] = i
	}
	var inFlight, most atomic.Int32
	together := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithTimeout(t.Context(), wait.ForeverTestTimeout)
	defer cancel()
	out, err := checkRules(ctx, rules, func(ctx context.Context, r int) (checkedRule, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n == ruleChecks {
			once.Do(func() { close(together) })
		}
		select { // only checks made side by side get past this
		case <-together:
		case <-ctx.Done():
			return checkedRule{}, ctx.Err()
		}
		return checkedRule{ns: fmt.Sprint(r)}, nil
	})
	require.NoError(t, err)
	assert.Equal(t, int32(ruleChecks), most.Load())
	for i, r := range out {
		assert.Equal(t, fmt.Sprint(i), r.ns)
	}

	_, err = checkRules(ctx, rules, func(_ context.Context, r int) (checkedRule, error) {
		if r == 7 {
			return checkedRule{}, errors.New("the API server is down")
		}
		return checkedRule{}, nil
	})
	assert.EqualError(t, err, "the API server is down")
}

// Feature R1: the namespace a folder is applied into comes from the
// claimed applier, else the GitTarget, else the rules' one namespace.
func TestTargetNamespace(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ns := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	one := []document.Scope{{GVR: cm, Namespace: "shop"}, {GVR: ns}}
	two := []document.Scope{{GVR: cm, Namespace: "shop"}, {GVR: cm, Namespace: "blog"}}
	all := []document.Scope{{GVR: cm, Namespace: "*"}}
	for _, tc := range []struct {
		name, appliedInto, spec string
		scopes                  []document.Scope
		want                    string
	}{
		{"the applier's first", "apps", "web", one, "apps"},
		{"then the GitTarget's", "", "web", one, "web"},
		{"then the rules' one namespace, cluster scopes aside", "", "", one, "shop"},
		{"rules over two namespaces tell none", "", "", two, ""},
		{"rules over every namespace tell none", "", "", all, ""},
		{"cluster scopes only tell none", "", "", []document.Scope{{GVR: ns}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, targetNamespace(tc.appliedInto, tc.spec, tc.scopes))
		})
	}
}

// TestTheSecretsOfAGitProviderAreRecheckedForItsAuthor (#27, finding 4):
// on every reconcile the GitProvider's status.authorizedBy must still get
// each Secret it names; otherwise the mirror stops, naming the Secret.
func TestTheSecretsOfAGitProviderAreRecheckedForItsAuthor(t *testing.T) {
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "alice" && a.GetVerb() == "get" && a.GetResource() == "secrets" && a.GetNamespace() == "team" &&
			a.GetName() == "git-creds" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	c := &Controller{cfg: Config{Authorizer: authz}}
	gp := func(secret string, by *v1.Author) *v1.GitProvider {
		return &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: "team"},
			Spec:   v1.GitProviderSpec{SecretRef: &v1.LocalObjectReference{Name: secret}},
			Status: v1.GitProviderStatus{AuthorizedBy: by}}
	}
	alice, bob := &v1.Author{Username: "alice"}, &v1.Author{Username: "bob"}
	assert.Nil(t, c.secretsAuthorized(context.Background(), gp("git-creds", alice)))
	assert.Nil(t, c.secretsAuthorized(context.Background(), &v1.GitProvider{}), "no Secret named")
	for _, g := range []*v1.GitProvider{gp("git-creds", bob), gp("db-creds", alice), gp("git-creds", nil)} {
		p := c.secretsAuthorized(context.Background(), g)
		require.NotNil(t, p)
		assert.Equal(t, "SecretNotAuthorized", p.reason)
		assert.False(t, p.transient, "the mirror stops")
	}
	assert.Contains(t, c.secretsAuthorized(context.Background(), gp("db-creds", alice)).message,
		`user "alice" may not have Reverser use these Secrets: it lacks get secrets team/db-creds`)
}
