package registry

import (
	"context"

	"k8s.io/apiserver/pkg/endpoints/request"

	"reverser.dev/reverser/pkg/apis/reverser"
)

// RequestAuthor is the authenticated user of a request, as the server stamps
// it into fields no client can write (CommitRequest.status.author,
// WatchRule.status.authorizedBy); nil when the request carries no user.
func RequestAuthor(ctx context.Context) *reverser.Author {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil
	}
	return &reverser.Author{Username: u.GetName(), UID: u.GetUID(), Groups: append([]string(nil), u.GetGroups()...)}
}
