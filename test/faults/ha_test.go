package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	"reverser.dev/reverser/pkg/servingcert"
	"reverser.dev/reverser/test/controlplane"
)

// leaseName is the controllers' leader election Lease in ReverserNamespace.
const leaseName = "reverser-controller"

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
		f := fault{name: "HA: leading controller killed (SIGKILL)", fallback: fallbackControllerLost, inject: func(t *testing.T, _ *mirror) {
			failover = killLeader(t, ha, admin)
		}}
		r := &result{fault: f.name}
		func() {
			defer func() { printRows(t, []result{*r}) }()
			runFault(t, ha, f, r)
			checkInvariant(t, r, f.fallback)
		}()
		msg := fmt.Sprintf("HA failover: the standby led %.1fs after the leader was killed", failover.Seconds())
		t.Log(msg)
		fmt.Println(msg)
		if failover > maxFailover {
			t.Errorf("failover took %s, more than leader election allows (%s)", failover, maxFailover)
		}
	})

	t.Run("an API server replica killed (SIGKILL)", func(t *testing.T) {
		apiServerReplicaDies(t, ha, admin)
	})
}

// killLeader kills the controller holding the Lease and returns how long
// until the other held it and pointed the audit Service at itself.
func killLeader(t *testing.T, ha *controlplane.Env, admin kubernetes.Interface) time.Duration {
	t.Helper()
	holder := func() string {
		l, err := admin.CoordinationV1().Leases(controlplane.ReverserNamespace).Get(context.Background(), leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	leader := holder()
	name := ""
	for i := range 2 {
		pid, err := controlplane.Pid(ha, controlplane.ControllerName(i))
		must(t, err)
		if strings.HasSuffix(leader, "_"+strconv.Itoa(pid)) {
			name = controlplane.ControllerName(i)
		}
	}
	if name == "" {
		t.Fatalf("no controller of this plane holds the Lease (holder %q)", leader)
	}
	must(t, controlplane.Kill(ha, name))
	killed := time.Now()
	var failover time.Duration
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		now := holder()
		if now == "" || now == leader {
			return false, nil
		}
		if failover == 0 {
			failover = time.Since(killed)
		}
		s, err := admin.DiscoveryV1().EndpointSlices(controlplane.ReverserNamespace).Get(context.Background(), "reverser-audit-leader",
			metav1.GetOptions{})
		return err == nil && s.Annotations["reverser.dev/leader"] == now, nil
	})
	if err != nil {
		t.Fatalf("no new leader, or it did not take the audit Service (holder %q): %v", holder(), err)
	}
	// Back as a standby, as a Pod's restart would be.
	t.Cleanup(func() { must(t, controlplane.Restart(ha, name)) })
	return failover
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
