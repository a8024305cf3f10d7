package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedactURL(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain https", "https://git.example.com/org/r.git", "https://git.example.com/org/r.git"},
		{"https token as user", "https://TOKEN@git.example.com/org/r.git", "https://git.example.com/org/r.git"},
		{"https user and password", "https://u:p@git.example.com/r.git", "https://git.example.com/r.git"},
		{"http with port", "http://u:p@127.0.0.1:8080/git/r.git", "http://127.0.0.1:8080/git/r.git"},
		{"query and fragment", "https://host/r.git?token=x&a=b#frag", "https://host/r.git"},
		{"fragment only", "https://host/r.git#tok", "https://host/r.git"},
		{"no path", "https://u:p@host", "https://host"},
		{"password with slash", "https://u:pa/ss@host/r.git", "https://host/r.git"},
		{"at in path kept", "https://host/org/@scope/r.git", "https://host/org/@scope/r.git"},
		{"ipv6 host", "https://u:p@[::1]:8443/r.git", "https://[::1]:8443/r.git"},
		{"ssh user kept", "ssh://git@host:2222/r.git", "ssh://git@host:2222/r.git"},
		{"ssh password dropped", "ssh://git:pw@host/r.git", "ssh://git@host/r.git"},
		{"ssh scheme in capitals", "SSH://git:pw@host/r.git", "SSH://git@host/r.git"},
		{"git+ssh", "git+ssh://git:pw@host/r.git", "git+ssh://git@host/r.git"},
		{"ssh password only", "ssh://:pw@host/r.git", "ssh://host/r.git"},
		{"other scheme loses user", "git://u@host/r.git", "git://host/r.git"},
		{"scp form kept", "git@host:org/r.git", "git@host:org/r.git"},
		{"scp form password dropped", "git:pw@host:org/r.git", "git@host:org/r.git"},
		{"empty", "", ""},
		{"local path", "/srv/git/r.git", "/srv/git/r.git"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, RedactURL(tc.in))
		})
	}
}

func TestRedactText(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"no url", "authentication required", "authentication required"},
		{"url before colon",
			"fetching main from https://tok@host/r.git: authentication required",
			"fetching main from https://host/r.git: authentication required"},
		{"quoted url with query",
			`Get "https://u:p@host/r.git/info/refs?service=git-upload-pack": dial tcp: refused`,
			`Get "https://host/r.git/info/refs": dial tcp: refused`},
		{"query before colon", "pushing to https://host/r.git?token=abc: denied", "pushing to https://host/r.git: denied"},
		{"in parentheses", "remote (https://u:p@host/r.git) moved.", "remote (https://host/r.git) moved."},
		{"two urls", "https://a:b@one/x and ssh://git:pw@two/y", "https://one/x and ssh://git@two/y"},
		{"url at end of sentence", "cannot reach https://u:p@host.", "cannot reach https://host."},
		{"clean url unchanged", "cannot reach https://host/r.git", "cannot reach https://host/r.git"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, RedactText(tc.in))
		})
	}
}

func TestRedact(t *testing.T) {
	assert.NoError(t, Redact(nil))

	clean := errors.New("no url here")
	assert.Same(t, clean, Redact(clean), "an error with nothing to redact is returned as is")

	err := Redact(fmt.Errorf("fetching main from %s: %w", "https://tok:secret@host/r.git", transport.ErrAuthenticationRequired))
	require.Error(t, err)
	assert.Equal(t, "fetching main from https://host/r.git: authentication required", err.Error())
	assert.NotContains(t, fmt.Sprintf("%v", fmt.Errorf("wrapped: %w", err)), "secret")
	assert.ErrorIs(t, err, transport.ErrAuthenticationRequired, "the wrapped error is still found")
}

func TestRemoteErrorsAreRedacted(t *testing.T) {
	// A listener closed at once: nothing answers on its port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	cases := []struct{ name, url string }{
		{"password", "http://user:s3cret@" + addr + "/r.git"},
		{"token as user", "http://s3cret@" + addr + "/r.git"},
		{"token in query", "http://" + addr + "/r.git?access_token=s3cret"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Open(t.TempDir(), tc.url, "main", nil)
			require.NoError(t, err)
			assert.NotContains(t, r.URL(), "s3cret")
			_, err = r.Fetch(context.Background())
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "s3cret")
			assert.Contains(t, err.Error(), "http://"+addr+"/r.git")
			err = r.Push(context.Background(), plumbing.ZeroHash)
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}
