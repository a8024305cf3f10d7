// Package resolve resolves rules against a source's discovery: which
// group/version/resources a rule's apiGroups and resources name (Rules),
// what is not served or never mirrored, and the credential fields each
// names. Our API server's rule admission and the controller share it.
// Served is an immutable snapshot; nothing here locks or blocks.
package resolve

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/document"
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

// Result is what a set of rules selects.
type Result struct {
	GVRs []schema.GroupVersionResource
	// Unresolved names what the rules asked for that the source does not
	// serve (or serves without list and watch), for the rule's status.
	Unresolved []string
	// Credentials are the credential fields the rules name for each
	// resource.
	Credentials map[schema.GroupVersionResource][]v1.CredentialField
}

// Rules matches rules against what the source serves. namespaced selects
// namespaced resources (WatchRule) or cluster-scoped ones (ClusterWatchRule).
// Resources the default policy never mirrors are left out silently when a
// wildcard matched them and reported when named.
func Rules(rules []v1.ResourceRule, served Served, namespaced bool) Result {
	var res Result
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
					res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is not served", gv.String()))
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
								res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is %s: use a %s", document.GVRString(gvr),
									map[bool]string{true: "namespaced", false: "cluster-scoped"}[r.Namespaced],
									map[bool]string{true: "WatchRule", false: "ClusterWatchRule"}[r.Namespaced]))
							}
						case !document.Mirrorable(gvr.GroupResource()):
							if !wild {
								res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is runtime state and never mirrored", document.GVRString(gvr)))
							}
						case !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch"):
							if !wild {
								res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s cannot be listed and watched", document.GVRString(gvr)))
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
						res.Unresolved = append(res.Unresolved, fmt.Sprintf("%s is not served", document.GVRString(gv.WithResource(name))))
					}
				}
			}
		}
	}
	slices.SortFunc(res.GVRs, func(a, b schema.GroupVersionResource) int {
		return strings.Compare(document.GVRString(a), document.GVRString(b))
	})
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
