// Command reverser-controlplane starts and stops the local control plane
// (`make up`, `make down`) with its state in one directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"reverser.dev/reverser/test/controlplane"
)

func main() {
	fs := flag.NewFlagSet("reverser-controlplane", flag.ExitOnError)
	dir := fs.String("dir", "_output/local", "state directory")
	cpBin := fs.String("control-plane-bin", "", "directory with etcd, kube-apiserver and kube-controller-manager")
	bin := fs.String("bin", "bin", "directory with reverser-apiserver and reverser-gitserver")
	fluxBin := fs.String("flux-bin", "", "directory with Flux's controllers and CRDs (hack/build-flux.sh prints it); empty runs no Flux")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: reverser-controlplane up|down [flags]")
		os.Exit(2)
	}
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	switch os.Args[1] {
	case "up":
		if *cpBin == "" {
			fmt.Fprintln(os.Stderr, "--control-plane-bin is required (hack/build-control-plane.sh prints it)")
			os.Exit(2)
		}
		start := time.Now()
		fmt.Println("Starting the local control plane:")
		env, err := controlplane.Up(ctx, controlplane.Options{Dir: *dir, ControlPlaneBin: *cpBin, ReverserBin: *bin,
			FluxBin: *fluxBin, Progress: os.Stdout})
		if err != nil {
			fmt.Fprintf(os.Stderr, "make up failed: %v\nLogs are in %s/logs.\n", err, *dir)
			os.Exit(1)
		}
		fmt.Printf("Up in %.1fs. State and logs in %s.\n", time.Since(start).Seconds(), env.Dir)
		fmt.Printf("  source %s/env    # KUBECONFIG (admin), KUBECONFIG_ALICE, KUBECONFIG_BOB, GIT_BASE_URL, ...\n", env.Dir)
		fmt.Println("  make down          # stop it")
	case "down":
		if err := controlplane.Down(*dir); err != nil {
			fmt.Fprintf(os.Stderr, "make down: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("The local control plane is stopped.")
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: want up or down\n", os.Args[1])
		os.Exit(2)
	}
}
