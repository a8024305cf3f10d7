// Package blackhole is a TCP proxy that can silently stall the connections
// through it, as a network that drops packets without resetting anything
// would: a stalled connection stays open, its peer's bytes are read and
// discarded, and nothing more reaches it, until its client gives up and
// closes it. It can also refuse connections for a while, as a server that is
// down would. The fault suite puts one between reverser-controller and
// kube-apiserver.
package blackhole

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Stall is what the control file holds while every connection, open or new,
// is to stall. A stalled connection never recovers; once the file no longer
// says Stall, new connections are forwarded again.
const Stall = "stall"

// Refuse, in the control file, closes every connection and the listener,
// so that new connections are refused, until the file says otherwise.
const Refuse = "refuse"

// Proxy forwards connections from its listener to Upstream.
type Proxy struct {
	Upstream string
	// Upstreams, when set, are used instead of Upstream: each connection
	// goes to the next in turn, and to the one after when a dial fails,
	// as a Service in front of replicas does once a dead one is no longer
	// ready. Resolve, when set, is asked for them at each connection.
	Upstreams []string
	Resolve   func() ([]string, error)
	// Control is the file whose content says Stall; checked every Poll.
	Control string
	Poll    time.Duration

	mu    sync.Mutex
	conns map[*conn]struct{}
	next  int
}

type conn struct {
	client, upstream net.Conn
	stalled          chan struct{} // closed when the connection stalls
	closed           chan struct{} // closed when both sides are
	stallOnce        sync.Once
	closeOnce        sync.Once
}

func (c *conn) stall() { c.stallOnce.Do(func() { close(c.stalled) }) }

func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.client.Close()
		_ = c.upstream.Close()
	})
}

// Serve listens on addr and forwards until ctx is done. While the control
// file says Refuse, nothing listens on addr and every connection is closed.
func (p *Proxy) Serve(ctx context.Context, addr string) error {
	p.mu.Lock()
	p.conns = map[*conn]struct{}{}
	p.mu.Unlock()
	go p.watchControl(ctx)
	for ctx.Err() == nil {
		if p.mode() == Refuse {
			p.sleep(ctx)
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			p.sleep(ctx) // the old listener's port may be released a moment late
			continue
		}
		done := make(chan struct{})
		go func() {
			defer ln.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case <-done:
					return
				case <-time.After(p.Poll):
				}
				if p.mode() == Refuse {
					p.closeAll()
					return
				}
			}
		}()
		for {
			client, err := ln.Accept()
			if err != nil {
				break
			}
			go p.forward(client)
		}
		close(done)
	}
	p.closeAll()
	return nil
}

func (p *Proxy) sleep(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(p.Poll):
	}
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.close()
	}
}

func (p *Proxy) mode() string {
	data, _ := os.ReadFile(p.Control)
	return strings.TrimSpace(string(data))
}

func (p *Proxy) stalling() bool { return p.mode() == Stall }

func (p *Proxy) watchControl(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) {
		if !p.stalling() {
			return
		}
		p.mu.Lock()
		for c := range p.conns {
			c.stall()
		}
		p.mu.Unlock()
	}, p.Poll)
}

// dial connects to the next upstream that answers.
func (p *Proxy) dial() (net.Conn, error) {
	addrs := p.Upstreams
	if p.Resolve != nil {
		var err error
		if addrs, err = p.Resolve(); err != nil {
			return nil, err
		}
	}
	if len(addrs) == 0 {
		if p.Upstream == "" {
			return nil, errors.New("no upstream")
		}
		addrs = []string{p.Upstream}
	}
	p.mu.Lock()
	first := p.next
	p.next++
	p.mu.Unlock()
	var err error
	for i := range addrs {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addrs[(first+i)%len(addrs)], time.Second); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func (p *Proxy) forward(client net.Conn) {
	upstream, err := p.dial()
	if err != nil {
		_ = client.Close()
		return
	}
	c := &conn{client: client, upstream: upstream, stalled: make(chan struct{}), closed: make(chan struct{})}
	if p.stalling() {
		c.stall()
	}
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.close()
	}()
	done := make(chan struct{}, 2)
	// Client to upstream: once stalled, the client's bytes are read and
	// dropped, so its close is still seen.
	go func() {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				select {
				case <-c.stalled:
				default:
					if _, werr := upstream.Write(buf[:n]); werr != nil {
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// Upstream to client: once stalled, nothing more is passed on.
	go func() {
		defer func() { done <- struct{}{} }()
		_, _ = io.Copy(writerFunc(func(b []byte) (int, error) {
			select {
			case <-c.stalled:
				<-c.closed // nothing passes until the client gives up
				return 0, net.ErrClosed
			default:
				return client.Write(b)
			}
		}), upstream)
	}()
	<-done // either side ended: the client closed, or upstream did
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
