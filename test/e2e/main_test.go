// Package e2e tests Reverser the way users run it: behind a real
// kube-apiserver through an APIService, with real RBAC, real kubectl and a
// real Git server. TestMain starts the local control plane once for the
// package, or reuses the one in $REVERSER_E2E_LOCAL_DIR (e.g. after `make up`).
package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"reverser.dev/reverser/test/controlplane"
)

var (
	env *controlplane.Env
	// fluxBin holds Flux's controllers, which the control plane runs.
	fluxBin string
	// argoCDBin holds Argo CD's controllers, which the control plane runs.
	argoCDBin string
	// repoRoot is the repository the suite runs in.
	repoRoot string
)

// pluginPath is where TestMain builds kubectl-reverser, relative to the repository.
const pluginPath = "_output/e2e/bin/kubectl-reverser"

func TestMain(m *testing.M) {
	controlplane.Main(m, "e2e", "REVERSER_E2E_LOCAL_DIR", func(ctx context.Context, root string) error {
		repoRoot = root
		if _, err := output(ctx, root, "go", "build", "-o", filepath.Join(root, pluginPath), "./cmd/kubectl-reverser"); err != nil {
			return fmt.Errorf("building kubectl-reverser: %w", err)
		}
		// The sops CLI of the module Reverser seals with (a tool of go.mod).
		if _, err := output(ctx, root, "go", "build", "-o", filepath.Join(root, sopsPath), "github.com/getsops/sops/v3/cmd/sops"); err != nil {
			return fmt.Errorf("building sops: %w", err)
		}
		var err error
		if fluxBin, err = controlplane.BuildFlux(ctx, root, os.Stdout); err != nil {
			return err
		}
		argoCDBin, err = controlplane.BuildArgoCD(ctx, root, os.Stdout)
		return err
	}, func(e *controlplane.Env) { env = e }, func(o *controlplane.Options) { o.FluxBin, o.ArgoCDBin = fluxBin, argoCDBin })
}

// output runs a command in dir and returns its trimmed standard output.
func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	return controlplane.Run(ctx, dir, io.Discard, name, args...)
}
