package document

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Scope is what one stream covers: a resource in one namespace, every
// namespace ("*"), or cluster-scoped ("").
type Scope struct {
	GVR       schema.GroupVersionResource
	Namespace string
}

func (s Scope) String() string {
	ns := s.Namespace
	switch ns {
	case "":
		ns = "cluster"
	case "*":
		ns = "all namespaces"
	}
	return GVRString(s.GVR) + " in " + ns
}

// Change is one observed change of an object's document.
type Change struct {
	// Path of the document; Content nil when the object was deleted.
	Path    string
	Content []byte
	// Desc names the object for commit messages: "ConfigMap demo/app".
	Desc string
	// Seen is when the watch event arrived.
	Seen time.Time
	// The object and the resourceVersion of this change, which its audit
	// fact is joined on.
	GVR                              schema.GroupVersionResource
	Kind                             string
	Namespace, Name, ResourceVersion string
	// UID of the object; a delete's audit fact is joined on it, since a
	// deleted name may be reused by a new object.
	UID types.UID
	// Snapshot marks the stream's initial state: what the cluster held when
	// the stream started, not an edit anybody made just now.
	Snapshot bool
	// Manager is the field manager of the object's newest managedFields
	// entry: who wrote it last, where no audit fact says (an applier's
	// echo is told by it).
	Manager string
	// Encrypt, when set, says Content is in clear and holds credentials (a
	// Secret's values, or fields a rule names): the sink encrypts these
	// keys before it keeps the document anywhere, and never logs it.
	Encrypt []string
}

// GVRString prints a group/version/resource the way status fields show it:
// "configmaps.v1", "deployments.apps/v1".
func GVRString(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvr.GroupVersion().String()
}
