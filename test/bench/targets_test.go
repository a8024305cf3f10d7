//go:build bench

package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// usage is a process's resident memory and CPU time so far.
type usage struct {
	rssKiB int
	cpu    time.Duration
}

// processUsage reads the controller's /proc: VmRSS, and utime+stime in the
// kernel's 100 Hz clock ticks.
func processUsage(t *testing.T, env *controlplane.Env) usage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(env.Dir, "pids", "reverser-controller.pid"))
	require.NoError(t, err)
	pid := strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0])
	status, err := os.ReadFile("/proc/" + pid + "/status")
	require.NoError(t, err)
	var u usage
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			u.rssKiB, err = strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			require.NoError(t, err)
		}
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	require.NoError(t, err)
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, err := strconv.Atoi(fields[11])
	require.NoError(t, err)
	stime, err := strconv.Atoi(fields[12])
	require.NoError(t, err)
	u.cpu = time.Duration(utime+stime) * 10 * time.Millisecond
	return u
}

// gauge reads one sample of the controller's /metrics.
func gauge(t *testing.T, env *controlplane.Env, series string) float64 {
	t.Helper()
	resp, err := http.Get(env.MetricsURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("the controller exports no %s", series)
	return 0
}

// manyTargets is the many-targets row: targets GitTargets, each mirroring
// its own namespace of per ConfigMaps into a repository of its own, set up
// in one apply. It prints the controller's memory and CPU per GitTarget
// while they snapshot and over one idle resync, and how many informers
// serve them, against the git CLI pushing the same folders one by one.
func manyTargets(ctx context.Context, t *testing.T, env *controlplane.Env, kube kubernetes.Interface, targets, per int) {
	name := func(i int) string { return fmt.Sprintf("cm-%03d", i) }
	ns := func(i int) string { return fmt.Sprintf("t1-%03d", i) }
	informersBefore := gauge(t, env, "reverser_informers")
	noObjects := processUsage(t, env)
	for i := range targets {
		namespace(ctx, t, kube, ns(i))
		createConfigMaps(ctx, t, kube, ns(i), 0, per, name, func(j int) map[string]string {
			return map[string]string{"key": strings.Repeat("v", 200), "index": strconv.Itoa(j)}
		})
	}
	bares := make([]string, targets)
	docs := []string{providers}
	for i := range targets {
		var err error
		bares[i], err = gitserver.CreateRepo(env.GitRoot, ns(i))
		require.NoError(t, err)
		docs = append(docs, targetObjects("plain", ns(i), env.GitBaseURL+"/"+ns(i)+".git", "0s", configMapRule(ns(i))))
	}
	idle := processUsage(t, env)
	start := time.Now()
	apply(t, env, harness.Docs(docs...))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 20*time.Minute, true, func(context.Context) (bool, error) {
		for _, bare := range bares {
			if fileCount(bare) < per {
				return false, nil
			}
		}
		return true, nil
	}), "not every GitTarget's snapshot was pushed")
	elapsed := time.Since(start)
	mirrored := processUsage(t, env)
	informers := gauge(t, env, "reverser_informers") - informersBefore
	// One resync with every GitTarget idle: what the targets cost at rest.
	const window = 30 * time.Second
	select {
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	case <-time.After(window):
	}
	rested := processUsage(t, env)

	// The floor: the git CLI pushing each folder to a repository of its own.
	work := t.TempDir()
	var floor time.Duration
	for i := range targets {
		clone := filepath.Join(work, ns(i))
		run(t, work, "git", "clone", "--quiet", env.GitBaseURL+"/"+ns(i)+".git", ns(i))
		_, err := gitserver.CreateRepo(env.GitRoot, ns(i)+"-floor")
		require.NoError(t, err)
		require.NoError(t, os.RemoveAll(filepath.Join(clone, ".git")))
		start := time.Now()
		run(t, clone, "git", "init", "--quiet", "--initial-branch=main")
		run(t, clone, "git", "add", "-A")
		run(t, clone, "git", "commit", "--quiet", "-m", "snapshot")
		run(t, clone, "git", "push", "--quiet", env.GitBaseURL+"/"+ns(i)+"-floor.git", "main")
		floor += time.Since(start)
	}
	perTarget := func(kib int) string { return fmt.Sprintf("%.0f KiB", float64(kib)/float64(targets)) }
	fmt.Printf("Many targets: %d GitTargets × %d ConfigMaps pushed in %.2fs (git CLI floor, one by one, %.2fs); informers added %.0f; "+
		"controller RSS %d MiB → %d MiB with the objects cached → %d MiB mirroring (%s per GitTarget, %s per object cached); "+
		"CPU %.2fs while snapshotting (%.1f ms per GitTarget), %.2fs over a %s idle resync (%.2f ms per GitTarget)\n",
		targets, per, elapsed.Seconds(), floor.Seconds(), informers, noObjects.rssKiB/1024, idle.rssKiB/1024, mirrored.rssKiB/1024,
		perTarget(mirrored.rssKiB-idle.rssKiB), fmt.Sprintf("%.1f KiB", float64(idle.rssKiB-noObjects.rssKiB)/float64(targets*per)),
		(mirrored.cpu - idle.cpu).Seconds(), float64((mirrored.cpu-idle.cpu).Milliseconds())/float64(targets),
		(rested.cpu - mirrored.cpu).Seconds(), window, float64((rested.cpu-mirrored.cpu).Milliseconds())/float64(targets))
	record(row{name: fmt.Sprintf("Many targets: %d GitTargets × %d objects", targets, per),
		measured: fmt.Sprintf("%.1fs, %s/target, %.0f informers", elapsed.Seconds(), perTarget(mirrored.rssKiB-idle.rssKiB), informers),
		floor:    fmt.Sprintf("git CLI %.1fs", floor.Seconds()), ratio: elapsed.Seconds() / floor.Seconds(),
		goal: "per-target cost printed; no informer per target"})
}
