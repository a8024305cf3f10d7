// Command reverser-blackhole forwards TCP connections on loopback; it stalls
// them, silently, while its control file says "stall", and refuses them
// while it says "refuse": the fault suite's network between
// reverser-controller and kube-apiserver.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"reverser.dev/reverser/test/blackhole"
)

func main() {
	listen := flag.String("listen", "", "address to listen on, with its port")
	upstream := flag.String("upstream", "", "address to forward to")
	control := flag.String("control", "", "file that says \"stall\" or \"refuse\" while connections are to stall or be refused")
	flag.Parse()
	if *listen == "" || *upstream == "" || *control == "" {
		fmt.Fprintln(os.Stderr, "--listen, --upstream and --control are required")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	klog.InfoS("Forwarding", "listen", *listen, "upstream", *upstream, "control", *control)
	p := &blackhole.Proxy{Upstream: *upstream, Control: *control, Poll: 50 * time.Millisecond}
	if err := p.Serve(ctx, *listen); err != nil {
		klog.ErrorS(err, "Serving")
		os.Exit(1)
	}
}
