package tenancy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// TestSubjectCountsRecordedGroupsForAWhile (#27, finding 3): a re-check
// counts the groups recorded with the author until the record is maxAge
// old, never system:masters; a ServiceAccount keeps the groups its name
// gives.
func TestSubjectCountsRecordedGroupsForAWhile(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	recorded := metav1.NewTime(now.Add(-time.Hour))
	alice := &v1.Author{Username: "alice", Groups: []string{"devs", "system:masters", "system:authenticated"}, RecordedAt: &recorded}

	assert.Equal(t, []string{"system:authenticated", "devs"}, Subject(alice, now, 2*time.Hour).GetGroups())
	assert.Empty(t, StaleHint(alice, now, 2*time.Hour))
	assert.Equal(t, []string{"system:authenticated"}, Subject(alice, now, time.Hour).GetGroups(), "an hour old: only the name counts")
	assert.Contains(t, StaleHint(alice, now, time.Hour), "devs, system:authenticated")
	assert.Equal(t, "alice", Subject(alice, now, time.Hour).GetName())

	unstamped := &v1.Author{Username: "bob", Groups: []string{"devs"}}
	assert.Equal(t, []string{"system:authenticated"}, Subject(unstamped, now, time.Hour).GetGroups(), "a record of unknown age")

	sa := &v1.Author{Username: "system:serviceaccount:ops:deployer"}
	assert.Equal(t, []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:ops"}, Subject(sa, now, time.Hour).GetGroups())

	assert.Equal(t, []string{"devs"}, RecordedGroups([]string{"system:masters", "devs"}))
}
