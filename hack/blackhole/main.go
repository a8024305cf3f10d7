// Command reverser-blackhole forwards TCP connections on loopback; it stalls
// them, silently, while its control file says "stall", and refuses them
// while it says "refuse": the fault suite's network between
// reverser-controller and kube-apiserver. With several upstreams it takes
// them in turn, skipping one that does not answer: the HA control plane's
// Service in front of the API server replicas. With --endpointslice it
// forwards to what a Service's EndpointSlices name, as kube-proxy would:
// the HA control plane's audit Service, which the leading controller
// points at itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/test/blackhole"
)

func main() {
	listen := flag.String("listen", "", "address to listen on, with its port")
	upstream := flag.String("upstream", "", "comma-separated addresses to forward to, in turn")
	slice := flag.String("endpointslice", "", "namespace/service whose EndpointSlices name the upstreams, instead of --upstream")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig to read --endpointslice with")
	control := flag.String("control", "", "file that says \"stall\" or \"refuse\" while connections are to stall or be refused")
	flag.Parse()
	if *listen == "" || (*upstream == "") == (*slice == "") || *control == "" {
		fmt.Fprintln(os.Stderr, "--listen, --control and one of --upstream and --endpointslice are required")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	p := &blackhole.Proxy{Control: *control, Poll: 50 * time.Millisecond}
	if *upstream != "" {
		p.Upstreams = strings.Split(*upstream, ",")
	} else {
		resolve, err := endpoints(*kubeconfig, *slice)
		if err != nil {
			klog.ErrorS(err, "Reading EndpointSlices")
			os.Exit(2)
		}
		p.Resolve = resolve
	}
	klog.InfoS("Forwarding", "listen", *listen, "upstream", *upstream, "endpointslice", *slice, "control", *control)
	if err := p.Serve(ctx, *listen); err != nil {
		klog.ErrorS(err, "Serving")
		os.Exit(1)
	}
}

// endpoints resolves the ready endpoints of a Service's EndpointSlices.
func endpoints(kubeconfig, ref string) (func() ([]string, error), error) {
	ns, svc, ok := strings.Cut(ref, "/")
	if !ok {
		return nil, fmt.Errorf("--endpointslice %q is not namespace/service", ref)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 2 * time.Second
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return func() ([]string, error) {
		list, err := kube.DiscoveryV1().EndpointSlices(ns).List(context.Background(),
			metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return nil, err
		}
		var addrs []string
		for _, s := range list.Items {
			if len(s.Ports) == 0 || s.Ports[0].Port == nil {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				for _, a := range e.Addresses {
					// RFC 6761: names under .localhost are loopback; the
					// system resolver may not say so.
					if strings.HasSuffix(a, ".localhost") {
						a = "127.0.0.1"
					}
					addrs = append(addrs, net.JoinHostPort(a, strconv.Itoa(int(*s.Ports[0].Port))))
				}
			}
		}
		return addrs, nil
	}, nil
}
