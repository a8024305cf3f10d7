package watch

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// Served is what a source cluster serves, from discovery: each group's
// versions (preferred first) and each group/version's resources.
type Served struct {
	Preferred map[string]string                            // group → preferred version
	Resources map[schema.GroupVersion][]metav1.APIResource // top-level resources only
}

// NewServed builds Served from discovery's groups and resource lists.
func NewServed(groups []*metav1.APIGroup, lists []*metav1.APIResourceList) Served {
	s := Served{Preferred: map[string]string{}, Resources: map[schema.GroupVersion][]metav1.APIResource{}}
	for _, g := range groups {
		s.Preferred[g.Name] = g.PreferredVersion.Version
	}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // subresources are not objects
			}
			s.Resources[gv] = append(s.Resources[gv], r)
		}
	}
	return s
}

// Kind is the kind of the resource gvr, "" when it is not served.
func (s Served) Kind(gvr schema.GroupVersionResource) string {
	for _, r := range s.Resources[gvr.GroupVersion()] {
		if r.Name == gvr.Resource {
			return r.Kind
		}
	}
	return ""
}

// Resolution is what a set of rules selects.
type Resolution struct {
	GVRs []schema.GroupVersionResource
	// Unresolved names what the rules asked for that the source does not
	// serve (or serves without list and watch), for the rule's status.
	Unresolved []string
	// Credentials are the credential fields the rules name for each
	// resource.
	Credentials map[schema.GroupVersionResource][]v1.CredentialField
}

// Resolve matches rules against what the source serves. namespaced selects
// namespaced resources (WatchRule) or cluster-scoped ones (ClusterWatchRule).
// Resources the default policy never mirrors are left out silently when a
// wildcard matched them and reported when named.
func Resolve(rules []v1.ResourceRule, served Served, namespaced bool) Resolution {
	var res Resolution
	seen := map[schema.GroupVersionResource]bool{}
	for _, rule := range rules {
		for _, group := range expandGroups(rule.APIGroups, served) {
			versions := rule.APIVersions
			if len(versions) == 0 || slices.Contains(versions, "*") && len(versions) == 1 {
				pref, ok := served.Preferred[group]
				if !ok {
					res.Unresolved = append(res.Unresolved, fmt.Sprintf("group %q is not served", group))
					continue
				}
				versions = []string{pref}
			}
			for _, version := range versions {
				gv := schema.GroupVersion{Group: group, Version: version}
				available, ok := served.Resources[gv]
				if !ok {
					res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is not served", gvString(gv)))
					continue
				}
				for _, name := range rule.Resources {
					wild := name == "*"
					found := false
					for _, r := range available {
						if !wild && r.Name != name {
							continue
						}
						found = true
						gvr := gv.WithResource(r.Name)
						switch {
						case r.Namespaced != namespaced:
							if !wild {
								res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is %s: use a %s", gvrString(gvr),
									map[bool]string{true: "namespaced", false: "cluster-scoped"}[r.Namespaced],
									map[bool]string{true: "WatchRule", false: "ClusterWatchRule"}[r.Namespaced]))
							}
						case !Mirrorable(gvr.GroupResource()):
							if !wild {
								res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is runtime state and never mirrored", gvrString(gvr)))
							}
						case !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch"):
							if !wild {
								res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s cannot be listed and watched", gvrString(gvr)))
							}
						default:
							if !seen[gvr] {
								seen[gvr] = true
								res.GVRs = append(res.GVRs, gvr)
							}
							if len(rule.CredentialFields) > 0 {
								if res.Credentials == nil {
									res.Credentials = map[schema.GroupVersionResource][]v1.CredentialField{}
								}
								res.Credentials[gvr] = append(res.Credentials[gvr], rule.CredentialFields...)
							}
						}
					}
					if !found && !wild {
						res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is not served", gvrString(gv.WithResource(name))))
					}
				}
			}
		}
	}
	slices.SortFunc(res.GVRs, func(a, b schema.GroupVersionResource) int { return strings.Compare(gvrString(a), gvrString(b)) })
	slices.Sort(res.Unresolved)
	res.Unresolved = slices.Compact(res.Unresolved)
	return res
}

func expandGroups(groups []string, served Served) []string {
	if !slices.Contains(groups, "*") {
		return groups
	}
	var all []string
	for g := range served.Preferred {
		all = append(all, g)
	}
	slices.Sort(all)
	return all
}

func gvString(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return gv.Version
	}
	return gv.Group + "/" + gv.Version
}

func gvrString(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvString(gvr.GroupVersion())
}

// GVRString prints a group/version/resource the way status fields show it:
// "configmaps.v1", "deployments.apps/v1".
func GVRString(gvr schema.GroupVersionResource) string { return gvrString(gvr) }
