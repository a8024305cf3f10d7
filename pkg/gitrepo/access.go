package gitrepo

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"

	"reverser.dev/reverser/pkg/redact"
)

// ErrPushRefused means the remote refused the credentials a push would use:
// they are missing, wrong, or may only read.
var ErrPushRefused = errors.New("the remote refuses pushes with these credentials")

// CheckPush asks the remote, as a push begins, whether it takes pushes with
// auth: hosts advertise git-receive-pack only to credentials that may
// write (HTTP 401 or 403 otherwise, as for a public repository read
// anonymously or a read-only token). Nothing is sent. It returns
// ErrPushRefused for such a refusal, and any other failure (the remote
// down, the repository missing) as it is, for the caller to retry.
func CheckPush(ctx context.Context, url string, auth transport.AuthMethod) error {
	ep, err := transport.NewEndpoint(url)
	if err != nil {
		return redact.Error(fmt.Errorf("parsing %s: %w", redact.URL(url), err))
	}
	c, err := client.NewClient(ep)
	if err != nil {
		return redact.Error(err)
	}
	sess, err := c.NewReceivePackSession(ep, auth)
	if err == nil {
		defer sess.Close()
		_, err = sess.AdvertisedReferencesContext(ctx)
	}
	switch {
	case err == nil, errors.Is(err, transport.ErrEmptyRemoteRepository):
		return nil
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return redact.Error(fmt.Errorf("%w: %s: %v", ErrPushRefused, redact.URL(url), err))
	}
	return redact.Error(fmt.Errorf("asking %s whether it takes pushes: %w", redact.URL(url), err))
}
