package blackhole

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// serve listens on loopback until the test ends, handing each connection
// to handle on its own goroutine, which closes it after; it returns the
// address.
func serve(t *testing.T, handle func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// echo serves lines back to their sender.
func echo(t *testing.T) string {
	return serve(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := c.Write([]byte(line)); err != nil {
				return
			}
		}
	})
}

func roundTrip(c net.Conn, r *bufio.Reader, within time.Duration) (string, error) {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(within))
	return r.ReadString('\n')
}

func TestStalledConnectionsStayStalledAndNewOnesWork(t *testing.T) {
	control := filepath.Join(t.TempDir(), "control")
	addr := start(t, control)
	old, oldR := dial(t, addr)
	line, err := roundTrip(old, oldR, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "ping\n", line, "forwarded before the stall")

	require.NoError(t, os.WriteFile(control, []byte(Stall), 0o644))
	require.Eventually(t, func() bool {
		_, err := roundTrip(old, oldR, 100*time.Millisecond)
		return err != nil
	}, 5*time.Second, 10*time.Millisecond, "the open connection stalls")
	_, err = roundTrip(old, oldR, 200*time.Millisecond)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "stalled silently: no reset, no close, just nothing")

	require.NoError(t, os.Remove(control))
	fresh, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer fresh.Close()
	line, err = roundTrip(fresh, bufio.NewReader(fresh), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "ping\n", line, "a new connection is forwarded once the stall is over")
	_, err = roundTrip(old, oldR, 200*time.Millisecond)
	require.Error(t, err, "a stalled connection never recovers")
}

// start runs a proxy to an echo server and returns its address once it
// accepts.
func start(t *testing.T, control string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := &Proxy{Upstream: echo(t), Control: control, Poll: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = p.Serve(ctx, addr) }()
	require.Eventually(t, func() bool { return accepts(addr) }, 5*time.Second, 10*time.Millisecond)
	return addr
}

// dial connects to addr for the rest of the test.
func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// accepts says whether something listens on addr.
func accepts(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err == nil {
		_ = c.Close()
	}
	return err == nil
}

func TestRefuseClosesConnectionsAndRefusesNewOnes(t *testing.T) {
	control := filepath.Join(t.TempDir(), "control")
	addr := start(t, control)
	old, oldR := dial(t, addr)
	_, err := roundTrip(old, oldR, 5*time.Second)
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(control, []byte(Refuse), 0o644))
	require.Eventually(t, func() bool { return !accepts(addr) }, 5*time.Second, 10*time.Millisecond, "new connections are refused")
	_, err = roundTrip(old, oldR, time.Second)
	require.Error(t, err, "the open connection was closed")

	require.NoError(t, os.Remove(control))
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		line, err := roundTrip(c, bufio.NewReader(c), time.Second)
		return err == nil && line == "ping\n"
	}, 5*time.Second, 10*time.Millisecond, "forwarded again")
}

// named serves its name to every connection, then closes it.
func named(t *testing.T, name string) string {
	return serve(t, func(c net.Conn) { _, _ = c.Write([]byte(name + "\n")) })
}

func TestConnectionsTakeTurnsAndSkipADeadUpstream(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := &Proxy{Upstreams: []string{named(t, "a"), deadAddr, named(t, "b")}, Control: filepath.Join(t.TempDir(), "control"),
		Poll: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = p.Serve(ctx, addr) }()
	require.Eventually(t, func() bool { return accepts(addr) }, 5*time.Second, 10*time.Millisecond)
	seen := map[string]int{}
	for range 6 {
		c, r := dial(t, addr)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := r.ReadString('\n')
		require.NoError(t, err, "a connection failed although two upstreams live")
		seen[line]++
	}
	require.Positive(t, seen["a\n"], "upstream a never served: %v", seen)
	require.Positive(t, seen["b\n"], "upstream b never served: %v", seen)
}
