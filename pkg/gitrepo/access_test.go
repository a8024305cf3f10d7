package gitrepo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"reverser.dev/reverser/test/gitserver"
)

// TestCheckPushTellsWhoMayWrite: a repository anyone may fetch takes
// pushes only from credentials that may write; a refusal is
// ErrPushRefused and names no password, a missing repository is not.
func TestCheckPushTellsWhoMayWrite(t *testing.T) {
	open, bare := gitserver.Serve(t, "site")
	root := filepath.Dir(bare)
	require.NoError(t, os.WriteFile(filepath.Join(root, gitserver.CredentialsFile), []byte("robot:s3cret\n"), 0o600))
	public := strings.Replace(open, gitserver.PathPrefix+"/", gitserver.PublicPrefix+"/", 1)
	private := strings.Replace(open, gitserver.PathPrefix+"/", gitserver.PrivatePrefix+"/", 1)
	robot := &githttp.BasicAuth{Username: "robot", Password: "s3cret"}
	wrong := &githttp.BasicAuth{Username: "robot", Password: "not-the-s3cret-either"}

	assert.NoError(t, CheckPush(t.Context(), open, nil), "a server that takes anonymous pushes")
	assert.NoError(t, CheckPush(t.Context(), public, robot))
	assert.NoError(t, CheckPush(t.Context(), private, robot))
	for _, tc := range []struct {
		url  string
		auth *githttp.BasicAuth
	}{{public, nil}, {public, wrong}, {private, nil}, {private, wrong}} {
		var err error
		if tc.auth == nil {
			err = CheckPush(t.Context(), tc.url, nil)
		} else {
			err = CheckPush(t.Context(), tc.url, tc.auth)
		}
		require.ErrorIs(t, err, ErrPushRefused, tc.url)
		assert.NotContains(t, err.Error(), "s3cret")
	}
	err := CheckPush(t.Context(), strings.Replace(public, "site.git", "missing.git", 1), robot)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrPushRefused, "a missing repository is not a refusal: %v", err)
}
