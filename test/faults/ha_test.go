package faults

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	"reverser.dev/reverser/pkg/servingcert"
	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/gitserver"
)

// leaseName is the controllers' leader election Lease in ReverserNamespace.
const leaseName = "reverser-controller"

// auditBatchMaxWait is how long kube-apiserver batches audit events on the
// plane (controlplane.Options.AuditBatchMaxWait's default).
const auditBatchMaxWait = time.Second

// maxFailover bounds a takeover with the controllers' default leader
// election (10s lease, 2s retry): the standby may see the leader's last
// renewal one jittered retry late (client-go waits retry × [1, 2.2]), and
// try to acquire one jittered retry after the lease expired, so the bound
// is lease + 2 × 2.2 × retry, plus a second for the test's own reads.
const maxFailover = 10*time.Second + 2*2200*time.Millisecond*2 + time.Second

// TestHA runs on a plane of its own (G3): a 3-member etcd, three API server
// replicas on it behind a balancer, two controllers electing a leader. The
// leading controller is killed with SIGKILL during a burst: the standby
// must lead within maxFailover and the mirror invariant must hold. Then one
// API server replica is killed: requests to the others must not fail.
func TestHA(t *testing.T) {
	root, err := filepath.Abs("../..")
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ha, stop, err := controlplane.ForTests(ctx, root, "faults-ha", "", os.Stdout, func(o *controlplane.Options) { o.HA = true })
	must(t, err)
	t.Cleanup(func() { must(t, stop()) })
	admin := client(t, ha.KubeconfigAdmin)

	t.Run("the leading controller killed (SIGKILL) mid-burst", func(t *testing.T) {
		var failover time.Duration
		haRow(t, ha, fault{name: "HA: leading controller killed (SIGKILL)", fallback: fallbackControllerLost, inject: func(t *testing.T, _ *mirror) {
			failover = killLeader(t, ha, admin)
		}})
		say(t, fmt.Sprintf("HA failover: the standby led %.1fs after the leader was killed", failover.Seconds()))
		if failover > maxFailover {
			t.Errorf("failover took %s, more than leader election allows (%s)", failover, maxFailover)
		}
	})

	t.Run("split brain: the leader paused (SIGSTOP) past its Lease, resumed mid-push", func(t *testing.T) {
		var late []gitserver.Attempt
		var paused string
		haRow(t, ha, fault{name: "HA: split brain, leader paused past its Lease, resumed mid-push", fallback: fallbackLeaderPaused,
			inject: func(t *testing.T, m *mirror) { paused, late = splitBrain(t, ha, admin, m) }})
		say(t, fmt.Sprintf("HA split brain: %d pushes sent by the paused leader (%s) after it lost its Lease", len(late), paused))
		for _, a := range late {
			t.Errorf("the paused leader pushed after it lost its Lease: %s at %s", a.Path, a.At.Format(time.RFC3339Nano))
		}
	})

	t.Run("an API server replica killed (SIGKILL)", func(t *testing.T) {
		apiServerReplicaDies(t, ha, admin)
	})
}

// haRow runs f on the HA plane as a row of the table, printed even when
// the run fails.
func haRow(t *testing.T, ha *controlplane.Env, f fault) {
	t.Helper()
	r := &result{fault: f.name}
	defer func() { printRows(t, []result{*r}) }()
	runFault(t, ha, f, r)
	checkInvariant(t, r, f.fallback)
}

// say logs msg and prints it beside the table.
func say(t *testing.T, msg string) {
	t.Log(msg)
	fmt.Println(msg)
}

// attributedAgain returns when the audit route reaches the leader again
// (kube-apiserver moves its audit connection only once the old one fails,
// and retries with backoff): alice writes a marker until a commit carries
// it under her name. It returns when the last marker was written.
func (m *mirror) attributedAgain() time.Time {
	m.t.Helper()
	marker := uniqueMarker()
	doc := path.Join(folder, m.ns, "configmaps", marker+".yaml")
	var written time.Time
	for i := 0; ; i++ {
		written = time.Now()
		_, err := m.authors[controlplane.UserAlice].CoreV1().ConfigMaps(m.ns).Apply(context.Background(),
			corev1apply.ConfigMap(marker, m.ns).WithData(map[string]string{"n": strconv.Itoa(i)}), metav1.ApplyOptions{FieldManager: "faults"})
		must(m.t, err)
		var authors []string // newest first, one a commit of the marker
		m.poll(time.Minute, "the marker's write committed", func() (bool, error) {
			out, err := gitErr(m.bare, "log", "--format=%an", "main", "--", doc)
			authors = strings.Split(strings.TrimSpace(out), "\n")
			return err == nil && len(authors) > i && authors[0] != "", err
		})
		if authors[0] == controlplane.UserAlice {
			return written
		}
		if time.Since(m.row.authorsAway[0]) > 3*time.Minute {
			m.t.Fatalf("the audit route never reached the new leader: the marker is still committed by %q", authors[0])
		}
	}
}

// uniqueMarker names a ConfigMap no burst writes.
func uniqueMarker() string { return "marker-" + strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10) }

// holder is the leader election identity holding the Lease ("" none).
func holder(admin kubernetes.Interface) string {
	l, err := admin.CoordinationV1().Leases(controlplane.ReverserNamespace).Get(context.Background(), leaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leader names the controller holding the Lease, and its identity.
func leader(t *testing.T, ha *controlplane.Env, admin kubernetes.Interface) (name, identity string) {
	t.Helper()
	identity = holder(admin)
	for i := range 2 {
		pid, err := controlplane.Pid(ha, controlplane.ControllerName(i))
		must(t, err)
		if strings.HasSuffix(identity, "_"+strconv.Itoa(pid)) {
			return controlplane.ControllerName(i), identity
		}
	}
	t.Fatalf("no controller of this plane holds the Lease (holder %q)", identity)
	return "", ""
}

// takeover waits until a controller other than the one of identity old
// holds the Lease and has pointed the audit Service at itself, and returns
// how long after since the Lease changed hands.
func takeover(t *testing.T, admin kubernetes.Interface, old string, since time.Time) time.Duration {
	t.Helper()
	var took time.Duration
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		now := holder(admin)
		if now == "" || now == old {
			return false, nil
		}
		if took == 0 {
			took = time.Since(since)
		}
		s, err := admin.DiscoveryV1().EndpointSlices(controlplane.ReverserNamespace).Get(context.Background(), "reverser-audit-leader",
			metav1.GetOptions{})
		return err == nil && s.Annotations["reverser.dev/leader"] == now, nil
	})
	if err != nil {
		t.Fatalf("no new leader, or it did not take the audit Service (holder %q): %v", holder(admin), err)
	}
	return took
}

// killLeader kills the controller holding the Lease and returns how long
// until the other held it and pointed the audit Service at itself.
func killLeader(t *testing.T, ha *controlplane.Env, admin kubernetes.Interface) time.Duration {
	t.Helper()
	name, identity := leader(t, ha, admin)
	must(t, controlplane.Kill(ha, name))
	failover := takeover(t, admin, identity, time.Now())
	// Back as a standby, as a Pod's restart would be.
	t.Cleanup(func() { must(t, controlplane.Restart(ha, name)) })
	return failover
}

// splitBrain pauses the leading controller (SIGSTOP) until the other has
// taken its Lease, has the Git server hold the new leader's next push, and
// resumes the old one (SIGCONT) meanwhile: it runs on for a moment believing
// it leads, with changes of its own to push. Once it has exited (it does
// when it learns it lost the Lease), the held push goes on. It returns the
// paused controller's name and the pushes it sent after it was resumed.
// Writes answered from a batch before the pause until the audit route
// reaches the new leader again may lose their authors (m.row.authorsAway).
func splitBrain(t *testing.T, ha *controlplane.Env, admin kubernetes.Interface, m *mirror) (string, []gitserver.Attempt) {
	t.Helper()
	name, identity := leader(t, ha, admin)
	must(t, controlplane.Signal(ha, name, syscall.SIGSTOP))
	m.row.authorsAway[0] = time.Now().Add(-auditBatchMaxWait)
	t.Cleanup(func() {
		_ = controlplane.Signal(ha, name, syscall.SIGCONT)
		must(t, controlplane.Restart(ha, name)) // back as a standby
	})
	takeover(t, admin, identity, time.Now())

	fault := filepath.Join(ha.GitRoot, gitserver.FaultFile)
	must(t, os.WriteFile(fault, []byte(gitserver.HoldPushes), 0o644))
	defer func() { _ = os.Remove(fault) }()
	poll(t, 2*time.Minute, "the new leader's push held by the Git server", func() bool {
		_, err := os.Stat(filepath.Join(ha.GitRoot, gitserver.HeldFile))
		return err == nil
	})
	resumed := time.Now()
	must(t, controlplane.Signal(ha, name, syscall.SIGCONT))
	poll(t, 2*time.Minute, "the resumed controller giving up and exiting", func() bool { return !controlplane.Running(ha, name) })
	must(t, os.Remove(fault))
	m.row.authorsAway[1] = m.attributedAgain()

	attempts, err := gitserver.Attempts(ha.GitRoot)
	must(t, err)
	var late []gitserver.Attempt
	named := false // the log names replicas: the check below can fail
	for _, a := range attempts {
		named = named || strings.HasPrefix(a.Agent, "go-git/") && strings.Contains(a.Agent, " reverser-controller-")
		if a.At.After(resumed) && strings.HasSuffix(a.Agent, " "+name) {
			late = append(late, a)
		}
	}
	if !named {
		t.Fatalf("no push the Git server logged names the replica that sent it (%s unset?): %+v", controlplane.AgentEnv, attempts)
	}
	return name, late
}

// apiServerReplicaDies kills one API server replica while clients ask the
// other two directly, then checks they never failed, that the aggregated
// API through kube-apiserver recovers, and that the replicas share one
// store.
func apiServerReplicaDies(t *testing.T, ha *controlplane.Env, admin kubernetes.Interface) {
	urls := strings.Split(ha.ReverserAPIServerReplicas, ",")
	if len(urls) != 3 {
		t.Fatalf("replicas: %q", ha.ReverserAPIServerReplicas)
	}
	ns := "ha-" + strconv.FormatInt(time.Now().Unix()%100000, 10)
	_, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	survivors := []versioned.Interface{replicaClient(t, ha, admin, urls[1]), replicaClient(t, ha, admin, urls[2])}

	var requests, failures atomic.Int64
	var firstFailure atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A steady rate of requests, not a wait.
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				requests.Add(1)
				if _, err := c.ReverserV1alpha1().GitTargets(ns).List(ctx, metav1.ListOptions{}); err != nil && ctx.Err() == nil {
					failures.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
				}
			}, 20*time.Millisecond)
		}()
	}
	// Some requests before the kill, and at least as many after it.
	poll(t, time.Minute, "requests under way", func() bool { return requests.Load() >= 50 })
	must(t, controlplane.Kill(ha, controlplane.APIServerName(0)))
	t.Cleanup(func() { must(t, controlplane.Restart(ha, controlplane.APIServerName(0))) })
	after := requests.Load()
	poll(t, time.Minute, "requests after the kill", func() bool { return requests.Load() >= after+100 })
	cancel()
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d requests to the surviving replicas failed; the first: %v", n, requests.Load(), firstFailure.Load())
	}

	// Through kube-apiserver, the balancer skips the dead replica.
	cfg, err := clientcmd.BuildConfigFromFlags("", ha.KubeconfigAdmin)
	must(t, err)
	viaAggregator := versioned.NewForConfigOrDie(cfg)
	poll(t, time.Minute, "the aggregated API answering", func() bool {
		_, err := viaAggregator.ReverserV1alpha1().GitTargets(ns).List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
	// One store: what one replica writes, the other reads.
	_, err = survivors[0].ReverserV1alpha1().GitProviders(ns).Create(context.Background(), &v1.GitProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Spec: v1.GitProviderSpec{URL: "http://127.0.0.1:1/r.git", AllowInsecureHTTP: true},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = survivors[1].ReverserV1alpha1().GitProviders(ns).Get(context.Background(), "shared", metav1.GetOptions{})
	must(t, err)
}

// replicaClient reaches one replica directly, as admin: the replica
// authenticates the bearer token with a TokenReview and verifies it with
// the CA every replica's certificate chains to.
func replicaClient(t *testing.T, ha *controlplane.Env, admin kubernetes.Interface, url string) versioned.Interface {
	t.Helper()
	s, err := admin.CoreV1().Secrets(controlplane.ReverserNamespace).Get(context.Background(), "reverser-apiserver-ca", metav1.GetOptions{})
	must(t, err)
	adminCfg, err := clientcmd.BuildConfigFromFlags("", ha.KubeconfigAdmin)
	must(t, err)
	cfg := &rest.Config{Host: url, BearerToken: adminCfg.BearerToken, Timeout: 5 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.Data[servingcert.CACertKey],
			ServerName: "reverser-apiserver." + controlplane.ReverserNamespace + ".svc"}}
	if len(cfg.TLSClientConfig.CAData) == 0 {
		t.Fatalf("the CA Secret holds no %s", servingcert.CACertKey)
	}
	return versioned.NewForConfigOrDie(cfg)
}

func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
