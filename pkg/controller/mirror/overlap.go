package mirror

import (
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// overlapping returns the oldest other GitTarget that writes a folder of the
// same repository and branch overlapping gt's, when it is older than gt: the
// older target keeps the folder and gt is refused. Both would otherwise
// write, and prune, each other's documents.
func (c *Controller) overlapping(gt *v1.GitTarget, gp *v1.GitProvider) *v1.GitTarget {
	all, err := c.targets.List(labels.Everything())
	if err != nil {
		return nil
	}
	repo := repoIdentity(gp.Spec.URL)
	var oldest *v1.GitTarget
	for _, other := range all {
		if other.UID == gt.UID || other.Spec.Branch != gt.Spec.Branch || !pathsOverlap(other.Spec.Path, gt.Spec.Path) ||
			!older(other, gt) {
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
