package gitrepo

import (
	"context"
	"net"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/pkg/redact"
)

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
			assert.Equal(t, redact.URL(tc.url), r.URL())
			_, err = r.Fetch(context.Background())
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "s3cret")
			assert.Contains(t, err.Error(), redact.URL(tc.url))
			err = r.Push(context.Background(), plumbing.ZeroHash)
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}
