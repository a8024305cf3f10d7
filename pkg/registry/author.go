package registry

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"

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
	now := metav1.Now()
	// Privileged groups are never recorded: re-checks never count them.
	groups := slices.DeleteFunc(slices.Clone(u.GetGroups()), func(g string) bool { return g == user.SystemPrivilegedGroup })
	return &reverser.Author{Username: u.GetName(), UID: u.GetUID(), Groups: groups, RecordedAt: &now}
}

// StampsAuthorizer makes k keep, in the status field that authorizedBy
// returns, the user who created the object or last changed its spec (an
// admission plugin has checked their rights); status writes and metadata
// changes keep it, and no client can set it. It returns k.
func StampsAuthorizer[T Object](k *Kind[T], authorizedBy func(T) **reverser.Author) *Kind[T] {
	k.PrepareForCreate = func(ctx context.Context, o T) { *authorizedBy(o) = RequestAuthor(ctx) }
	k.PrepareForUpdate = func(ctx context.Context, o, old T) {
		if SpecChanged(o, old) {
			*authorizedBy(o) = RequestAuthor(ctx)
		}
	}
	k.PrepareStatusUpdate = func(o, old T) { *authorizedBy(o) = *authorizedBy(old) }
	return k
}
