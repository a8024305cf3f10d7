// Command reverser-controller mirrors the objects GitTargets select into Git:
// it watches the reverser.dev API, runs watch streams on source clusters and
// one branch worker per Git branch, and serves metrics and health checks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/controller/mirror"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	"reverser.dev/reverser/pkg/metrics"
)

type options struct {
	kubeconfig, dataDir, metricsAddr, healthAddr string
	leaderElect                                  bool
	leaseNamespace, leaseName                    string
	resync                                       time.Duration
}

func main() {
	o := options{}
	klog.InitFlags(nil)
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the control cluster (the one serving reverser.dev); in-cluster config when empty")
	flag.StringVar(&o.dataDir, "data-dir", "reverser-controller-data", "directory for the branch workers' local repositories")
	flag.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", "address of the Prometheus /metrics endpoint; empty turns it off")
	flag.StringVar(&o.healthAddr, "health-probe-bind-address", "127.0.0.1:8081", "address of /healthz and /readyz")
	flag.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader with a coordination.k8s.io Lease, so only one replica mirrors")
	flag.StringVar(&o.leaseNamespace, "leader-election-namespace", "reverser-system", "namespace of the leader election Lease")
	flag.StringVar(&o.leaseName, "leader-election-id", "reverser-controller", "name of the leader election Lease")
	flag.DurationVar(&o.resync, "resync", 30*time.Second, "how often every GitTarget is reconciled again (re-resolving rules against discovery)")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "reverser-controller failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	rev, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c := mirror.New(mirror.Config{Reverser: rev, Kube: kube, Source: cfg, DataDir: o.dataDir, Resync: o.resync})

	var leading = make(chan struct{})
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-leading:
			if !c.Synced() {
				http.Error(w, "informers not synced", http.StatusServiceUnavailable)
				return
			}
		default:
			if o.leaderElect {
				_, _ = w.Write([]byte("ok: standby, not leading"))
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	if err := serve(ctx, o.healthAddr, health); err != nil {
		return err
	}
	if o.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
		if err := serve(ctx, o.metricsAddr, mux); err != nil {
			return err
		}
	}

	runController := func(ctx context.Context) {
		close(leading)
		if err := c.Run(ctx, 2); err != nil {
			klog.ErrorS(err, "Mirror controller stopped")
		}
	}
	if !o.leaderElect {
		runController(ctx)
		return nil
	}
	id, _ := os.Hostname()
	id = fmt.Sprintf("%s_%d", id, os.Getpid())
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaseNamespace, o.leaseName, kube.CoreV1(), kube.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: runController,
			OnStoppedLeading: func() { klog.InfoS("Leadership lost", "identity", id) },
		},
	})
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// serve listens on addr and serves h until ctx is done.
func serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Serving", "address", addr)
		}
	}()
	klog.InfoS("Serving", "address", ln.Addr().String())
	return nil
}
