//go:build bench

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/ledger"
)

// loadUsers write P3's attributed load, each through admin's impersonation
// (the audit event names the impersonated user, who authors the change).
var loadUsers = []string{"dev-0", "dev-1", "dev-2", "dev-3"}

// attributedEdits is P3 with the audit route on: perSecond patches for d
// over n ConfigMaps by four users, every write recorded in a ledger with
// a value nobody else writes. Once Git equals the cluster, the branch's
// commits are checked against the ledger (test/ledger): no write lost,
// committed twice, under another name or none, or out of order.
func attributedEdits(ctx context.Context, t *testing.T, env *controlplane.Env, admin *rest.Config, kube kubernetes.Interface, n, perSecond int,
	d time.Duration) {
	const ns = "p3a"
	namespace(ctx, t, kube, ns)
	name := func(i int) string { return fmt.Sprintf("cm-%04d", i) }
	createConfigMaps(ctx, t, kube, ns, 0, n, name, func(int) map[string]string { return map[string]string{"v": "seed"} })
	bare, paths := mirrorConfigMaps(ctx, t, env, "local", ns, n, name)
	base := serverHead(bare)

	watched := watchNewest(ctx, t, kube, ns)
	l := &ledger.Ledger{}
	clients := make([]kubernetes.Interface, len(loadUsers))
	for i, u := range loadUsers {
		cfg := rest.CopyConfig(admin)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: u, Groups: []string{"system:masters"}}
		clients[i] = kubernetes.NewForConfigOrDie(cfg)
	}
	done, failed, firstErr, loadTook := generateBy(ctx, clients, ns, n, perSecond, d, l)
	require.NotZero(t, done, "no write was taken; the first refusal: %v", firstErr)
	watchLag, caughtUp, final := catchUp(ctx, t, kube, ns, bare, paths, "v", watched, time.Now())

	commits, err := ledger.History(bare, base, fmt.Sprintf("mirror/%s/configmaps", ns))
	require.NoError(t, err)
	v := ledger.Check(l.ByObject(), commits, final, ledger.Names{Committer: "Reverser", Unresolved: identity.UnresolvedName, Foreign: "\x00nobody"},
		func(o string) bool { return strings.HasPrefix(o, "cm-") })
	for _, c := range []struct {
		what string
		rows []string
	}{{"lost", v.Lost}, {"committed twice", v.Duplicated}, {"credited to another", v.Misattributed},
		{"committed without their writer's name", v.Unresolved}, {"committed out of order", v.Reordered}} {
		if len(c.rows) > 0 {
			t.Errorf("%d writes %s; the first: %s", len(c.rows), c.what, strings.Join(c.rows[:min(5, len(c.rows))], "; "))
		}
	}
	achieved := float64(done) / loadTook.Seconds()
	fmt.Printf("P3 attributed: %d patches by %d users in %.1fs over %d ConfigMaps (%.0f/s asked %d/s, %d refused); %d commits, "+
		"%d writes committed by their writers; Git equal to the cluster %.2fs after the last edit, client-go watch floor %.3fs\n",
		done, len(loadUsers), loadTook.Seconds(), n, achieved, perSecond, failed, len(commits), v.Committed, caughtUp.Seconds(), watchLag.Seconds())
	record(row{name: fmt.Sprintf("P3 attributed: %d users, %d edits/s for %s over %d objects", len(loadUsers), perSecond, d, n),
		measured: fmt.Sprintf("%.0f/s; Git==cluster +%.2fs; %d by their writers", achieved, caughtUp.Seconds(), v.Committed),
		floor:    fmt.Sprintf("watch +%.3fs", watchLag.Seconds()), ratio: (loadTook + caughtUp).Seconds() / (loadTook + watchLag).Seconds(),
		goal: "≥ 500/s, every author right, ≤ +5s"})
}

// generateBy patches ConfigMaps cm-0000.. of ns at perSecond for d from 64
// goroutines, each the only writer of its objects (so its order is the API
// server's), through clients[i%len(clients)] for object i; each write sets
// data.v to a value nobody else writes and is recorded in l.
func generateBy(ctx context.Context, clients []kubernetes.Interface, ns string, n, perSecond int, d time.Duration,
	l *ledger.Ledger) (done, failed int64, firstErr error, took time.Duration) {
	limiter := rate.NewLimiter(rate.Limit(perSecond), max(1, perSecond/50))
	load, stop := context.WithTimeout(ctx, d)
	defer stop()
	var seq, ok, refused atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	const writers = 64
	for g := range min(writers, n) {
		wg.Go(func() {
			for i := g; limiter.Wait(load) == nil; i += writers {
				if i >= n {
					i = g
				}
				user := loadUsers[i%len(loadUsers)]
				e := ledger.Write{Object: fmt.Sprintf("cm-%04d", i), Writer: user, Value: fmt.Sprintf("%s-%d", user, seq.Add(1))}
				cm, err := clients[i%len(clients)].CoreV1().ConfigMaps(ns).Patch(ctx, e.Object, types.MergePatchType,
					fmt.Appendf(nil, `{"data":{"v":%q}}`, e.Value), metav1.PatchOptions{})
				e.At = time.Now()
				if err != nil {
					first.CompareAndSwap(nil, &err)
					refused.Add(1)
					e.Uncertain = true // refused, or lost on the way back: Git may hold it or not
					l.Add(e)
					continue
				}
				e.RV, _ = strconv.ParseInt(cm.ResourceVersion, 10, 64)
				l.Add(e)
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		firstErr = *e
	}
	return ok.Load(), refused.Load(), firstErr, time.Since(start)
}
