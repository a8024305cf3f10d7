package mirror

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/gitrepo"
)

// overlapping returns the GitTarget that keeps a folder of the same
// repository and branch overlapping gt's, when it is not gt: the older
// target, of those the remote takes pushes from. Both would otherwise
// write, and prune, each other's documents. A target stopped because its
// credentials may not push (PushNotAllowed) keeps no folder, so nobody
// holds one with credentials that cannot write; once it may push, it waits
// until no other target writes there before it takes its folder back, so
// that two never write at once.
func (c *Controller) overlapping(gt *v1.GitTarget, gp *v1.GitProvider) *v1.GitTarget {
	all, err := c.targets.List(labels.Everything())
	if err != nil {
		return nil
	}
	repo := repoIdentity(gp.Spec.URL)
	wasRefused := pushRefused(gt)
	var oldest *v1.GitTarget
	for _, other := range all {
		if other.UID == gt.UID || other.Spec.Branch != gt.Spec.Branch || !pathsOverlap(other.Spec.Path, gt.Spec.Path) ||
			pushRefused(other) || !(older(other, gt) || wasRefused && writing(other)) {
			continue
		}
		ogp, err := c.gps.GitProviders(other.Namespace).Get(other.Spec.GitProviderRef.Name)
		if err != nil || repoIdentity(ogp.Spec.URL) != repo {
			continue
		}
		if oldest == nil || older(other, oldest) {
			oldest = other
		}
	}
	return oldest
}

// pushRefused says whether a target is stopped because the remote refused
// its credentials for a push.
func pushRefused(gt *v1.GitTarget) bool {
	ready := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionReady)
	return ready != nil && ready.Reason == ReasonPushNotAllowed && !writing(gt)
}

// writing says whether a target's mirror runs.
func writing(gt *v1.GitTarget) bool {
	return meta.IsStatusConditionTrue(gt.Status.Conditions, v1.ConditionStreamsRunning)
}

// ReasonPushNotAllowed: the remote refuses the GitProvider's credentials
// for a push.
const ReasonPushNotAllowed = "PushNotAllowed"

// pushAllowed asks the remote, before a target starts mirroring (or moves
// to another repository or branch), whether it takes the GitProvider's
// pushes, once per credential (the answer is kept
// while the provider's worker runs). A refusal stops the target: a folder
// is not held with credentials that cannot write. A target already
// mirroring is not asked: its worker takes rotated credentials at once and
// its pushes report a refusal, its windows kept for a fixed credential. Any
// other failure is left to the worker's fetch, which retries and reports
// it.
func (c *Controller) pushAllowed(ctx context.Context, target string, gp *v1.GitProvider, branch string, auth transport.AuthMethod,
	authFP string) *problem {
	key := workerKey(gp, branch)
	c.mu.Lock()
	fp, proven := c.pushable[key]
	// Mirroring through another worker (the GitProvider's URL or the
	// branch changed) proves nothing of this remote.
	m := c.mirrors[target]
	running := m != nil && m.workerKey == key
	c.mu.Unlock()
	if running || proven && fp == authFP {
		return nil
	}
	err := c.cfg.CheckPush(ctx, gp.Spec.URL, auth)
	switch {
	case err == nil:
		c.mu.Lock()
		c.pushable[key] = authFP
		c.mu.Unlock()
	case errors.Is(err, gitrepo.ErrPushRefused):
		return problemf(ReasonPushNotAllowed, "%v: give GitProvider %s credentials that may push to branch %s (spec.secretRef)",
			err, gp.Name, branch).in(areaGit)
	}
	return nil
}

// older orders GitTargets by creation, then by namespace/name, so that of two
// targets exactly one is older.
func older(a, b *v1.GitTarget) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// pathsOverlap says whether one folder contains the other ("" is the root).
func pathsOverlap(a, b string) bool {
	a, b = strings.Trim(a, "/"), strings.Trim(b, "/")
	return a == "" || b == "" || a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

var scpLike = regexp.MustCompile(`^(?:[^@/]+@)?([^:/]+):(.*)$`)

// repoIdentity names a repository independently of how its URL is spelled:
// scheme, credentials, default port, case of the host and of the path (as
// the common hosts compare them; a server that tells case apart is then
// refused a second target it could have taken, never given one), a
// trailing ".git" or "/" do not matter, and the scp form equals its ssh://
// URL.
func repoIdentity(raw string) string {
	if m := scpLike.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		return strings.ToLower(m[1]) + "/" + trimRepoPath(m[2])
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	host := strings.ToLower(u.Hostname())
	if port := u.Port(); port != "" && !(port == "443" && u.Scheme == "https") && !(port == "80" && u.Scheme == "http") &&
		!(port == "22" && u.Scheme == "ssh") {
		host += ":" + port
	}
	return host + "/" + trimRepoPath(u.Path)
}

func trimRepoPath(p string) string {
	p = strings.ToLower(strings.Trim(p, "/"))
	return strings.TrimSuffix(p, ".git")
}
