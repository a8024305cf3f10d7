// Command reverser-controlplane starts and stops the local control plane
// (`make up`, `make down`) with its state in one directory, and starts a
// second cluster beside it as a source cluster (`source`, for the demo).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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
	argoBin := fs.String("argocd-bin", "", "directory with Argo CD's controllers and core-install.yaml (hack/build-argocd.sh prints it); empty runs no Argo CD")
	name := fs.String("name", "source", "source: the source cluster's name, and the KubeProvider whose audit route it posts to")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: reverser-controlplane up|down|source [flags]")
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
			FluxBin: *fluxBin, ArgoCDBin: *argoBin, Progress: os.Stdout})
		if err != nil {
			fmt.Fprintf(os.Stderr, "make up failed: %v\nLogs are in %s/logs.\n", err, *dir)
			os.Exit(1)
		}
		fmt.Printf("Up in %.1fs. State and logs in %s.\n", time.Since(start).Seconds(), env.Dir)
		fmt.Printf("  source %s/env    # KUBECONFIG (admin), KUBECONFIG_ALICE, KUBECONFIG_BOB, GIT_BASE_URL, ...\n", env.Dir)
		fmt.Println("  make down          # stop it")
	case "source":
		if err := startSource(ctx, *dir, *cpBin, *name); err != nil {
			fmt.Fprintf(os.Stderr, "starting the source cluster: %v\n", err)
			os.Exit(1)
		}
	case "down":
		if err := controlplane.Down(*dir); err != nil {
			fmt.Fprintf(os.Stderr, "make down: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("The local control plane is stopped.")
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: want up, down or source\n", os.Args[1])
		os.Exit(2)
	}
}

// startSource starts a source cluster beside the running control plane in
// dir and writes <dir>/<name>/env, for shells: its kubeconfigs and the
// token its audit webhook presents.
func startSource(ctx context.Context, dir, cpBin, name string) error {
	env, err := controlplane.Load(dir)
	if err != nil {
		return fmt.Errorf("%w (make up first)", err)
	}
	src, err := controlplane.StartSource(ctx, env, cpBin, controlplane.SourceOptions{Name: name, AuditRoute: name})
	if err != nil {
		return err
	}
	lines := fmt.Sprintf("export SOURCE_KUBECONFIG_ADMIN=%q\nexport SOURCE_KUBECONFIG_ALICE=%q\nexport SOURCE_KUBECONFIG_REVERSER=%q\n"+
		"export SOURCE_AUDIT_TOKEN=%q\nexport SOURCE_KUBE_APISERVER_URL=%q\n", src.KubeconfigAdmin, src.KubeconfigAlice,
		src.KubeconfigReverser, src.AuditToken, src.KubeAPIServerURL)
	file := filepath.Join(env.Dir, name, "env")
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		return err
	}
	fmt.Printf("Source cluster %s on %s; source %s for its kubeconfigs.\n", name, src.KubeAPIServerURL, file)
	return nil
}
