package redact

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"plain https", "https://git.example.com/org/r.git", "https://git.example.com/org/r.git"},
		{"https token as user", "https://TOKEN@git.example.com/org/r.git", "https://<redacted>@git.example.com/org/r.git"},
		{"https user and password", "https://u:p@git.example.com/r.git", "https://<redacted>@git.example.com/r.git"},
		{"http with port", "http://u:p@127.0.0.1:8080/git/r.git", "http://<redacted>@127.0.0.1:8080/git/r.git"},
		{"query and fragment", "https://host/r.git?token=x&a=b#frag", "https://host/r.git?<redacted>"},
		{"fragment only", "https://host/r.git#tok", "https://host/r.git#<redacted>"},
		{"empty query", "https://host/r.git?", "https://host/r.git?<redacted>"},
		{"userinfo and query", "https://tok@host/r.git?token=x", "https://<redacted>@host/r.git?<redacted>"},
		{"no path", "https://u:p@host", "https://<redacted>@host"},
		{"password with slash", "https://u:pa/ss@host/r.git", "https://<redacted>@host/r.git"},
		{"host with blank", "https://u:p@ho st/r.git", "https://<redacted>@ho st/r.git"},
		{"at in path kept", "https://host/org/@scope/r.git", "https://host/org/@scope/r.git"},
		{"ipv6 host", "https://u:p@[::1]:8443/r.git", "https://<redacted>@[::1]:8443/r.git"},
		{"ssh user kept", "ssh://git@host:2222/r.git", "ssh://git@host:2222/r.git"},
		{"ssh password hidden", "ssh://git:pw@host/r.git", "ssh://git:<redacted>@host/r.git"},
		{"ssh scheme in capitals", "SSH://git:pw@host/r.git", "SSH://git:<redacted>@host/r.git"},
		{"git+ssh", "git+ssh://git:pw@host/r.git", "git+ssh://git:<redacted>@host/r.git"},
		{"ssh+git", "ssh+git://git:pw@host/r.git", "ssh+git://git:<redacted>@host/r.git"},
		{"ssh password only", "ssh://:pw@host/r.git", "ssh://<redacted>@host/r.git"},
		{"ssh password with slash", "ssh://git:pa/ss@host/r.git", "ssh://git:<redacted>@host/r.git"},
		{"other scheme loses user", "git://u@host/r.git", "git://<redacted>@host/r.git"},
		{"ftp", "ftp://u:p@host/r.git", "ftp://<redacted>@host/r.git"},
		{"scp form kept", "git@host:org/r.git", "git@host:org/r.git"},
		{"scp form password hidden", "git:pw@host:org/r.git", "git:<redacted>@host:org/r.git"},
		{"empty", "", ""},
		{"local path", "/srv/git/r.git", "/srv/git/r.git"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := URL(tc.in)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, URL(got), "redacting twice changes nothing")
		})
	}
}

func TestText(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"no url", "authentication required", "authentication required"},
		{"url before colon",
			"fetching main from https://tok@host/r.git: authentication required",
			"fetching main from https://<redacted>@host/r.git: authentication required"},
		{"quoted url with query",
			`Get "https://u:p@host/r.git/info/refs?service=git-upload-pack": dial tcp: refused`,
			`Get "https://<redacted>@host/r.git/info/refs?<redacted>": dial tcp: refused`},
		{"query before colon", "pushing to https://host/r.git?token=abc: denied", "pushing to https://host/r.git?<redacted>: denied"},
		{"fragment before colon", "pushing to https://host/r.git#abc: denied", "pushing to https://host/r.git#<redacted>: denied"},
		{"in parentheses", "remote (https://u:p@host/r.git) moved.", "remote (https://<redacted>@host/r.git) moved."},
		{"two urls", "https://a:b@one/x and ssh://git:pw@two/y", "https://<redacted>@one/x and ssh://git:<redacted>@two/y"},
		{"url at end of sentence", "cannot reach https://u:p@host.", "cannot reach https://<redacted>@host."},
		{"clean url unchanged", "cannot reach https://host/r.git", "cannot reach https://host/r.git"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Text(tc.in)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, got, Text(got), "redacting twice changes nothing")
		})
	}
}

func TestError(t *testing.T) {
	assert.NoError(t, Error(nil))

	clean := errors.New("no url here")
	assert.Same(t, clean, Error(clean), "an error with nothing to redact is returned as is")

	errAuth := errors.New("authentication required")
	err := Error(fmt.Errorf("fetching main from %s: %w", "https://tok:secret@host/r.git", errAuth))
	require.Error(t, err)
	assert.Equal(t, "fetching main from https://<redacted>@host/r.git: authentication required", err.Error())
	assert.NotContains(t, fmt.Sprintf("%v", fmt.Errorf("wrapped: %w", err)), "secret")
	assert.ErrorIs(t, err, errAuth, "the wrapped error is still found")
	assert.Same(t, err, Error(err), "an error already redacted is returned as is")

	// A URL redacted before it went into the message is not redacted again.
	pre := fmt.Errorf("pushing main to %s: %w", URL("https://host/r.git#tok"), errAuth)
	assert.Same(t, pre, Error(pre))
}
