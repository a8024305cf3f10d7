package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ForTests gives a test package a control plane: the one whose state is in
// reuseDir when it is set (e.g. after `make up`), or a new one in
// <root>/_output/<name>/local, built from this checkout, which stop tears
// down. root is the repository.
func ForTests(ctx context.Context, root, name, reuseDir string, progress io.Writer) (env *Env, stop func() error, err error) {
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
	cpBin, err := run(ctx, root, progress, "bash", "hack/build-control-plane.sh")
	if err != nil {
		return nil, nil, fmt.Errorf("building the control plane: %w", err)
	}
	bin := filepath.Join(root, "_output", name, "bin")
	for binary, pkg := range map[string]string{
		"reverser-apiserver": "./cmd/apiserver", "reverser-controller": "./cmd/controller", "reverser-gitserver": "./hack/gitserver",
	} {
		if _, err := run(ctx, root, progress, "go", "build", "-o", filepath.Join(bin, binary), pkg); err != nil {
			return nil, nil, fmt.Errorf("building %s: %w", binary, err)
		}
	}
	start := time.Now()
	env, err = Up(ctx, Options{Dir: filepath.Join(root, "_output", name, "local"), ControlPlaneBin: cpBin, ReverserBin: bin, Progress: progress})
	if err != nil {
		return nil, nil, fmt.Errorf("starting the control plane: %w", err)
	}
	fmt.Fprintf(progress, "%s: control plane up in %.1fs, state in %s\n", name, time.Since(start).Seconds(), env.Dir)
	return env, func() error { return Down(env.Dir) }, nil
}

// run runs a command in dir and returns its trimmed standard output; its
// standard error (a build script's progress) goes to progress.
func run(ctx context.Context, dir string, progress io.Writer, name string, args ...string) (string, error) {
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
