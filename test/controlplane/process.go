package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// startProcess starts a daemon in its own session, so it outlives `make up`,
// with output in <logDir>/<name>.log and its pid in <dir>/pids/<name>.pid.
// The returned check fails, quoting the end of the log, once it has exited.
func startProcess(dir, logDir, name, bin string, args ...string) (check func() error, err error) {
	return startProcessEnv(dir, logDir, name, bin, nil, args...)
}

// startProcessEnv is startProcess with env added to this process's
// environment; Restart adds it again.
func startProcessEnv(dir, logDir, name, bin string, env []string, args ...string) (check func() error, err error) {
	if err := os.MkdirAll(filepath.Join(dir, "pids"), 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	// Reap it if it dies while this process lives (tests); after `make up`
	// exits, init does.
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	pid := strconv.Itoa(cmd.Process.Pid)
	if err := os.WriteFile(filepath.Join(dir, "pids", name+".pid"), []byte(pid+"\n"+bin+"\n"), 0o644); err != nil {
		return nil, err
	}
	// The command line, for Restart after the process is gone.
	cmdline := strings.Join(append([]string{bin}, args...), "\x00")
	if err := os.WriteFile(filepath.Join(dir, "pids", name+".cmdline"), []byte(cmdline), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pids", name+".env"), []byte(strings.Join(env, "\x00")), 0o600); err != nil {
		return nil, err
	}
	return func() error {
		select {
		case <-exited:
			return fmt.Errorf("%s exited: %s", name, tail(logPath, 5))
		default:
			return nil
		}
	}, nil
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stopProcesses stops every process recorded under <dir>/pids, politely
// first. A pid whose process is not the recorded binary any more is left
// alone: it was reused by something else.
func stopProcesses(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	if err != nil {
		return err
	}
	var errs []error
	// Reverse start order: dependents before what they depend on.
	ordered := orderForStop(files)
	for _, f := range ordered {
		if err := stopOne(f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func orderForStop(files []string) []string {
	rank := map[string]int{"reverser-controller": 0, "git-server": 0, "blackhole": 1, "flux-source-controller": 1, "flux-kustomize-controller": 1,
		"argocd-application-controller": 1, "argocd-repo-server": 1, "argocd-redis": 1, "reverser-apiserver": 1, "kube-controller-manager": 2, "kube-apiserver": 3, "etcd": 4}
	name := func(f string) string { return strings.TrimSuffix(filepath.Base(f), ".pid") }
	out := append([]string(nil), files...)
	sort.SliceStable(out, func(i, j int) bool { return rank[name(out[i])] < rank[name(out[j])] })
	return out
}

// readPidFile returns the pid and binary startProcess recorded.
func readPidFile(pidFile string) (pid int, bin string, err error) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, "", err
	}
	fields := strings.SplitN(strings.TrimSpace(string(data)), "\n", 2)
	if pid, err = strconv.Atoi(fields[0]); err != nil {
		return 0, "", fmt.Errorf("%s: %w", pidFile, err)
	}
	if len(fields) == 2 {
		bin = fields[1]
	}
	return pid, bin, nil
}

func stopOne(pidFile string) error {
	pid, bin, err := readPidFile(pidFile)
	if err != nil {
		return err
	}
	if alive(pid, bin) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		// A short grace: kube-apiserver spends ~10s flushing audit events to
		// a webhook that may not listen, and no state here needs more.
		gone := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 3*time.Second, true,
			func(context.Context) (bool, error) { return !alive(pid, bin), nil })
		if gone != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			// Until it is gone its ports are taken: a restart would fail.
			if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true,
				func(context.Context) (bool, error) { return !alive(pid, bin), nil }); err != nil {
				return fmt.Errorf("pid %d (%s) did not exit after SIGKILL: %w", pid, bin, err)
			}
		}
	}
	return os.Remove(pidFile)
}

// alive reports whether pid runs bin (and is not a zombie).
func alive(pid int, bin string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	return aliveFrom(cmdline, stat, bin)
}

// aliveFrom decides alive from a process's /proc cmdline and stat. An empty
// cmdline is a process still in execve: the kernel lets the parent go on (Go's
// exec.Cmd.Start returns) before it has set the new program's arguments, so
// a check right after Start reads none. That process runs; only a zombie
// or another program does not.
func aliveFrom(cmdline, stat []byte, bin string) bool {
	if len(cmdline) > 0 && bin != "" && string(bytes.SplitN(cmdline, []byte{0}, 2)[0]) != bin {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// Restart stops the named process, if it runs, and starts it again with the
// same command line, as an operator restarting a server would.
func Restart(env *Env, name string) error {
	cmdline, err := os.ReadFile(filepath.Join(env.Dir, "pids", name+".cmdline"))
	if err != nil {
		return fmt.Errorf("%s was not started here: %w", name, err)
	}
	if err := stopOne(filepath.Join(env.Dir, "pids", name+".pid")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	args := strings.Split(string(cmdline), "\x00")
	var procEnv []string
	if data, err := os.ReadFile(filepath.Join(env.Dir, "pids", name+".env")); err == nil && len(data) > 0 {
		procEnv = strings.Split(string(data), "\x00")
	}
	// A port the old process held may be released a moment late: a process
	// that exits at once is started again, a few times.
	for attempt := 1; ; attempt++ {
		check, err := startProcessEnv(env.Dir, env.LogDir, name, args[0], procEnv, args[1:]...)
		if err != nil {
			return err
		}
		exited := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Second, true,
			func(context.Context) (bool, error) { return check() != nil, nil })
		if exited != nil { // still running after 2s
			return nil
		}
		if attempt == 3 {
			return check()
		}
	}
}

// Kill ends the named process with SIGKILL, as a crash would, and waits
// until it is gone. Restart brings it back.
func Kill(env *Env, name string) error {
	pid, bin, err := readPidFile(filepath.Join(env.Dir, "pids", name+".pid"))
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return !alive(pid, bin), nil })
}

// Signal sends sig to the process name (SIGSTOP pauses it, SIGCONT resumes it).
func Signal(env *Env, name string, sig syscall.Signal) error {
	pid, _, err := readPidFile(filepath.Join(env.Dir, "pids", name+".pid"))
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signalling %s: %w", name, err)
	}
	return nil
}

// Pid is the process id of the named process, which a leader election
// identity (hostname_pid) names.
func Pid(env *Env, name string) (int, error) {
	pid, _, err := readPidFile(filepath.Join(env.Dir, "pids", name+".pid"))
	return pid, err
}

// Running says whether the named process still runs (it may have exited on
// its own, as a controller that lost its Lease does).
func Running(env *Env, name string) bool {
	pid, bin, err := readPidFile(filepath.Join(env.Dir, "pids", name+".pid"))
	return err == nil && alive(pid, bin)
}
