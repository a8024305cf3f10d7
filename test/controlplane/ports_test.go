package controlplane

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// The plane's ports must not come from the kernel's ephemeral range, where
// an outgoing connection can take one before its process binds it, and a
// port one test binary holds must be refused to every other.
func TestPlanePortsStayOutOfTheEphemeralRangeAndApart(t *testing.T) {
	p, err := freePorts()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	floor := ephemeralFloor()
	for _, port := range p.all() {
		if *port < portFloor || *port >= floor {
			t.Errorf("port %d is outside [%d, %d), below the ephemeral range", *port, portFloor, floor)
		}
		if seen[*port] {
			t.Errorf("port %d handed out twice", *port)
		}
		seen[*port] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
		if err != nil {
			t.Errorf("a reserved port cannot be bound: %v", err)
			continue
		}
		l.Close()

		// Another process opens the lock file on its own: flock refuses it.
		f, err := os.Open(filepath.Join(os.TempDir(), "reverser-ports", strconv.Itoa(*port)))
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			t.Errorf("port %d: a second lock got %v, want EWOULDBLOCK", *port, err)
		}
	}
}
