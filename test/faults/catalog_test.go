package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"reverser.dev/reverser/test/blackhole"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
)

// fault is one row of the table. inject runs while the burst goes on and
// returns once the fault is over: the process is back, the outage ended.
type fault struct {
	name   string
	inject func(t *testing.T, m *mirror)
	// private mirrors into a repository that needs the credentials of the
	// Secret git-credentials.
	private bool
	// recovered, when set, is a metric of the controller (a series, or a
	// name whose series are summed) that must grow from before the fault to
	// the end of the run: the controller counted its recovery.
	recovered string
}

func faults() []fault {
	return []fault{
		{name: "none", inject: func(*testing.T, *mirror) {}},
		{name: "controller killed (SIGKILL) mid-burst", inject: func(t *testing.T, _ *mirror) {
			must(t, controlplane.Kill(env, "reverser-controller"))
			must(t, controlplane.Restart(env, "reverser-controller"))
		}},
		{name: "controller killed (SIGKILL) mid-push", inject: func(t *testing.T, m *mirror) {
			// The Git server holds the next push before receiving it; the
			// controller dies while it waits for the answer.
			fault := filepath.Join(env.GitRoot, gitserver.FaultFile)
			must(t, os.WriteFile(fault, []byte(gitserver.HoldPushes), 0o644))
			m.poll(time.Minute, "a push held by the Git server", func() (bool, error) {
				_, err := os.Stat(filepath.Join(env.GitRoot, gitserver.HeldFile))
				return err == nil, nil
			})
			must(t, controlplane.Kill(env, "reverser-controller"))
			must(t, os.Remove(fault))
			must(t, controlplane.Restart(env, "reverser-controller"))
		}},
		{name: "reverser-apiserver restarted", inject: func(t *testing.T, _ *mirror) {
			must(t, controlplane.Restart(env, "reverser-apiserver"))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			must(t, controlplane.WaitAPIServiceAvailable(ctx, env))
		}},
		{name: "kube-apiserver restarted", inject: func(t *testing.T, _ *mirror) { must(t, controlplane.Restart(env, "kube-apiserver")) }},
		{name: "etcd restarted", inject: func(t *testing.T, _ *mirror) { must(t, controlplane.Restart(env, "etcd")) }},
		{name: "watch expired (410)", recovered: `reverser_watch_errors_total{reason="expired"}`, inject: func(t *testing.T, m *mirror) {
			// The controller is cut off, its connections refused, while
			// kube-apiserver restarts on an etcd whose revision moved on and
			// was compacted: every watch the controller resumes afterwards is
			// too old for the new watch cache, and its informers list again.
			needBlackhole(t)
			must(t, os.WriteFile(env.BlackholeControl, []byte(blackhole.Refuse), 0o644))
			defer func() { must(t, os.RemoveAll(env.BlackholeControl)) }()
			must(t, controlplane.Kill(env, "kube-apiserver"))
			rev := etcdPut(t, "/reverser-faults/bump", time.Now().String())
			etcdCompact(t, rev)
			must(t, controlplane.Restart(env, "kube-apiserver"))
			m.poll(2*time.Minute, "kube-apiserver ready again", func() (bool, error) {
				_, err := m.admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
				return err == nil, nil
			})
		}},
		{name: "controller's connections silently stalled", recovered: "reverser_watch_errors_total", inject: func(t *testing.T, m *mirror) {
			// Nothing passes between the controller and kube-apiserver, and
			// nothing is reset either: the controller must notice on its own.
			// Once it has, new connections pass again; the stalled ones never
			// do.
			needBlackhole(t)
			before := metric(t, "reverser_watch_errors_total")
			must(t, os.WriteFile(env.BlackholeControl, []byte(blackhole.Stall), 0o644))
			defer func() { must(t, os.Remove(env.BlackholeControl)) }()
			m.poll(3*time.Minute, "the controller noticing its stalled watches", func() (bool, error) {
				return metric(t, "reverser_watch_errors_total") > before, nil
			})
		}},
		{name: "Git server unreachable", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			before := metric(t, `reverser_pushes_total{result="error"}`)
			must(t, controlplane.Kill(env, "git-server"))
			defer func() { must(t, controlplane.Restart(env, "git-server")) }()
			// The outage lasts until the controller has failed to push twice
			// (in the full run, for a minute at least).
			until := time.Now().Add(map[bool]time.Duration{true: time.Minute}[full])
			m.poll(3*time.Minute, "pushes failing against the unreachable server", func() (bool, error) {
				return metric(t, `reverser_pushes_total{result="error"}`) >= before+2 && !time.Now().Before(until), nil
			})
			m.pollCondition("GitReachable", "False", "GitUnreachable", "connection refused")
		}},
		{name: "Git server answering 500", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			before := metric(t, `reverser_pushes_total{result="error"}`)
			fault := filepath.Join(env.GitRoot, gitserver.FaultFile)
			must(t, os.WriteFile(fault, []byte("500"), 0o644))
			defer func() { must(t, os.Remove(fault)) }()
			m.poll(3*time.Minute, "pushes failing against the broken server", func() (bool, error) {
				return metric(t, `reverser_pushes_total{result="error"}`) >= before+2, nil
			})
			m.pollCondition("GitReachable", "False", "GitUnreachable", "500")
		}},
		{name: "credential Secret rotated mid-burst", private: true, inject: func(t *testing.T, m *mirror) {
			// The new password is let in, the Secret rotated, and the old
			// password refused at once: pushes fail until the controller
			// reads the Secret again.
			m.setCredential(t, m.ns, "second", "")
			out, err := m.kubectlOut("", "patch", "secret", "git-credentials", "-n", m.ns, "--type=merge", "-p",
				`{"stringData":{"password":"second"}}`)
			if err != nil {
				t.Fatalf("rotating the Secret: %v: %s", err, out)
			}
			m.setCredential(t, m.ns, "second", "first")
		}},
		{name: "controller's data dir full", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			if _, err := os.Stat(env.ControllerDataDir + ".tmpfs"); err != nil {
				t.Fatal("the controller's data dir of this control plane is not a tmpfs the suite may fill: run the suite as root " +
					"(it mounts one) on a control plane of its own (unset REVERSER_FAULTS_LOCAL_DIR)")
			}
			ballast := filepath.Join(env.ControllerDataDir, "ballast")
			fill(t, ballast)
			defer func() { must(t, os.Remove(ballast)) }()
			m.pollCondition("Ready", "False", "CommitFailed", "no space left on device")
		}},
		{name: "foreign commit edits a document", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			m.foreignCommit(t, "edit", func(work string, docs []string) {
				must(t, os.WriteFile(filepath.Join(work, docs[0]), []byte("edited: by hand\n"), 0o644))
			})
		}},
		{name: "foreign commit deletes documents", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			m.foreignCommit(t, "delete", func(work string, docs []string) {
				for _, d := range docs[:min(3, len(docs))] {
					must(t, os.Remove(filepath.Join(work, d)))
				}
			})
		}},
		{name: "foreign commit deletes the folder", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			m.foreignCommit(t, "delete the folder", func(work string, _ []string) {
				must(t, os.RemoveAll(filepath.Join(work, folder)))
			})
		}},
	}
}

func needBlackhole(t *testing.T) {
	t.Helper()
	if env.BlackholeControl == "" {
		t.Fatal("this control plane has no black hole before the controller: let the fault suite start its own (unset REVERSER_FAULTS_LOCAL_DIR)")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// runFault runs a burst, injects f a third of the way in, and measures the
// outcome once the burst is over: how long until Git equals the cluster, and
// what the commits since the burst began got wrong.
func runFault(t *testing.T, env *controlplane.Env, f fault) result {
	m := newMirror(t, env, f.private)
	objects, ops := 20, 120
	if full {
		objects, ops = 100, 1200
	}
	_, err := m.admin.CoreV1().ConfigMaps(m.ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"},
		Data: map[string]string{"v": "0"}}, metav1.CreateOptions{})
	must(t, err)
	m.poll(time.Minute, "the seed pushed", func() (bool, error) { return m.head() != "", nil })
	base := m.head()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	made := &countingWrites{}
	burst, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.burst(burst, objects, made)
	}()
	// A third of the changes before the fault, the rest after it is over.
	m.poll(time.Minute, "the burst under way", func() (bool, error) { return made.len() >= ops/3, nil })
	var before float64
	if f.recovered != "" {
		before = metric(t, f.recovered)
	}
	f.inject(t, m)
	// How long after the fault is over the mirror pushes again.
	over, headAtOver := time.Now(), m.head()
	pushedAgain := make(chan time.Duration, 1)
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
			if m.head() != headAtOver {
				pushedAgain <- time.Since(over)
				return true, nil
			}
			return false, nil
		})
	}()
	after := made.len()
	m.poll(3*time.Minute, "the burst going on after the fault", func() (bool, error) { return made.len() >= after+2*ops/3, nil })
	stop()
	<-done
	ended := time.Now()

	r := result{fault: f.name, made: made.len()}
	var lost []string
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 3*time.Minute, true,
		func(context.Context) (bool, error) {
			d, err := m.differences()
			if err != nil {
				return false, nil // a server still coming back
			}
			lost = d
			return len(d) == 0, nil
		})
	r.converged = time.Since(ended)
	// The poll above may see the first push before the watcher of the head
	// does (it polls at another pace): a head that moved is a push, and its
	// watcher reports it within one of its polls.
	select {
	case r.firstPush = <-pushedAgain:
	case <-time.After(5 * time.Second):
		t.Errorf("nothing was pushed after the fault was over")
	}
	if err != nil {
		r.lost, r.lostPaths = max(len(lost), 1), lost
	}
	if f.recovered != "" {
		if after := metric(t, f.recovered); after <= before {
			t.Errorf("%s stayed at %v: the controller did not count its recovery", f.recovered, after)
		}
	}
	var dups, wrong []string
	r.commits, r.byPeople, dups, wrong = m.check(base)
	r.duplicates, r.duplicateCommits = len(dups), dups
	r.misattributed, r.wrong = len(wrong), wrong
	return r
}

// foreignAuthor makes the commits a fault pushes by hand.
const foreignAuthor = "Somebody"

// foreignCommit pushes, with the git CLI, a commit that changes the mirror's
// documents as somebody editing the repository by hand would.
func (m *mirror) foreignCommit(t *testing.T, what string, change func(work string, docs []string)) {
	t.Helper()
	// Somebody changes what the burst wrote, not just the seed.
	burstDocs := func(files string) []string {
		return slices.DeleteFunc(strings.Fields(files), func(p string) bool { return ownerOf(p) == "" })
	}
	m.poll(time.Minute, "burst documents pushed", func() (bool, error) {
		out, err := gitErr(m.bare, "ls-tree", "-r", "--name-only", "main", "--", folder+"/")
		return len(burstDocs(out)) >= 4, err
	})
	for attempt := 0; attempt < 10; attempt++ {
		work := filepath.Join(t.TempDir(), "work")
		git(t, "", "clone", "--quiet", m.url, work)
		docs := burstDocs(git(t, work, "ls-files", folder))
		change(work, docs)
		git(t, work, "add", "-A")
		git(t, work, "commit", "--quiet", "-m", "By hand: "+what)
		if _, err := gitErr(work, "push", "--quiet", "origin", "HEAD:main"); err == nil {
			return
		}
		// Reverser pushed in between: start again from its head.
	}
	t.Fatal("the foreign commit was rejected ten times")
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitErr(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gitErr(dir string, args ...string) (string, error) {
	return harness.GitAsErr(harness.Identity{Name: foreignAuthor, Email: "somebody@example.com"}, dir, args...)
}

// metric reads one series from the controller's /metrics, or, given a bare
// name, the sum of its series; 0 when absent or while the controller is down.
func metric(t *testing.T, series string) float64 {
	t.Helper()
	v, _ := harness.Metric(env.MetricsURL, series)
	return v
}

// fill writes file until the disk it is on is full.
func fill(t *testing.T, file string) {
	t.Helper()
	f, err := os.Create(file)
	must(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
}

// etcdPut writes a key to kube-apiserver's etcd through its JSON gateway and
// returns the revision it made.
func etcdPut(t *testing.T, key, value string) int64 {
	t.Helper()
	var resp struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	etcdCall(t, "/v3/kv/put", map[string]any{"key": []byte(key), "value": []byte(value)}, &resp)
	rev, err := strconv.ParseInt(resp.Header.Revision, 10, 64)
	must(t, err)
	return rev
}

// etcdCompact compacts etcd's history up to rev.
func etcdCompact(t *testing.T, rev int64) {
	t.Helper()
	etcdCall(t, "/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil)
}

func etcdCall(t *testing.T, path string, req any, resp any) {
	t.Helper()
	body, err := json.Marshal(req)
	must(t, err)
	r, err := http.Post(env.KubeEtcdURL+path, "application/json", bytes.NewReader(body))
	must(t, err)
	defer r.Body.Close()
	data, err := io.ReadAll(r.Body)
	must(t, err)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("etcd %s: %s: %s", path, r.Status, data)
	}
	if resp != nil {
		must(t, json.Unmarshal(data, resp))
	}
}
