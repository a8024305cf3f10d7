package mirror

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/gitrepo"
)

// TestAFolderIsKeptOnlyWithCredentialsThatMayPush (#27, finding 8): a
// squatter's older GitTarget whose credentials the remote refuses keeps no
// folder; one still mirroring with credentials rotated to bad ones keeps
// it; a target that may push again waits until the one writing there has
// stopped.
func TestAFolderIsKeptOnlyWithCredentialsThatMayPush(t *testing.T) {
	targets := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	gps := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	c := &Controller{targets: v1alpha1.NewGitTargetLister(targets), gps: v1alpha1.NewGitProviderLister(gps)}
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	target := func(ns string, age int, ready string, streams bool) *v1.GitTarget {
		gp := &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo"}, Spec: v1.GitProviderSpec{URL: "https://git.example/org/site.git"}}
		require.NoError(t, gps.Add(gp))
		gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site", UID: types.UID("uid-" + ns),
			CreationTimestamp: metav1.NewTime(start.Add(time.Duration(age) * time.Minute))},
			Spec: v1.GitTargetSpec{GitProviderRef: v1.LocalObjectReference{Name: "repo"}, Branch: "main", Path: "apps"}}
		running := metav1.ConditionFalse
		if streams {
			running = metav1.ConditionTrue
		}
		gt.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: ready},
			{Type: v1.ConditionStreamsRunning, Status: running}}
		require.NoError(t, targets.Add(gt))
		return gt
	}
	gpOf := func(gt *v1.GitTarget) *v1.GitProvider {
		gp, err := c.gps.GitProviders(gt.Namespace).Get("repo")
		require.NoError(t, err)
		return gp
	}

	squatter := target("squatter", 0, ReasonPushNotAllowed, false)
	team := target("team", 1, "Mirroring", true)
	assert.Nil(t, c.overlapping(team, gpOf(team)), "a target stopped for refused credentials keeps no folder")
	assert.Equal(t, team, c.overlapping(squatter, gpOf(squatter)), "it waits while the team writes there")

	require.NoError(t, targets.Update(func() *v1.GitTarget {
		s := squatter.DeepCopy()
		s.Status.Conditions[0].Reason, s.Status.Conditions[1].Status = ReasonPushNotAllowed, metav1.ConditionTrue
		return s
	}()))
	assert.Equal(t, "squatter", c.overlapping(team, gpOf(team)).Namespace, "one still mirroring (credentials rotated to bad ones) keeps it")

	require.NoError(t, targets.Update(func() *v1.GitTarget {
		s := squatter.DeepCopy()
		s.Status.Conditions[0].Reason = "PathConflict"
		return s
	}()))
	assert.Equal(t, "squatter", c.overlapping(team, gpOf(team)).Namespace, "once it may push, the older takes the folder back")
}

// TestPushRightsAreAskedOncePerCredential: the remote is asked, before a
// target mirrors, until it takes the credential's pushes, then not again
// for it; a refusal stops the target; an unreachable remote is the
// worker's to report, and so is a refusal once the target mirrors.
func TestPushRightsAreAskedOncePerCredential(t *testing.T) {
	var asked int
	answer := error(nil)
	c := &Controller{cfg: Config{CheckPush: func(context.Context, string, transport.AuthMethod) error {
		asked++
		return answer
	}}, pushable: map[string]string{}, mirrors: map[string]*mirrorState{}}
	gp := &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "repo"}, Spec: v1.GitProviderSpec{URL: "https://git.example/site.git"}}

	answer = fmt.Errorf("%w: 401", gitrepo.ErrPushRefused)
	p := c.pushAllowed(t.Context(), "team/site", gp, "main", nil, "fp1")
	require.NotNil(t, p)
	assert.Equal(t, ReasonPushNotAllowed, p.reason)
	assert.False(t, p.transient, "the target stops")
	assert.Contains(t, p.message, "give GitProvider repo credentials that may push to branch main")

	answer = errors.New("connection refused")
	assert.Nil(t, c.pushAllowed(t.Context(), "team/site", gp, "main", nil, "fp1"))
	answer = nil
	assert.Nil(t, c.pushAllowed(t.Context(), "team/site", gp, "main", nil, "fp1"))
	assert.Nil(t, c.pushAllowed(t.Context(), "team/site", gp, "main", nil, "fp1"))
	assert.Equal(t, 3, asked, "not asked again for a credential that may push")
	assert.Nil(t, c.pushAllowed(t.Context(), "team/site", gp, "main", nil, "fp2"))
	assert.Equal(t, 4, asked, "a rotated credential is asked about")

	c.mirrors["team/site"] = &mirrorState{workerKey: workerKey(gp, "main")}
	answer = fmt.Errorf("%w: 403", gitrepo.ErrPushRefused)
	assert.Nil(t, c.pushAllowed(t.Context(), "team/site", gp, "main", nil, "fp3"), "a mirroring target's pushes report")
	assert.Equal(t, 4, asked)
}

// TestARunningTargetMovedToAnotherRepositoryIsAskedAgain (#27, finding 8):
// a target that mirrors with credentials that may push to its own
// repository, whose GitProvider is then pointed at a repository those
// credentials cannot write, is asked again before it claims a folder
// there: mirroring elsewhere proves nothing of the new remote.
func TestARunningTargetMovedToAnotherRepositoryIsAskedAgain(t *testing.T) {
	refused := 0
	c := &Controller{cfg: Config{CheckPush: func(_ context.Context, url string, _ transport.AuthMethod) error {
		if url == "https://git.example/theirs.git" {
			refused++
			return fmt.Errorf("%w: 403", gitrepo.ErrPushRefused)
		}
		return nil
	}}, pushable: map[string]string{}, mirrors: map[string]*mirrorState{}}
	mine := &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "repo"}, Spec: v1.GitProviderSpec{URL: "https://git.example/mine.git"}}
	require.Nil(t, c.pushAllowed(t.Context(), "team/site", mine, "main", nil, "fp"))
	c.mirrors["team/site"] = &mirrorState{workerKey: workerKey(mine, "main")}

	theirs := mine.DeepCopy()
	theirs.Spec.URL = "https://git.example/theirs.git"
	p := c.pushAllowed(t.Context(), "team/site", theirs, "main", nil, "fp")
	require.NotNil(t, p, "the new remote is asked")
	assert.Equal(t, ReasonPushNotAllowed, p.reason)
	assert.Equal(t, 1, refused)
}
