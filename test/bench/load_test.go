//go:build bench

package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// createConfigMaps creates ConfigMaps from..to-1 of ns, named name(i), with
// data(i), 32 at a time.
func createConfigMaps(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string, from, to int, name func(int) string,
	data func(int) map[string]string) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var failed atomic.Pointer[error]
	for i := from; i < to && failed.Load() == nil; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: ns}, Data: data(i)}
			if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		t.Fatalf("creating ConfigMaps in %s: %v", ns, *p)
	}
}

func namespace(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func configMapRule(ns string) string {
	return harness.WatchRule(ns, "cms", "site", harness.ConfigMapRules)
}

// gitDocs reads the documents at paths of the server's main, in one git
// process; a path main does not hold is left out.
func gitDocs(bare string, paths []string) (map[string]string, error) {
	var in bytes.Buffer
	for _, p := range paths {
		fmt.Fprintf(&in, "main:%s\n", p)
	}
	cmd := exec.Command("git", "-C", bare, "cat-file", "--batch")
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	r := bufio.NewReader(bytes.NewReader(out))
	for _, p := range paths {
		header, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		fields := strings.Fields(header)
		if len(fields) != 3 {
			continue // "main:<path> missing"
		}
		size, err := strconv.Atoi(fields[2])
		if err != nil {
			return nil, fmt.Errorf("reading %s: %q", p, header)
		}
		body := make([]byte, size+1)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		docs[p] = string(body[:size])
	}
	return docs, nil
}

// sustainedEdits is P3: a Go load generator patches n ConfigMaps at perSecond
// for the given duration; once it stops, the time until Git holds every
// object as the cluster does, against a client-go watch seeing the last
// edit. Nothing may be lost: every document must end equal to its object.
func sustainedEdits(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, n, perSecond int, d time.Duration) {
	const ns = "p3"
	namespace(ctx, t, kube, ns)
	name := func(i int) string { return fmt.Sprintf("cm-%04d", i) }
	createConfigMaps(ctx, t, kube, ns, 0, n, name, func(int) map[string]string { return map[string]string{"seq": "0"} })
	// What kube-apiserver accepts on this machine while nothing mirrors.
	floorDone, _, floorTook := generate(ctx, kube, ns, n, perSecond, 10*time.Second, 0)
	bare, paths := mirrorConfigMaps(ctx, t, env, "plain", ns, n, name)
	watched := watchNewest(ctx, t, kube, ns)

	// Values the floor's run never wrote, so each is a change.
	done, failed, loadTook := generate(ctx, kube, ns, n, perSecond, d, 1_000_000_000)
	stopped := time.Now()

	watchLag, caughtUp, _ := catchUp(ctx, t, kube, ns, bare, paths, "seq", watched, stopped)
	achieved := float64(done) / loadTook.Seconds()
	alone := float64(floorDone) / floorTook.Seconds()
	fmt.Printf("P3 sustained edits: %d patches in %.1fs over %d ConfigMaps (%.0f/s asked %d/s, %d refused by kube-apiserver; "+
		"%.0f/s accepted for 10 s before anything mirrored them); Git equal to the cluster %.2fs after the last edit, client-go watch floor %.3fs; 0 lost\n",
		done, loadTook.Seconds(), n, achieved, perSecond, failed, alone, caughtUp.Seconds(), watchLag.Seconds())
	record(row{name: fmt.Sprintf("P3 %d edits/s for %s over %d objects", perSecond, d, n),
		measured: fmt.Sprintf("%.0f/s; Git==cluster +%.2fs", achieved, caughtUp.Seconds()),
		floor:    fmt.Sprintf("unmirrored %.0f/s; watch +%.3fs", alone, watchLag.Seconds()), ratio: (loadTook + caughtUp).Seconds() / (loadTook + watchLag).Seconds(),
		goal: "≥ 500/s, 0 lost, ≤ +5s"})
}

// mirrorConfigMaps mirrors ConfigMaps name(0..n-1) of ns, through the
// KubeProvider provider, into a repository of its own, and returns once
// the initial state is pushed: the bare repository and the documents'
// paths.
func mirrorConfigMaps(ctx context.Context, t *testing.T, env *controlplane.Env, provider, ns string, n int,
	name func(int) string) (bare string, paths []string) {
	t.Helper()
	bare, err := gitserver.CreateRepo(env.GitRoot, ns)
	require.NoError(t, err)
	apply(t, env, target(provider, ns, env.GitBaseURL+"/"+ns+".git", "0s", configMapRule(ns)))
	paths = make([]string, n)
	for i := range n {
		paths[i] = fmt.Sprintf("mirror/%s/configmaps/%s.yaml", ns, name(i))
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		return fileCount(bare) >= n, nil
	}), "the initial state was not pushed")
	return bare, paths
}

// watchNewest watches ns's ConfigMaps from now on, as the floor of the
// load rows: it returns the newest resourceVersion delivered so far. A
// watch the server ends (it drops a watcher that falls behind) is resumed
// where it was, as an informer would; one too old to resume lists again.
func watchNewest(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string) func() uint64 {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var watched atomic.Uint64
	seen := func(rv string) {
		if n, err := strconv.ParseUint(rv, 10, 64); err == nil {
			watched.Store(max(watched.Load(), n))
		}
	}
	go func() {
		from := list.ResourceVersion
		for ctx.Err() == nil {
			w, err := kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: from})
			if err != nil {
				continue
			}
			for ev := range w.ResultChan() {
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
					seen(cm.ResourceVersion)
					from = cm.ResourceVersion
				} else if ev.Type == watch.Error {
					if l, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err == nil {
						for _, cm := range l.Items {
							seen(cm.ResourceVersion)
						}
						from = l.ResourceVersion
					}
				}
			}
		}
	}()
	return watched.Load
}

// catchUp waits, after a load stopped, until the watch has delivered the
// newest edit of ns's ConfigMaps (the floor) and until Git holds, at
// paths, each ConfigMap's data[key] as the cluster does; it returns both
// delays and the values the cluster ended with, by object name.
func catchUp(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns, bare string, paths []string, key string,
	watched func() uint64, stopped time.Time) (watchLag, caughtUp time.Duration, final map[string]string) {
	t.Helper()
	list, err := kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	// The newest edit among them; the list's own resourceVersion counts
	// writes of the whole cluster, which this watch never sees.
	var finalRV uint64
	want, final := map[string]string{}, map[string]string{}
	for _, cm := range list.Items {
		if _, ours := cm.Data[key]; !ours {
			continue // kube-root-ca.crt, never mirrored
		}
		want[fmt.Sprintf("mirror/%s/configmaps/%s.yaml", ns, cm.Name)] = cm.Data[key]
		final[cm.Name] = cm.Data[key]
		rv, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		require.NoError(t, err)
		finalRV = max(finalRV, rv)
	}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return watched() >= finalRV, nil
	}), "the watch did not see the last edit (rv %d; it saw %d)", finalRV, watched())
	watchLag = time.Since(stopped)
	var behind int
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		docs, err := gitDocs(bare, paths)
		if err != nil {
			return false, err
		}
		behind = 0
		for p, v := range want {
			// YAML quotes a value only when it would read as another type.
			if !strings.Contains(docs[p], fmt.Sprintf("%s: %q\n", key, v)) && !strings.Contains(docs[p], fmt.Sprintf("%s: %s\n", key, v)) {
				behind++
			}
		}
		return behind == 0, nil
	})
	require.NoError(t, err, "%d of %d documents never reached the cluster's state: changes were lost", behind, len(want))
	return watchLag, time.Since(stopped), final
}

// generate patches ConfigMaps cm-0000.. of ns, round robin, at perSecond
// from 64 clients for d, each patch setting data.seq to its sequence number
// after first; it returns the patches made and refused, and how long it ran.
func generate(ctx context.Context, kube kubernetes.Interface, ns string, n, perSecond int, d time.Duration,
	first int64) (done, failed int64, took time.Duration) {
	limiter := rate.NewLimiter(rate.Limit(perSecond), max(1, perSecond/50))
	load, stop := context.WithTimeout(ctx, d)
	defer stop()
	var seq, ok, refused atomic.Int64
	seq.Store(first)
	var wg sync.WaitGroup
	start := time.Now()
	for range 64 {
		wg.Go(func() {
			for limiter.Wait(load) == nil {
				i := seq.Add(1)
				patch := fmt.Appendf(nil, `{"data":{"seq":"%d"}}`, i)
				if _, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, fmt.Sprintf("cm-%04d", int(i)%n), types.MergePatchType, patch,
					metav1.PatchOptions{}); err != nil {
					refused.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return ok.Load(), refused.Load(), time.Since(start)
}

// repoGrowth is P5: one edit until pushed as the mirrored folder grows
// through sizes (1k, 10k, ...), against the git CLI committing and pushing
// the same one-file change to a clone of the same repository at each size.
func repoGrowth(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, sizes []int, edits int) {
	const ns = "p5"
	namespace(ctx, t, kube, ns)
	name := func(i int) string { return fmt.Sprintf("cm-%06d", i) }
	bare, err := gitserver.CreateRepo(env.GitRoot, ns)
	require.NoError(t, err)
	url := env.GitBaseURL + "/" + ns + ".git"
	doc := fmt.Sprintf("mirror/%s/configmaps/%s.yaml", ns, name(0))
	var ours, floors []time.Duration
	have, edit := 0, 0
	for k, size := range sizes {
		createConfigMaps(ctx, t, kube, ns, have, size, name, func(i int) map[string]string {
			return map[string]string{"key": strings.Repeat("v", 200), "index": strconv.Itoa(i)}
		})
		have = size
		if k == 0 {
			apply(t, env, target("plain", ns, url, "0s", configMapRule(ns)))
		}
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Minute, true, func(context.Context) (bool, error) {
			return fileCount(bare) >= size, nil
		}), "%d objects were not pushed", size)
		var took []time.Duration
		for range edits {
			edit++
			before := serverHead(bare)
			start := time.Now()
			_, err := kube.CoreV1().ConfigMaps(ns).Patch(ctx, name(0), types.MergePatchType, fmt.Appendf(nil, `{"data":{"index":"e%d"}}`, edit),
				metav1.PatchOptions{})
			require.NoError(t, err)
			require.NoError(t, waitPushed(ctx, bare, before, doc, fmt.Sprintf("index: e%d", edit), 5*time.Minute))
			took = append(took, time.Since(start))
		}
		// The floor: the git CLI's one-file commit and push at this size.
		work := t.TempDir()
		run(t, work, "git", "clone", "--quiet", url, "floor")
		_, err := gitserver.CreateRepo(env.GitRoot, fmt.Sprintf("p5-floor-%d", size))
		require.NoError(t, err)
		floorURL := fmt.Sprintf("%s/p5-floor-%d.git", env.GitBaseURL, size)
		clone := filepath.Join(work, "floor")
		run(t, clone, "git", "push", "--quiet", floorURL, "HEAD:main")
		var floor []time.Duration
		for j := range edits {
			start := time.Now()
			require.NoError(t, os.WriteFile(filepath.Join(clone, doc), fmt.Appendf(nil, "edited: %d\n", j), 0o644))
			run(t, clone, "git", "commit", "--quiet", "-am", "one edit")
			run(t, clone, "git", "push", "--quiet", floorURL, "HEAD:main")
			floor = append(floor, time.Since(start))
		}
		fmt.Printf("P5 one edit→push with %d files: %s; git CLI commit+push %s\n", size, summary(took), summary(floor))
		ours, floors = append(ours, quantile(took, 0.5)), append(floors, quantile(floor, 0.5))
	}
	last := len(sizes) - 1
	growth := float64(ours[last]) / float64(ours[0])
	gitGrowth := float64(floors[last]) / float64(floors[0])
	fmt.Printf("P5 growth %d→%d files: Reverser %.2fx (p50 %v→%v), git CLI %.2fx (p50 %v→%v); ratio %.2fx\n", sizes[0], sizes[last],
		growth, ours[0].Round(time.Millisecond), ours[last].Round(time.Millisecond), gitGrowth,
		floors[0].Round(time.Millisecond), floors[last].Round(time.Millisecond), growth/gitGrowth)
	record(row{name: fmt.Sprintf("P5 one commit, %d→%d files", sizes[0], sizes[last]),
		measured: fmt.Sprintf("%v→%v (%.2fx)", ours[0].Round(time.Millisecond), ours[last].Round(time.Millisecond), growth),
		floor:    fmt.Sprintf("git %v→%v (%.2fx)", floors[0].Round(time.Millisecond), floors[last].Round(time.Millisecond), gitGrowth),
		ratio:    growth / gitGrowth, goal: "growth ≤ 1.5× git's"})
}
