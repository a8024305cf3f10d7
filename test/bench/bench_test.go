//go:build bench

// Package bench measures the mirror on the real control plane and prints
// each figure next to a floor measured in the same run, as a ratio:
//
//	P1  snapshot of N ConfigMaps until pushed      vs  git CLI add+commit+push of the same files
//	P2  one edit until its commit is pushed        vs  a bare client-go watch seeing the edit
//	P3  500 edits/s for 60 s over 1k objects       vs  the same watch seeing the last edit; Git must end equal to the cluster
//	    the same by four users, audit route on       vs  the same watch; every commit's author checked against a ledger
//	P4  edit + CommitRequest until Committed       vs  the same edit committed without a request
//	    a save's push until Applied=True (Flux)    vs  Flux applying a pushed commit when asked directly
//	P5  one commit as the folder grows 1k → 10k    vs  the git CLI's one-file commit+push at each size
//	P6  create and list 500 objects of our API     vs  the same objects as a CRD on the same kube-apiserver
//	    200 GitTargets × 50 objects, per target    vs  the git CLI pushing each folder
//	    one edit until pushed, kustomized folder   vs  the same edit among as many objects in the plain layout
//
// kube-apiserver sends audit events in batches of at most 100ms
// (REVERSER_BENCH_AUDIT_WAIT), as docs/install.md gives for fast attribution.
// Run with `make bench`; REVERSER_BENCH_SCALE=100000 runs P1 and P5 at 100k
// objects (default 10000); REVERSER_BENCH_CONFIGMAPS, REVERSER_BENCH_EDITS,
// REVERSER_BENCH_EDIT_RATE, REVERSER_BENCH_EDIT_SECONDS and
// REVERSER_BENCH_TARGETS size single rows. REVERSER_BENCH_PROFILE=1 also
// prints the top of the controller's CPU profile during P1's snapshot and
// of its heap after it (REVERSER_BENCH_PROFILE_DIR keeps the files). No
// assertion is timed: the figures are printed for people and CI logs.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestBench(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cpBin := run(t, root, "bash", "hack/build-control-plane.sh")
	bin := filepath.Join(root, "_output", "bench", "bin")
	// kubectl-reverser is not needed: the benchmark uses the clientset.
	require.NoError(t, controlplane.BuildReverser(ctx, root, bin, os.Stdout, map[string]string{
		"reverser-apiserver": "./cmd/apiserver", "reverser-controller": "./cmd/controller", "reverser-gitserver": "./hack/gitserver",
	}))
	fluxBin, err := controlplane.BuildFlux(ctx, root, os.Stdout)
	require.NoError(t, err)
	// The audit settings docs/install.md gives for attribution within
	// 0.1 s; REVERSER_BENCH_AUDIT_WAIT=1s measures the default.
	auditWait, err := time.ParseDuration(cmp.Or(os.Getenv("REVERSER_BENCH_AUDIT_WAIT"), "100ms"))
	require.NoError(t, err)
	env, err := controlplane.Up(ctx, controlplane.Options{Dir: filepath.Join(root, "_output", "bench", "local"), ControlPlaneBin: cpBin, ReverserBin: bin,
		FluxBin: fluxBin, AuditBatchMaxWait: auditWait})
	require.NoError(t, err)
	defer func() { _ = controlplane.Down(env.Dir) }()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAdmin)
	require.NoError(t, err)
	cfg.QPS, cfg.Burst = 2000, 2000
	kube := kubernetes.NewForConfigOrDie(cfg)
	controllerFlags = flagsOf(env, "reverser-controller")
	atRest(env)

	// REVERSER_BENCH_SCALE=100000 runs the rows that grow with it (P1, P5)
	// at 100k objects.
	scale := envInt("REVERSER_BENCH_SCALE", 10000)
	t.Run("P1-snapshot", func(t *testing.T) { snapshot(ctx, t, env, kube, envInt("REVERSER_BENCH_CONFIGMAPS", scale)) })
	t.Run("P2-edit-latency", func(t *testing.T) {
		editLatency(ctx, t, env, kube, envInt("REVERSER_BENCH_EDITS", 60), "plain", auditWait)
	})
	t.Run("P2-edit-latency-attributed", func(t *testing.T) {
		editLatency(ctx, t, env, kube, envInt("REVERSER_BENCH_EDITS", 60), "local", auditWait)
	})
	t.Run("P3-sustained-edits", func(t *testing.T) {
		sustainedEdits(ctx, t, env, kube, 1000, envInt("REVERSER_BENCH_EDIT_RATE", 500),
			time.Duration(envInt("REVERSER_BENCH_EDIT_SECONDS", 60))*time.Second)
	})
	t.Run("P3-sustained-edits-attributed", func(t *testing.T) {
		attributedEdits(ctx, t, env, cfg, kube, 1000, envInt("REVERSER_BENCH_EDIT_RATE", 500),
			time.Duration(envInt("REVERSER_BENCH_EDIT_SECONDS", 60))*time.Second)
	})
	t.Run("P4-save-latency", func(t *testing.T) { saveLatency(ctx, t, env, kube, envInt("REVERSER_BENCH_SAVES", 20)) })
	t.Run("P4-save-applied", func(t *testing.T) { saveApplied(ctx, t, env, kube, envInt("REVERSER_BENCH_APPLIES", 10)) })
	t.Run("P5-repository-growth", func(t *testing.T) {
		sizes := []int{1000}
		for s := 10000; s <= scale; s *= 10 {
			sizes = append(sizes, s)
		}
		repoGrowth(ctx, t, env, kube, sizes, 20)
	})
	t.Run("P6-api-vs-crd", func(t *testing.T) { apiVsCRD(ctx, t, env, kube, 500, 20) })
	t.Run("many-targets", func(t *testing.T) {
		manyTargets(ctx, t, env, kube, envInt("REVERSER_BENCH_TARGETS", 200), 50)
	})
	t.Run("kustomized-edit", func(t *testing.T) {
		kustomizedEdit(ctx, t, env, kube, envInt("REVERSER_BENCH_KUSTOMIZED", 1000), envInt("REVERSER_BENCH_KUSTOMIZED_EDITS", 10))
	})
	printTable()
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	// P1's floor push of 100k files failed against the test Git server with
	// git's 1 MiB post buffer (past it, git uploads chunked); in one request
	// it goes through.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=Bench", "GIT_AUTHOR_EMAIL=b@example.com",
		"GIT_COMMITTER_NAME=Bench", "GIT_COMMITTER_EMAIL=b@example.com",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.postBuffer", "GIT_CONFIG_VALUE_0=1073741824")
	out, err := cmd.Output()
	require.NoError(t, err, "%s %s", name, strings.Join(args, " "))
	return strings.TrimSpace(string(out))
}

func apply(t *testing.T, env *controlplane.Env, yaml string) {
	t.Helper()
	cmd := exec.Command("kubectl", "--kubeconfig", env.KubeconfigAdmin, "apply", "--server-side", "-f", "-")
	cmd.Stdin = strings.NewReader(yaml)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// providers: "plain" sends no audit, and lends every namespace to P1's
// namespace; "local" is attributed from kube-apiserver's audit events, as
// `make up` wires them.
var providers = harness.Docs(harness.KubeProvider("plain", `  lend:
  - sourceNamespaces: ["*"]
    to: {from: Names, names: [p1]}`), harness.AuditedKubeProvider("local"))

func target(provider, ns, url, silence string, rules string) string {
	return harness.Docs(providers, harness.Namespace(ns), targetObjects(provider, ns, url, silence, rules))
}

// targetObjects are the GitProvider, GitTarget and rules of a target in ns.
func targetObjects(provider, ns, url, silence string, rules string) string {
	return harness.Docs(gitProvider(ns, url), gitTarget(provider, ns, silence, ""), rules)
}

// gitProvider is the GitProvider "repo" of ns.
func gitProvider(ns, url string) string {
	return harness.GitProvider(ns, "repo", url, "")
}

// gitTarget is the GitTarget "site" of ns; spec lines are added to its spec.
func gitTarget(provider, ns, silence, spec string) string {
	return harness.GitTarget(harness.Target{Namespace: ns, KubeProvider: provider, Path: "mirror", Silence: silence, MaxAge: "10m", Spec: spec})
}

func fileCount(bare string) int {
	out, err := exec.Command("git", "-C", bare, "ls-tree", "-r", "--name-only", "main").Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}

// flagsOf is the command line of a process of the plane, less the flags
// that only say where its files and ports are.
func flagsOf(env *controlplane.Env, name string) string {
	data, err := os.ReadFile(filepath.Join(env.Dir, "pids", name+".pid"))
	if err != nil {
		return "?"
	}
	cmdline, err := os.ReadFile("/proc/" + strings.SplitN(string(data), "\n", 2)[0] + "/cmdline")
	if err != nil {
		return "?"
	}
	var flags []string
	for _, a := range strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")[1:] {
		_, value, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(value, "/") && !strings.HasPrefix(value, "127.0.0.1:") {
			flags = append(flags, a)
		}
	}
	return strings.Join(flags, " ")
}

// atRest is R0: the controller's resident memory once the plane is up and
// nothing is mirrored, its binary's pages apart from what it allocated.
func atRest(env *controlplane.Env) {
	const name = "reverser-controller"
	rss, file, anon := procStatus(env, name, "VmRSS"), procStatus(env, name, "RssFile"), procStatus(env, name, "RssAnon")
	fmt.Printf("R0 controller at rest (nothing mirrored): RSS %d MiB, of which %d MiB the binary's pages and %d MiB anonymous\n",
		rss/1024, file/1024, anon/1024)
	record(row{name: "R0 controller at rest, nothing mirrored", measured: fmt.Sprintf("RSS %d MiB", rss/1024),
		floor: fmt.Sprintf("none: binary %d MiB, anon %d MiB", file/1024, anon/1024), goal: "RSS ≤ 45 MiB"})
}

// peakRSS reads a process's high-water resident set size.
func peakRSS(env *controlplane.Env, name string) string {
	if kb := procStatus(env, name, "VmHWM"); kb > 0 {
		return fmt.Sprintf("%d kB", kb)
	}
	return "?"
}

// procStatus reads one field of a process's /proc status, in kB; 0 when
// it cannot.
func procStatus(env *controlplane.Env, name, field string) int {
	data, err := os.ReadFile(filepath.Join(env.Dir, "pids", name+".pid"))
	if err != nil {
		return 0
	}
	pid := strings.SplitN(string(data), "\n", 2)[0]
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	return 0
}

// peakAnon samples a process's anonymous resident memory (its heap and
// stacks, not the pages of its binary) until stop is called, which returns
// the highest value seen, in kB.
func peakAnon(env *controlplane.Env, name string) (stop func() int) {
	var peak int
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			peak = max(peak, procStatus(env, name, "RssAnon"))
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int {
		close(done)
		<-finished
		return peak
	}
}

// profile fetches one of the controller's pprof profiles, in the background
// with REVERSER_BENCH_PROFILE=1 (else it does nothing), and returns what
// prints its top nodes once it is there.
func profile(ctx context.Context, t *testing.T, env *controlplane.Env, which string) func(title string, args ...string) {
	return profileOf(ctx, t, "P1", http.DefaultClient, env.PprofURL, which)
}

// profileOf is profile for the pprof endpoints at base, fetched with client,
// printed under the row's name.
func profileOf(ctx context.Context, t *testing.T, rowName string, client *http.Client, base, which string) func(title string, args ...string) {
	if os.Getenv("REVERSER_BENCH_PROFILE") == "" || base == "" {
		return func(string, ...string) {}
	}
	dir := os.Getenv("REVERSER_BENCH_PROFILE_DIR") // kept there for go tool pprof
	if dir == "" {
		dir = t.TempDir()
	}
	file := filepath.Join(dir, rowName+"-"+strings.NewReplacer("/", "-", "?", "-", "=", "-").Replace(which)+".pb.gz")
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/"+which, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", which, resp.Status)
			}
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(f, resp.Body)
			return err
		}()
	}()
	fetched := sync.OnceValue(func() error { return <-done })
	return func(title string, args ...string) {
		if err := fetched(); err != nil {
			t.Errorf("fetching the %s profile: %v", which, err)
			return
		}
		out, err := exec.CommandContext(ctx, "go", append(append([]string{"tool", "pprof", "-nodecount=15"}, args...), file)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		fmt.Printf("%s profile, %s:\n%s\n", rowName, title, out)
	}
}

func snapshot(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, n int) {
	const namespaces = 100
	perNS := (n + namespaces - 1) / namespaces
	t.Logf("creating %d ConfigMaps in %d namespaces", perNS*namespaces, namespaces)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	errs := make(chan error, 1)
	for i := range namespaces {
		ns := fmt.Sprintf("bench-%03d", i)
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		for j := range perNS {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", j), Namespace: ns,
					Labels: map[string]string{"app": "bench"}}, Data: map[string]string{"key": strings.Repeat("v", 200), "index": strconv.Itoa(j)}}
				if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("creating ConfigMaps: %v", err)
	default:
	}

	bare, err := gitserver.CreateRepo(env.GitRoot, "p1")
	require.NoError(t, err)
	var rules strings.Builder
	for i := range namespaces {
		fmt.Fprintf(&rules, "---\napiVersion: reverser.dev/v1alpha1\nkind: WatchRule\nmetadata: {name: ns-%03d, namespace: p1}\n"+
			"spec:\n  gitTargetRef: {name: site}\n  sourceNamespace: bench-%03d\n  rules: [{apiGroups: [\"\"], resources: [configmaps]}]\n", i, i)
	}
	want := perNS * namespaces
	// The rules first, the GitTarget they feed last: the figure is the
	// snapshot's, from the GitTarget's creation, not kubectl's creating a
	// hundred rules through the aggregator (printed apart).
	rulesStart := time.Now()
	apply(t, env, harness.Docs(providers, harness.Namespace("p1"), gitProvider("p1", env.GitBaseURL+"/p1.git"), rules.String()))
	rulesTook := time.Since(rulesStart)
	cpu := profile(ctx, t, env, "profile?seconds=10")
	// The binary's own pages are resident too (about 100 MiB of a 200 MB
	// binary, shared and reclaimable): printed apart from what it allocates.
	binaryPages := procStatus(env, "reverser-controller", "RssFile")
	anon := peakAnon(env, "reverser-controller")
	start := time.Now()
	// The snapshot is one window, committed once every stream delivered
	// its initial state: it does not wait for this silence, which edits do.
	const silence = "1s"
	apply(t, env, gitTarget("plain", "p1", silence, ""))
	applied := time.Since(start) // kubectl creating the GitTarget, counted in
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Minute, true, func(context.Context) (bool, error) {
		return fileCount(bare) >= want, nil
	})
	require.NoError(t, err, "the snapshot was not pushed")
	elapsed := time.Since(start)
	rss := fmt.Sprintf("%s (binary pages %d MiB, anonymous peak %d MiB)", peakRSS(env, "reverser-controller"), binaryPages/1024, anon()/1024)
	heap := profile(ctx, t, env, "heap?gc=1")
	cpu("CPU during the snapshot (first 10 s)", "-top")
	heap("heap in use after the snapshot", "-top", "-sample_index=inuse_space")
	heap("allocated since the controller started (what the peak RSS is made of)", "-top", "-sample_index=alloc_space")

	// Floors: the git CLI committing and pushing the same files to the same
	// server, at git's defaults and configured like Reverser's writer (no
	// delta search, fastest zlib); the ratio is against the faster.
	work := t.TempDir()
	run(t, work, "git", "clone", "--quiet", env.GitBaseURL+"/p1.git", "src")
	gitDefaults := gitFloor(t, work, env, "p1-floor-defaults")
	gitLikeOurs := gitFloor(t, work, env, "p1-floor-like-ours", "-c", "pack.window=0", "-c", "pack.depth=0",
		"-c", "core.compression=1", "-c", "pack.compression=1")
	floor := min(gitDefaults, gitLikeOurs)

	// A second floor: what reading the same objects costs, one LIST per
	// namespace as the streams make them.
	listStart := time.Now()
	for i := range namespaces {
		_, err := kube.CoreV1().ConfigMaps(fmt.Sprintf("bench-%03d", i)).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
	}
	list := time.Since(listStart)

	fmt.Printf("P1 snapshot: %d ConfigMaps in %d namespaces pushed %.2fs after the GitTarget's create (kubectl %.2fs of it; "+
		"window silence %s, not waited for; its %d WatchRules created before, in %.2fs); git CLI floor %.2fs at its defaults, "+
		"%.2fs configured like Reverser's writer; ratio %.1fx against the faster; LIST floor %.2fs; controller peak RSS %s\n",
		want, namespaces, elapsed.Seconds(), applied.Seconds(), silence, namespaces, rulesTook.Seconds(), gitDefaults.Seconds(),
		gitLikeOurs.Seconds(), elapsed.Seconds()/floor.Seconds(), list.Seconds(), rss)
	record(row{name: fmt.Sprintf("P1 snapshot of %d ConfigMaps (silence %s)", want, silence), measured: fmt.Sprintf("%.2fs, RSS %s", elapsed.Seconds(), rss),
		floor: fmt.Sprintf("git CLI %.2fs (defaults), %.2fs (like ours); LIST %.2fs", gitDefaults.Seconds(), gitLikeOurs.Seconds(),
			list.Seconds()), ratio: elapsed.Seconds() / floor.Seconds(),
		goal: "≤ 1.5×, RSS ≤ 120 MiB"})

	// The rows after it should measure with nothing of P1's mirroring: its
	// GitTarget goes, and with it the informer its rules shared. Whether
	// the informer stopped is printed, not asserted: the bench measures.
	informers := gauge(t, env, "reverser_informers")
	run(t, env.Dir, "kubectl", "--kubeconfig", env.KubeconfigAdmin, "delete", "gittarget", "-n", "p1", "--all", "--wait=true")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return gauge(t, env, "reverser_informers") < informers, nil
	})
	fmt.Printf("P1's GitTarget deleted; informers running %.0f → %.0f (released: %t)\n", informers,
		gauge(t, env, "reverser_informers"), err == nil)
}

// gitFloor times the git CLI committing a copy of the clone's folder in
// work/src/mirror as one commit and pushing it to a new repository name,
// with gitArgs (-c settings) on each git command; the copy is made before
// the clock starts.
func gitFloor(t *testing.T, work string, env *controlplane.Env, name string, gitArgs ...string) time.Duration {
	t.Helper()
	_, err := gitserver.CreateRepo(env.GitRoot, name)
	require.NoError(t, err)
	dir := filepath.Join(work, name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	run(t, work, "cp", "-a", filepath.Join(work, "src", "mirror"), filepath.Join(dir, "mirror"))
	git := func(args ...string) { run(t, dir, "git", append(slices.Clone(gitArgs), args...)...) }
	start := time.Now()
	git("init", "--quiet", "--initial-branch=main")
	git("add", "-A")
	git("commit", "--quiet", "-m", "snapshot")
	git("push", "--quiet", env.GitBaseURL+"/"+name+".git", "main")
	return time.Since(start)
}

func editLatency(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, edits int, provider string,
	auditWait time.Duration) {
	ns := "p2-" + provider
	bare, err := gitserver.CreateRepo(env.GitRoot, ns)
	require.NoError(t, err)
	apply(t, env, target(provider, ns, env.GitBaseURL+"/"+ns+".git", "0s",
		configMapRule(ns)))
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "edited"},
		Data: map[string]string{"count": "0"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	doc := "mirror/" + ns + "/configmaps/edited.yaml"
	require.NoError(t, waitPushed(ctx, bare, "", doc, "", time.Minute), "the initial state was not pushed")

	w, err := kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=edited"})
	require.NoError(t, err)
	defer w.Stop()
	drain := func() {
		for {
			select {
			case <-w.ResultChan():
			default:
				return
			}
		}
	}
	var pushed, watched []time.Duration
	for i := 1; i <= edits; i++ {
		drain()
		before := serverHead(bare)
		patch := fmt.Sprintf(`{"data":{"count":"%d"}}`, i)
		start := time.Now()
		_, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, "edited", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified && ev.Object.(*corev1.ConfigMap).Data["count"] == strconv.Itoa(i) {
				watched = append(watched, time.Since(start))
				break
			}
		}
		require.NoError(t, waitPushed(ctx, bare, before, doc, fmt.Sprintf("count: \"%d\"", i), time.Minute), "edit %d not pushed", i)
		pushed = append(pushed, time.Since(start))
	}
	p := quantile
	attributed := map[string]string{"plain": "attribution off", "local": fmt.Sprintf("attributed, audit batch %v", auditWait)}[provider]
	fmt.Printf("P2 edit→push (silence 0, %d edits, %s): %s; client-go watch floor %s; ratio p50 %.1fx\n",
		edits, attributed, summary(pushed), summary(watched), float64(p(pushed, 0.5))/float64(p(watched, 0.5)))
	goal := "none (the floor)"
	if provider == "local" {
		goal = "p50 ≤ 0.3s"
	}
	record(row{name: "P2 edit→push, " + attributed, measured: summary(pushed), floor: "watch " + summary(watched),
		ratio: float64(p(pushed, 0.5)) / float64(p(watched, 0.5)), goal: goal})
}

// saveLatency measures a CommitRequest from create to Committed, against
// the floor of the same edit committed without a request (silence 0).
func saveLatency(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, saves int) {
	cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAdmin)
	require.NoError(t, err)
	// client-go's default 5 QPS would throttle the polling below, and with
	// it every create: the figure would be the client's, not Reverser's.
	cfg.QPS, cfg.Burst = 2000, 2000
	rev := versioned.NewForConfigOrDie(cfg)
	measure := func(ns, silence string, withRequest bool) []time.Duration {
		bare, err := gitserver.CreateRepo(env.GitRoot, ns)
		require.NoError(t, err)
		apply(t, env, target("local", ns, env.GitBaseURL+"/"+ns+".git", silence,
			configMapRule(ns)))
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			gt, err := rev.ReverserV1alpha1().GitTargets(ns).Get(ctx, "site", metav1.GetOptions{})
			return err == nil && gt.Status.Streams.Running == 1, nil
		}))
		var out []time.Duration
		for i := range saves {
			before := serverHead(bare)
			doc := fmt.Sprintf("mirror/%s/configmaps/cm-%d.yaml", ns, i)
			start := time.Now()
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)},
				Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.CreateOptions{})
			require.NoError(t, err)
			if withRequest {
				cr, err := rev.ReverserV1alpha1().CommitRequests(ns).Create(ctx, &v1.CommitRequest{
					ObjectMeta: metav1.ObjectMeta{GenerateName: "save-"},
					Spec:       v1.CommitRequestSpec{GitTargetRef: v1.ObjectReference{Name: "site"}, Message: fmt.Sprintf("Save %d", i)},
				}, metav1.CreateOptions{})
				require.NoError(t, err)
				require.NoError(t, wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
					got, err := rev.ReverserV1alpha1().CommitRequests(ns).Get(ctx, cr.Name, metav1.GetOptions{})
					if err != nil {
						return false, err
					}
					c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
					if c != nil && c.Status != metav1.ConditionUnknown && c.Reason != v1.ReasonCommitted {
						return false, fmt.Errorf("save %d ended %s: %s", i, c.Reason, c.Message)
					}
					if c == nil || c.Reason != v1.ReasonCommitted {
						return false, nil
					}
					// Committed means pushed: the server holds the commit, with the edit.
					out, err := exec.Command("git", "-C", bare, "show", got.Status.Commit+":"+doc).Output()
					if err != nil || !strings.Contains(string(out), strconv.Itoa(i)) {
						return false, fmt.Errorf("save %d reported Committed as %s, which the server does not hold with its edit", i, got.Status.Commit)
					}
					return true, nil
				}))
			} else {
				require.NoError(t, waitPushed(ctx, bare, before, doc, "", time.Minute), "edit %d not pushed", i)
			}
			out = append(out, time.Since(start))
		}
		return out
	}
	floor := measure("p4-floor", "0s", false)
	saved := measure("p4-save", "10m", true)
	p := quantile
	fmt.Printf("P4 edit+CommitRequest→Committed (%d saves, attributed, collect delay = grace, settle 50ms): %s; "+
		"floor (the same edit committed without a request, silence 0) %s; ratio p50 %.1fx\n",
		saves, summary(saved), summary(floor), float64(p(saved, 0.5))/float64(p(floor, 0.5)))
	record(row{name: "P4 edit+save→Committed", measured: summary(saved), floor: "no request " + summary(floor),
		ratio: float64(p(saved, 0.5)) / float64(p(floor, 0.5)), goal: "≤ 1.2×"})
}
