// Package gitserver serves bare Git repositories over Git's smart HTTP
// protocol with push enabled, through the real `git http-backend`. It is the
// Git remote of the local control plane, the demo and the end-to-end tests.
package gitserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// PathPrefix is where repositories are served: http://host:port/git/<name>.git.
const PathPrefix = "/git"

// PrivatePrefix serves the same repositories behind HTTP basic
// authentication, checked against the user:password lines of
// <root>/.credentials (read on every request, so tests can rotate them).
const PrivatePrefix = "/private"

// PublicPrefix serves the same repositories as most hosts serve a public
// one: anyone may fetch, and only PrivatePrefix's users may push.
const PublicPrefix = "/public"

// CredentialsFile is where PrivatePrefix's and PublicPrefix's users are
// listed.
const CredentialsFile = ".credentials"

// FaultFile, when <root>/.fault holds an HTTP status code, makes the server
// answer every request with that status, as a broken Git host would, until
// it is removed. The fault suite writes it. When it holds HoldPushes, a push
// is held before it is received, with HeldFile present and holding the
// commit the push would make the branch's head, until FaultFile says
// otherwise: the fault suite kills the pusher meanwhile. If it then says
// DropHeld, the held push is answered 503 and not received; otherwise it is
// received as sent. When it holds Slow followed by a duration ("slow 1s"),
// every request is answered that much later, as a distant or overloaded
// host would.
const (
	FaultFile  = ".fault"
	HoldPushes = "hold-pushes"
	DropHeld   = "drop-held"
	HeldFile   = ".held"
	Slow       = "slow "
)

// AttemptsFile, under root, lists every push the server was sent, taken
// or not, in the order they came: the time, the path and the client's
// User-Agent, tab-separated. Reverser's processes in the tests name
// themselves there (go-git adds GO_GIT_USER_AGENT_EXTRA to its agent), so
// a test can tell which replica tried to push when.
const AttemptsFile = ".push-attempts"

// Attempt is one push the server was sent.
type Attempt struct {
	At          time.Time
	Path, Agent string
}

// Attempts lists what AttemptsFile holds for root, oldest first.
func Attempts(root string) ([]Attempt, error) {
	data, err := os.ReadFile(filepath.Join(root, AttemptsFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Attempt
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", AttemptsFile, line, err)
		}
		out = append(out, Attempt{At: time.Unix(0, ns), Path: f[1], Agent: f[2]})
	}
	return out, nil
}

// logAttempt appends one line to AttemptsFile; one write of a short line
// to a file opened for appending does not interleave with another's.
func logAttempt(root string, r *http.Request) {
	f, err := os.OpenFile(filepath.Join(root, AttemptsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	agent := strings.NewReplacer("\t", " ", "\n", " ").Replace(r.UserAgent())
	_, _ = fmt.Fprintf(f, "%d\t%s\t%s\n", time.Now().UnixNano(), r.URL.Path, agent)
}

// Handler serves the bare repositories under root.
func Handler(root string) (http.Handler, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("finding git's exec path (is git installed?): %w", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("git http-backend not found: %w", err)
	}
	mux := http.NewServeMux()
	env := []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}
	mux.Handle(PathPrefix+"/", &cgi.Handler{Path: backend, Root: PathPrefix, Env: env})
	authenticated := func(w http.ResponseWriter, r *http.Request) bool {
		user, pass, ok := r.BasicAuth()
		if !ok || !allowed(filepath.Join(root, CredentialsFile), user, pass) {
			w.Header().Set("WWW-Authenticate", `Basic realm="reverser-gitserver"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return false
		}
		return true
	}
	private := &cgi.Handler{Path: backend, Root: PrivatePrefix, Env: env}
	mux.Handle(PrivatePrefix+"/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if authenticated(w, r) {
			private.ServeHTTP(w, r)
		}
	}))
	public := &cgi.Handler{Path: backend, Root: PublicPrefix, Env: env}
	mux.Handle(PublicPrefix+"/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		push := strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack"
		if !push || authenticated(w, r) {
			public.ServeHTTP(w, r)
		}
	}))
	fault := func() string {
		data, _ := os.ReadFile(filepath.Join(root, FaultFile))
		return strings.TrimSpace(string(data))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			logAttempt(root, r)
		}
		f := fault()
		if code, err := strconv.Atoi(f); err == nil && code >= 400 {
			http.Error(w, "injected fault", code)
			return
		}
		if d, err := time.ParseDuration(strings.TrimPrefix(f, Slow)); err == nil && strings.HasPrefix(f, Slow) {
			time.Sleep(d) // the fault itself: a slow host, not a wait for state
		}
		if f == HoldPushes && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			hold(filepath.Join(root, HeldFile), pushedHead(body), func() bool { return fault() == HoldPushes })
			if fault() == DropHeld {
				http.Error(w, "held push dropped", http.StatusServiceUnavailable)
				return
			}
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// pushedHead is the new head of the first ref update of a receive-pack
// request: its first pkt-line is "<old> <new> <ref>\x00<capabilities>".
func pushedHead(body []byte) string {
	if len(body) < 4+40+1+40 {
		return ""
	}
	return string(body[4+40+1 : 4+40+1+40])
}

// hold marks a push as held, naming the head it pushes, and waits while
// holding says so, even after its client went away: a host that got the
// whole push may still take it. Five minutes at most.
func hold(marker, head string, holding func() bool) {
	_ = os.WriteFile(marker, []byte(head), 0o644)
	defer os.Remove(marker)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Minute)
	for holding() {
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

func allowed(file, user, pass string) bool {
	data, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if u, p, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && u == user && p == pass {
			return true
		}
	}
	return false
}

// CreateRepo creates the bare repository <root>/<name>.git with default
// branch main and anonymous push allowed. It is an error if it exists.
func CreateRepo(root, name string) (string, error) {
	dir := filepath.Join(root, name+".git")
	if _, err := os.Stat(dir); err == nil {
		return "", fmt.Errorf("repository %s exists", dir)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	for _, args := range [][]string{
		{"init", "--quiet", "--bare", "--initial-branch=main", dir},
		{"-C", dir, "config", "http.receivepack", "true"},
	} {
		var stderr bytes.Buffer
		cmd := exec.Command("git", args...)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr.String())
		}
	}
	return dir, nil
}

// pushesLog is where RecordPushes keeps a repository's pushes.
const pushesLog = "pushes.log"

// RecordPushes makes the bare repository dir log every ref its pushes
// update, in the order the server took them (a post-receive hook), so a
// test can name the first push after a moment without polling for it.
func RecordPushes(dir string) error {
	hook := "#!/bin/sh\nwhile read old new ref; do echo \"$old $new $ref\" >> " + pushesLog + "; done\n"
	return os.WriteFile(filepath.Join(dir, "hooks", "post-receive"), []byte(hook), 0o755)
}

// Push is one ref a push updated.
type Push struct{ Old, New, Ref string }

// Pushes lists what RecordPushes logged for dir, oldest first.
func Pushes(dir string) ([]Push, error) {
	data, err := os.ReadFile(filepath.Join(dir, pushesLog))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Push
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			out = append(out, Push{Old: f[0], New: f[1], Ref: f[2]})
		}
	}
	return out, nil
}
