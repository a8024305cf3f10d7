// Command reverser-gitserver serves the bare repositories under --root over
// smart HTTP on loopback, for the local control plane and the tests.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"k8s.io/klog/v2"

	"reverser.dev/reverser/test/gitserver"
)

func main() {
	root := flag.String("root", "", "directory holding the bare repositories")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	if *root == "" {
		fmt.Fprintln(os.Stderr, "--root is required")
		os.Exit(2)
	}
	h, err := gitserver.Handler(*root)
	if err != nil {
		klog.ErrorS(err, "Starting git server")
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		klog.ErrorS(err, "Listening", "address", *listen)
		os.Exit(1)
	}
	klog.InfoS("Serving Git over HTTP", "url", "http://"+ln.Addr().String()+gitserver.PathPrefix+"/", "root", *root)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		klog.ErrorS(err, "Serving")
		os.Exit(1)
	}
}
