package document

import (
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ClusterScopeFolder holds cluster-scoped objects in the layout.
const ClusterScopeFolder = "_cluster"

// DocumentPath is where an object's document lives under a GitTarget's
// path: <path>/<namespace>/<group>/<resource>/<name>.yaml, with _cluster for
// cluster-scoped objects and no group folder for the core group.
func DocumentPath(base string, gvr schema.GroupVersionResource, namespace, name string) string {
	return path.Join(ScopeFolder(base, gvr, namespace), name+".yaml")
}

// ScopeFolder is the folder holding every document of one resource in one
// namespace (or _cluster): the unit a stream's sweep covers.
func ScopeFolder(base string, gvr schema.GroupVersionResource, namespace string) string {
	if namespace == "" {
		namespace = ClusterScopeFolder
	}
	parts := []string{base, namespace}
	if gvr.Group != "" {
		parts = append(parts, gvr.Group)
	}
	return path.Join(append(parts, gvr.Resource)...)
}

// InScope reports whether p is a document of gvr in namespace ("" for
// cluster-scoped, "*" for any namespace) under base, by the layout.
func InScope(p, base string, gvr schema.GroupVersionResource, namespace string) bool {
	if !strings.HasSuffix(p, ".yaml") {
		return false
	}
	rel := p
	if base != "" && base != "." {
		prefix := strings.TrimSuffix(base, "/") + "/"
		if !strings.HasPrefix(p, prefix) {
			return false
		}
		rel = p[len(prefix):]
	}
	segs := strings.Split(rel, "/")
	want := []string{gvr.Resource}
	if gvr.Group != "" {
		want = []string{gvr.Group, gvr.Resource}
	}
	if len(segs) != len(want)+2 {
		return false
	}
	switch ns := segs[0]; namespace {
	case "*":
		if ns == ClusterScopeFolder {
			return false
		}
	case "":
		if ns != ClusterScopeFolder {
			return false
		}
	default:
		if ns != namespace {
			return false
		}
	}
	return slices.Equal(segs[1:len(segs)-1], want)
}
