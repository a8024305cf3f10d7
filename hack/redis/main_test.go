package main

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestItSpeaksRedis: what Argo CD's client sends first (PING, then a SET
// and a GET) is answered as redis-server answers it, and the server stops
// with its context.
func TestItSpeaksRedis(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, "127.0.0.1:0", func(a string) { addrs <- a }) }()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("serve ended before it listened: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not listen within 10s")
	}

	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	r := bufio.NewReader(conn)
	ask := func(cmd string) string {
		t.Helper()
		_, err := conn.Write([]byte(cmd))
		require.NoError(t, err)
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		return line
	}
	assert.Equal(t, "+PONG\r\n", ask("*1\r\n$4\r\nPING\r\n"))
	assert.Equal(t, "+OK\r\n", ask("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"))
	assert.Equal(t, "$1\r\n", ask("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"))
	value, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "v\r\n", value)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop with its context")
	}
	_, err = net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "nothing listens once it stopped")
}
