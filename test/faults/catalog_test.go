package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/test/blackhole"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
	"reverser.dev/reverser/test/harness"
	"reverser.dev/reverser/test/ledger"
)

// fault is one row of the table. inject runs while the burst goes on and
// returns once the fault is over: the process is back, the outage ended.
type fault struct {
	name   string
	inject func(t *testing.T, m *mirror)
	// private mirrors into a repository that needs the credentials of the
	// Secret git-credentials.
	private bool
	// fallback, when set, is why this fault may leave writes committed by
	// the committer or the unresolved author (docs/faults.md).
	fallback string
	// recovered, when set, is a metric of the controller (a series, or a
	// name whose series are summed) that must grow from before the fault to
	// the end of the run: the controller counted its recovery.
	recovered string
}

// Why a fault may leave writes without their writer's name; docs/faults.md
// says more.
const (
	fallbackControllerLost = "the controller died with open windows: the one that starts next finds the cluster ahead of Git and " +
		"commits the difference as the committer (its facts were in the dead one's memory)"
	fallbackLeaderPaused = "the leader was paused with open windows, and kube-apiserver's audit connection stayed with it until it " +
		"exited and reconnected: the new leader commits the changes made meanwhile as the unresolved author, as often as their windows close"
	fallbackAuditBatchLost = "kube-apiserver killed (SIGKILL) with audit events batched and not sent yet: no fact names the " +
		"authors of the last changes it took, which are committed by the unresolved author after the grace"
)

func faults() []fault {
	return []fault{
		{name: "none", inject: func(*testing.T, *mirror) {}},
		{name: "controller killed (SIGKILL) mid-burst", fallback: fallbackControllerLost, inject: func(t *testing.T, _ *mirror) {
			must(t, controlplane.Kill(env, "reverser-controller"))
			must(t, controlplane.Restart(env, "reverser-controller"))
		}},
		{name: "controller killed (SIGKILL) mid-push, the push lands", fallback: fallbackControllerLost, inject: func(t *testing.T, m *mirror) {
			head := m.killMidPush(t, "")
			m.poll(time.Minute, "the held push received", func() (bool, error) { return m.pushed(head) })
			must(t, controlplane.Restart(env, "reverser-controller"))
		}},
		{name: "controller killed (SIGKILL) mid-push, the push is dropped", fallback: fallbackControllerLost, inject: func(t *testing.T, m *mirror) {
			head := m.killMidPush(t, gitserver.DropHeld)
			m.poll(time.Minute, "the held push answered", func() (bool, error) {
				_, err := os.Stat(filepath.Join(env.GitRoot, gitserver.HeldFile))
				return os.IsNotExist(err), nil
			})
			must(t, os.Remove(filepath.Join(env.GitRoot, gitserver.FaultFile)))
			if landed, err := m.pushed(head); err != nil || landed {
				t.Fatalf("the dropped push was received (%v)", err)
			}
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
		{name: "watch expired (410)", fallback: fallbackAuditBatchLost, recovered: `reverser_watch_errors_total{reason="expired"}`, inject: func(t *testing.T, m *mirror) {
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
		{name: "Git server slow (1 s a request)", inject: func(t *testing.T, m *mirror) {
			// Pushes go on through the slow host while the burst does: each
			// takes seconds, and the changes that arrive meanwhile wait.
			before := metric(t, `reverser_pushes_total{result="ok"}`)
			fault := filepath.Join(env.GitRoot, gitserver.FaultFile)
			must(t, os.WriteFile(fault, []byte(gitserver.Slow+"1s"), 0o644))
			defer func() { must(t, os.Remove(fault)) }()
			until := time.Now().Add(map[bool]time.Duration{true: time.Minute}[full])
			m.poll(3*time.Minute, "pushes through the slow server", func() (bool, error) {
				return metric(t, `reverser_pushes_total{result="ok"}`) >= before+3 && !time.Now().Before(until), nil
			})
		}},
		{name: "kube-apiserver's clock 1 h ahead (audit timestamps)", inject: skewed("1h")},
		{name: "kube-apiserver's clock 1 h behind (audit timestamps)", inject: skewed("-1h")},
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
			m.foreignCommit(t, "edit", func(work string, burst, quiet []string) {
				for _, d := range []string{burst[0], quiet[0]} {
					must(t, os.WriteFile(filepath.Join(work, d), []byte("edited: by hand\n"), 0o644))
				}
			})
		}},
		{name: "foreign commit deletes documents", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			m.foreignCommit(t, "delete", func(work string, burst, quiet []string) {
				for _, d := range slices.Concat(burst[:min(3, len(burst))], quiet[:2]) {
					must(t, os.Remove(filepath.Join(work, d)))
				}
			})
		}},
		{name: "foreign commit deletes the folder", recovered: "reverser_worker_recoveries_total", inject: func(t *testing.T, m *mirror) {
			m.foreignCommit(t, "delete the folder", func(work string, _, _ []string) {
				must(t, os.RemoveAll(filepath.Join(work, folder)))
			})
		}},
	}
}

// skewed moves the timestamps of the audit events the controller gets by
// skew, as a kube-apiserver whose clock is off would send them, for as
// long as three pushes take (a minute at least in the full run).
func skewed(skew string) func(t *testing.T, m *mirror) {
	return func(t *testing.T, m *mirror) {
		if env.AuditSkewControl == "" {
			t.Fatal("this control plane has no audit relay: run the suite on a control plane of its own (unset REVERSER_FAULTS_LOCAL_DIR)")
		}
		before := metric(t, `reverser_pushes_total{result="ok"}`)
		must(t, os.WriteFile(env.AuditSkewControl, []byte(skew), 0o644))
		defer func() { must(t, os.Remove(env.AuditSkewControl)) }()
		until := time.Now().Add(map[bool]time.Duration{true: time.Minute}[full])
		m.poll(3*time.Minute, "pushes while the audit clock is off", func() (bool, error) {
			return metric(t, `reverser_pushes_total{result="ok"}`) >= before+3 && !time.Now().Before(until), nil
		})
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

// quietObjects are ConfigMaps made before the burst and never touched by
// it: the first push after a fault must hold each of them as the cluster
// does, whatever the fault did to Git (FIRST-PUSH).
const quietObjects = 4

// runFault runs a burst, injects f a third of the way in, and measures the
// outcome into r once the burst is over: how long until Git equals the
// cluster, whether the first push after the fault already did, and what the
// ledger finds in the commits since the burst began.
func runFault(t *testing.T, env *controlplane.Env, f fault, r *result) {
	m := newMirror(t, env, f.private, r)
	objects, ops := 20, 120
	if full {
		objects, ops = 100, 1200
	}
	for i := range quietObjects + 1 {
		name := fmt.Sprintf("quiet-%d", i)
		if i == quietObjects {
			name = "seed"
		}
		_, err := m.admin.CoreV1().ConfigMaps(m.ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"v": name}}, metav1.CreateOptions{})
		must(t, err)
	}
	m.poll(time.Minute, "the seed and the quiet objects pushed", func() (bool, error) {
		diff, _, err := m.differences()
		return err == nil && len(diff) == 0, err
	})
	base := m.head()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := &ledger.Ledger{}
	burst, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.burst(burst, objects, l)
	}()
	defer func() { stop(); <-done }()
	// A third of the changes before the fault, the rest after it is over.
	m.poll(time.Minute, "the burst under way", func() (bool, error) { return l.Made() >= ops/3, nil })
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
	after := l.Made()
	m.poll(3*time.Minute, "the burst going on after the fault", func() (bool, error) { return l.Made() >= after+2*ops/3, nil })
	stop()
	<-done
	ended := time.Now()
	r.made = l.Made()

	var lost []string
	var final map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 3*time.Minute, true,
		func(context.Context) (bool, error) {
			d, f, err := m.differences()
			if err != nil {
				return false, nil // a server still coming back
			}
			lost, final = d, f
			return len(d) == 0, nil
		})
	r.converged = time.Since(ended)
	if err != nil {
		for _, p := range lost {
			r.lost = append(r.lost, p+" differs from the cluster at the end")
		}
	}
	// The poll above may see the first push before the watcher of the head
	// does (it polls at another pace): a head that moved is a push, and its
	// watcher reports it within one of its polls.
	select {
	case r.firstPushAfter = <-pushedAgain:
	case <-time.After(5 * time.Second):
		r.note = "nothing was pushed after the fault was over"
		t.Error(r.note)
	}
	r.firstPush = m.firstPushVerdict(headAtOver)
	if f.recovered != "" {
		if after := metric(t, f.recovered); after <= before {
			t.Errorf("%s stayed at %v: the controller did not count its recovery", f.recovered, after)
		}
	}
	commits, err := ledger.History(m.bare, base, folder)
	must(t, err)
	r.commits = len(commits)
	v := ledger.Check(l.ByObject(), commits, final, ledger.Names{Committer: committerName, Unresolved: identity.UnresolvedName,
		Foreign: foreignAuthor}, isBurstObject)
	r.lost = append(r.lost, v.Lost...)
	r.duplicated, r.misattributed, r.unresolved, r.reordered, r.byWriter = v.Duplicated, v.Misattributed, v.Unresolved, v.Reordered, v.Committed
	r.unresolvedWrites = v.UnresolvedWrites
}

// isBurstObject says whether a document's object is one the burst writes.
func isBurstObject(name string) bool { return strings.HasPrefix(name, "cm-") }

// firstPushVerdict says whether the first push after head left every quiet
// object's document as the cluster holds it: "yes", or what it lacked.
func (m *mirror) firstPushVerdict(head string) string {
	pushes, err := gitserver.Pushes(m.bare)
	if err != nil {
		return "no: " + err.Error()
	}
	i := slices.IndexFunc(pushes, func(p gitserver.Push) bool { return p.New == head })
	if i < 0 || i+1 >= len(pushes) {
		return "no: no push after the fault"
	}
	want, err := m.expectedDocs()
	if err != nil {
		return "no: " + err.Error()
	}
	var missing []string
	for q := range quietObjects {
		p := path.Join(folder, m.ns, "configmaps", fmt.Sprintf("quiet-%d.yaml", q))
		got, err := docAt(m.bare, pushes[i+1].New, p)
		if err != nil || !reflect.DeepEqual(got, want[p]) {
			missing = append(missing, path.Base(p))
		}
	}
	if len(missing) > 0 {
		return "no: " + strings.Join(missing, ", ")
	}
	return "yes"
}

// killMidPush has the Git server hold the next push before receiving it,
// kills the controller while it waits for the answer, and then lets the
// server go on as then says ("" receives the push as sent). It returns
// the head the push would make.
func (m *mirror) killMidPush(t *testing.T, then string) string {
	t.Helper()
	fault := filepath.Join(env.GitRoot, gitserver.FaultFile)
	must(t, os.WriteFile(fault, []byte(gitserver.HoldPushes), 0o644))
	var head string
	m.poll(time.Minute, "a push held by the Git server", func() (bool, error) {
		held, err := os.ReadFile(filepath.Join(env.GitRoot, gitserver.HeldFile))
		head = string(held)
		return err == nil && head != "", nil
	})
	must(t, controlplane.Kill(env, "reverser-controller"))
	if then == "" {
		must(t, os.Remove(fault))
	} else {
		must(t, os.WriteFile(fault, []byte(then), 0o644))
	}
	return head
}

// pushed says whether a push made head the branch's head.
func (m *mirror) pushed(head string) (bool, error) {
	pushes, err := gitserver.Pushes(m.bare)
	return slices.ContainsFunc(pushes, func(p gitserver.Push) bool { return p.New == head }), err
}

// committerName is the GitProviders' committer (the API's default): the
// author of re-asserted state.
const committerName = "Reverser"

// foreignAuthor makes the commits a fault pushes by hand.
const foreignAuthor = "Somebody"

// foreignCommit pushes, with the git CLI, a commit that changes the mirror's
// documents as somebody editing the repository by hand would.
func (m *mirror) foreignCommit(t *testing.T, what string, change func(work string, burst, quiet []string)) {
	t.Helper()
	// Somebody changes what the burst wrote, and documents nobody edits
	// now, which the first push after must put back.
	burstDocs := func(files string) []string {
		return slices.DeleteFunc(strings.Fields(files), func(p string) bool {
			return !isBurstObject(strings.TrimSuffix(path.Base(p), ".yaml"))
		})
	}
	quietDocs := func(files string) []string {
		return slices.DeleteFunc(strings.Fields(files), func(p string) bool { return !strings.HasPrefix(path.Base(p), "quiet-") })
	}
	m.poll(time.Minute, "burst documents pushed", func() (bool, error) {
		out, err := gitErr(m.bare, "ls-tree", "-r", "--name-only", "main", "--", folder+"/")
		return len(burstDocs(out)) >= 4, err
	})
	// Straight into the bare repository, not over HTTP: Reverser pushes
	// every few hundred milliseconds, and an attempt must fit between two.
	work := filepath.Join(t.TempDir(), "work")
	git(t, "", "clone", "--quiet", m.bare, work)
	var last error
	for attempt := 0; attempt < 50; attempt++ {
		// Start again from Reverser's head each time.
		git(t, work, "fetch", "--quiet", "origin")
		git(t, work, "reset", "--quiet", "--hard", "origin/main")
		files := git(t, work, "ls-files", folder)
		change(work, burstDocs(files), quietDocs(files))
		git(t, work, "add", "-A")
		git(t, work, "commit", "--quiet", "-m", "By hand: "+what)
		_, err := gitErr(work, "push", "--quiet", "origin", "HEAD:main")
		if err == nil {
			return
		}
		last = err
	}
	pushes, _ := gitserver.Pushes(m.bare)
	log, _ := gitErr(m.bare, "log", "-8", "--format=%h %an %ad %s", "--date=iso-strict", "main")
	t.Fatalf("the foreign commit was rejected 50 times; the last time: %v; %d pushes; the branch:\n%s", last, len(pushes), log)
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
