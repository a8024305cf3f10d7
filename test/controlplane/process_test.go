package controlplane

import "testing"

// TestAliveFrom: a process whose arguments the kernel has not set yet (just
// after exec.Cmd.Start returns) runs; a zombie or another program does not.
// The first case was taken for an exit, and a source's start failed with
// "kube-apiserver exited" while it ran.
func TestAliveFrom(t *testing.T) {
	const bin = "/cache/kube-apiserver"
	for _, tc := range []struct {
		name          string
		cmdline, stat string
		want          bool
	}{
		{"running", bin + "\x00--flag\x00", "5052 (kube-apiserver) S 1 5052", true},
		{"still in execve: no arguments yet", "", "5052 (e2e.test) R 1 5052", true},
		{"a zombie", bin + "\x00", "5052 (kube-apiserver) Z 1 5052", false},
		{"the pid reused by another program", "/usr/bin/sleep\x0010\x00", "5052 (sleep) S 1 5052", false},
	} {
		if got := aliveFrom([]byte(tc.cmdline), []byte(tc.stat), bin); got != tc.want {
			t.Errorf("%s: alive = %v, want %v", tc.name, got, tc.want)
		}
	}
}
