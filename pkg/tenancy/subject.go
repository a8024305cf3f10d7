package tenancy

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// PrivilegedGroups are never recorded for re-checks (#27, finding 3): a
// rule written with a break-glass certificate, or by impersonating
// system:masters, keeps no right that its user does not hold by name.
var PrivilegedGroups = []string{user.SystemPrivilegedGroup}

// RecordedGroups are the groups of a request that an authorisation record
// keeps.
func RecordedGroups(groups []string) []string {
	return slices.DeleteFunc(slices.Clone(groups), func(g string) bool { return slices.Contains(PrivilegedGroups, g) })
}

// DefaultRecordedGroupsMaxAge is how long recorded groups count by default.
const DefaultRecordedGroupsMaxAge = 7 * 24 * time.Hour

// Subject is who a re-check asks about for the author a record names
// (status.authorizedBy, a save's status.author). Kubernetes cannot tell a
// user's groups offline, so a record's groups count only until it is
// maxAge old; after that, the username alone, with the groups every
// authenticated user has and, for a ServiceAccount, those its name gives.
// A user removed from a group thus loses what the group gave within
// maxAge; re-applying the object records the current groups. Privileged
// groups never count.
func Subject(a *v1.Author, now time.Time, maxAge time.Duration) user.Info {
	groups := []string{user.AllAuthenticated}
	if ns, _, err := serviceaccount.SplitUsername(a.Username); err == nil {
		groups = append(groups, serviceaccount.AllServiceAccountsGroup, serviceaccount.MakeNamespaceGroupName(ns))
	}
	if Fresh(a, now, maxAge) {
		for _, g := range RecordedGroups(a.Groups) {
			if !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
	}
	return &user.DefaultInfo{Name: a.Username, UID: a.UID, Groups: groups}
}

// Fresh says whether a record's groups still count.
func Fresh(a *v1.Author, now time.Time, maxAge time.Duration) bool {
	return a.RecordedAt != nil && now.Sub(a.RecordedAt.Time) < maxAge
}

// StaleHint is what a refusal adds when the record's groups no longer
// counted: how to have them recorded again.
func StaleHint(a *v1.Author, now time.Time, maxAge time.Duration) string {
	if Fresh(a, now, maxAge) || len(RecordedGroups(a.Groups)) == 0 {
		return ""
	}
	return " (the groups recorded with it, " + strings.Join(RecordedGroups(a.Groups), ", ") +
		", no longer count: the record is older than --recorded-groups-max-age; re-apply it to record the current ones)"
}
