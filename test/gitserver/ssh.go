package gitserver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
)

// SSHServer serves the bare repositories under a root over SSH, as a Git
// host does: an exec request "git-upload-pack '<path>'" or
// "git-receive-pack '<path>'" runs the real command on <root>/<path>. Only
// the public keys it authorizes may connect, with any user name.
type SSHServer struct {
	// Addr is host:port; KnownHosts is the known_hosts line for it.
	Addr       string
	KnownHosts string

	root     string
	config   *ssh.ServerConfig
	listener net.Listener

	mu         sync.Mutex
	authorized map[string]bool // by the key's wire form
	wg         sync.WaitGroup
}

// ServeSSH serves root on a loopback port with a fresh host key, allowing
// the given keys, until Close.
func ServeSSH(root string, authorized ...ssh.PublicKey) (*SSHServer, error) {
	_, hostKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	host, err := ssh.NewSignerFromKey(hostKey)
	if err != nil {
		return nil, err
	}
	s := &SSHServer{root: root, authorized: map[string]bool{}}
	s.Authorize(authorized...)
	s.config = &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.authorized[string(key.Marshal())] {
			return nil, nil
		}
		return nil, errors.New("public key not authorized")
	}}
	s.config.AddHostKey(host)
	if s.listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	s.Addr = s.listener.Addr().String()
	// known_hosts names a host on another port than 22 as [host]:port.
	hostname, port, _ := net.SplitHostPort(s.Addr)
	s.KnownHosts = fmt.Sprintf("[%s]:%s %s", hostname, port, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(host.PublicKey()))))
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Authorize lets more keys connect.
func (s *SSHServer) Authorize(keys ...ssh.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.authorized[string(k.Marshal())] = true
	}
}

// Revoke stops a key from connecting.
func (s *SSHServer) Revoke(key ssh.PublicKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.authorized, string(key.Marshal()))
}

// URL is the ssh:// URL of the repository name.git.
func (s *SSHServer) URL(name string) string { return "ssh://git@" + s.Addr + "/" + name + ".git" }

// Close stops accepting connections and waits for the open ones.
func (s *SSHServer) Close() error {
	err := s.listener.Close()
	s.wg.Wait()
	return err
}

func (s *SSHServer) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serve(conn)
		}()
	}
}

func (s *SSHServer) serve(conn net.Conn) {
	defer conn.Close()
	_, chans, reqs, err := ssh.NewServerConn(conn, s.config)
	if err != nil {
		return // refused key, or a client that gave up on our host key
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, requests, err := nc.Accept()
		if err != nil {
			return
		}
		go s.session(ch, requests)
	}
}

// session runs the one exec request of a Git session and reports its exit
// status.
func (s *SSHServer) session(ch ssh.Channel, requests <-chan *ssh.Request) {
	defer ch.Close()
	for req := range requests {
		switch req.Type {
		case "env":
			_ = req.Reply(true, nil) // GIT_PROTOCOL and the like: not needed
			continue
		case "exec":
		default:
			_ = req.Reply(false, nil)
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		cmd, err := s.command(payload.Command)
		if err != nil {
			_ = req.Reply(true, nil)
			fmt.Fprintln(ch.Stderr(), err)
			exit(ch, 128)
			return
		}
		_ = req.Reply(true, nil)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, ch.Stderr()
		code := 0
		if err := cmd.Run(); err != nil {
			code = 1
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				code = exitErr.ExitCode()
			}
		}
		_ = ch.CloseWrite()
		exit(ch, code)
		return
	}
}

// command parses "git-upload-pack '/name.git'" (or receive-pack) into the
// command on a repository under root, refusing anything else.
func (s *SSHServer) command(line string) (*exec.Cmd, error) {
	program, arg, ok := strings.Cut(line, " ")
	if !ok || (program != "git-upload-pack" && program != "git-receive-pack") {
		return nil, fmt.Errorf("only git-upload-pack and git-receive-pack are served, not %q", line)
	}
	repo := strings.Trim(arg, "'")
	clean := filepath.Clean("/" + repo)
	if clean != "/"+strings.TrimPrefix(repo, "/") || !strings.HasSuffix(clean, ".git") {
		return nil, fmt.Errorf("no repository %q", repo)
	}
	return exec.Command(program, filepath.Join(s.root, clean)), nil
}

func exit(ch ssh.Channel, code int) {
	var status bytes.Buffer
	_ = binary.Write(&status, binary.BigEndian, uint32(code))
	_, _ = ch.SendRequest("exit-status", false, status.Bytes())
}

var _ io.Closer = (*SSHServer)(nil)
