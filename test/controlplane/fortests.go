package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ForTests gives a test package a control plane: the one whose state is in
// reuseDir when it is set (e.g. after `make up`), or a new one in
// <root>/_output/<name>/local, built from this checkout, which stop tears
// down. root is the repository.
func ForTests(ctx context.Context, root, name, reuseDir string, progress io.Writer, opts ...func(*Options)) (env *Env, stop func() error,
	err error) {
	if reuseDir != "" {
		if !filepath.IsAbs(reuseDir) {
			reuseDir = filepath.Join(root, reuseDir) // relative to the repository, as make passes it
		}
		env, err = Load(reuseDir)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w (run make up first)", reuseDir, err)
		}
		fmt.Fprintf(progress, "%s: reusing the control plane in %s\n", name, env.Dir)
		return env, func() error { return nil }, nil
	}
	cpBin, err := Run(ctx, root, progress, "bash", "hack/build-control-plane.sh")
	if err != nil {
		return nil, nil, fmt.Errorf("building the control plane: %w", err)
	}
	bin := filepath.Join(root, "_output", name, "bin")
	if err := BuildReverser(ctx, root, bin, progress, map[string]string{
		"reverser-apiserver": "./cmd/apiserver", "reverser-controller": "./cmd/controller", "reverser-gitserver": "./hack/gitserver",
		"reverser-blackhole": "./hack/blackhole", "reverser-redis": "./hack/redis", "reverser-auditrelay": "./hack/auditrelay",
	}); err != nil {
		return nil, nil, err
	}
	start := time.Now()
	o := Options{Dir: filepath.Join(root, "_output", name, "local"), ControlPlaneBin: cpBin, ReverserBin: bin, Progress: progress}
	for _, opt := range opts {
		opt(&o)
	}
	env, err = Up(ctx, o)
	if err != nil {
		return nil, nil, fmt.Errorf("starting the control plane: %w", err)
	}
	fmt.Fprintf(progress, "%s: control plane up in %.1fs, state in %s\n", name, time.Since(start).Seconds(), env.Dir)
	return env, func() error { return Down(env.Dir) }, nil
}

// BuildReverser builds binaries (name → package) into dir as users get
// them from make build and the images: without cgo, paths trimmed,
// stripped, so that what the bench measures of their memory is theirs.
func BuildReverser(ctx context.Context, root, dir string, progress io.Writer, binaries map[string]string) error {
	for binary, pkg := range binaries {
		if _, err := Run(ctx, root, progress, "env", "CGO_ENABLED=0", "go", "build", "-trimpath", "-ldflags=-s -w",
			"-o", filepath.Join(dir, binary), pkg); err != nil {
			return fmt.Errorf("building %s: %w", binary, err)
		}
	}
	return nil
}

// BuildFlux builds (or finds in the cache) Flux's controllers with
// hack/build-flux.sh and returns their directory, for Options.FluxBin.
func BuildFlux(ctx context.Context, root string, progress io.Writer) (string, error) {
	return buildApplier(ctx, root, progress, "Flux", "hack/build-flux.sh")
}

// BuildArgoCD builds (or finds in the cache) Argo CD's controllers with
// hack/build-argocd.sh and returns their directory, for Options.ArgoCDBin.
func BuildArgoCD(ctx context.Context, root string, progress io.Writer) (string, error) {
	return buildApplier(ctx, root, progress, "Argo CD", "hack/build-argocd.sh")
}

func buildApplier(ctx context.Context, root string, progress io.Writer, what, script string) (string, error) {
	dir, err := Run(ctx, root, progress, "bash", script)
	if err != nil {
		return "", fmt.Errorf("building %s: %w", what, err)
	}
	return dir, nil
}

// Run runs a command in dir and returns its trimmed standard output; its
// standard error (a build script's progress) goes to progress.
func Run(ctx context.Context, dir string, progress io.Writer, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	_, _ = progress.Write(stderr.Bytes())
	return strings.TrimSpace(stdout.String()), nil
}

// Main is the TestMain of a package that tests on the control plane: it runs
// prepare (nil for nothing), brings a control plane up with ForTests (reusing
// the one named by the environment variable reuseVar, when set), hands it to
// use, runs the tests, tears it down and exits.
func Main(m *testing.M, name, reuseVar string, prepare func(ctx context.Context, root string) error, use func(*Env), opts ...func(*Options)) {
	code, err := runMain(m, name, reuseVar, prepare, use, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func runMain(m *testing.M, name, reuseVar string, prepare func(ctx context.Context, root string) error, use func(*Env),
	opts []func(*Options)) (int, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if prepare != nil {
		if err := prepare(ctx, root); err != nil {
			return 0, err
		}
	}
	env, stop, err := ForTests(ctx, root, name, os.Getenv(reuseVar), os.Stdout, opts...)
	if err != nil {
		return 0, err
	}
	use(env)
	code := m.Run()
	if err := stop(); err != nil {
		return 0, fmt.Errorf("stopping the control plane: %w", err)
	}
	return code, nil
}
