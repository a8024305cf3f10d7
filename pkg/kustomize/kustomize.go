// Package kustomize finds where a live object comes from in a folder of a
// repository, so that a change is written into the source people edit and
// not beside it (features F1, F2, B4):
//
//   - Documents indexes every YAML document under a folder by object, so a
//     document that already exists anywhere keeps its file, kustomize or not;
//   - Render builds a folder kustomize builds, in process (krusty: no
//     plugins, no exec, no network; a remote base is refused by name), and
//     maps each rendered object back to its source: a document of a file, or
//     an entry of a configMapGenerator or secretGenerator.
//
// It reads a snapshot of the repository given as a map of paths to file
// contents and never writes; nothing here holds a lock or blocks.
package kustomize

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// ID names an object as a document does: its group, kind, namespace and
// name. The version is left out: a document keeps its place when the
// object is read at another version.
type ID struct {
	Group, Kind, Namespace, Name string
}

func (id ID) String() string {
	gk := id.Kind
	if id.Group != "" {
		gk += "." + id.Group
	}
	if id.Namespace == "" {
		return gk + "/" + id.Name
	}
	return gk + "/" + id.Namespace + "/" + id.Name
}

// Key is how a folder applied into namespace ns names the object: its
// documents may leave ns out (the applier puts them there), so an object
// in ns is keyed without it. With ns unknown ("") the ID is its own key.
func (id ID) Key(ns string) ID {
	if ns != "" && id.Namespace == ns {
		id.Namespace = ""
	}
	return id
}

// MayBeSame tells whether a document naming a and one naming b can be
// one object once a folder applied into ns is applied: their keys are
// equal, or, with ns unknown, one leaves the namespace out, which the
// applier may fill with the other's.
func MayBeSame(a, b ID, ns string) bool {
	if a.Key(ns) == b.Key(ns) {
		return true
	}
	return ns == "" && a.Group == b.Group && a.Kind == b.Kind && a.Name == b.Name && (a.Namespace == "" || b.Namespace == "")
}

// idOf reads an ID from apiVersion, kind and metadata.
func idOf(apiVersion, kind, namespace, name string) ID {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		group = "" // the core group: "v1"
	}
	return ID{Group: group, Kind: kind, Namespace: namespace, Name: name}
}

// Files is a snapshot of a repository: path (slash-separated, relative to
// the repository's root) to content.
type Files map[string][]byte

// Location is one document of one file: File's Index-th document.
type Location struct {
	File  string
	Index int
}

// Documents indexes the documents of the YAML files under dir (the whole
// repository for "" or "."), skipping kustomization files. An object named
// by two documents is reported, not guessed at.
func Documents(files Files, dir string) (map[ID]Location, error) {
	return documentsIn(files, dir, "")
}

// documentsIn is Documents keyed for a folder applied into ns (ID.Key): a
// document that leaves ns out and one that names it are one object twice.
func documentsIn(files Files, dir, ns string) (map[ID]Location, error) {
	out := map[ID]Location{}
	var dup []string
	for _, p := range sortedPaths(files) {
		if !under(p, dir) || !isYAML(p) || IsKustomization(p) {
			continue
		}
		ids, err := documentIDs(files[p])
		if err != nil {
			continue // not Kubernetes YAML (a values file, say): no object lives there
		}
		for i, id := range ids {
			if id == (ID{}) {
				continue
			}
			id = id.Key(ns)
			if prev, ok := out[id]; ok {
				dup = append(dup, fmt.Sprintf("%s in %s and %s", id, prev.File, p))
				continue
			}
			out[id] = Location{File: p, Index: i}
		}
	}
	if len(dup) > 0 {
		return out, fmt.Errorf("objects in more than one document: %s", strings.Join(dup, "; "))
	}
	return out, nil
}

// documentIDs reads the ID of each document of a multi-document file; a
// document that is not an object gives an empty ID.
func documentIDs(data []byte) ([]ID, error) {
	r := kyaml.NewDecoder(bytes.NewReader(data))
	var ids []ID
	for {
		var doc struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Metadata   struct {
				Name      string `yaml:"name"`
				Namespace string `yaml:"namespace"`
			} `yaml:"metadata"`
		}
		err := r.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return ids, nil
		}
		if err != nil {
			return nil, err
		}
		var id ID
		if doc.APIVersion != "" && doc.Kind != "" && doc.Metadata.Name != "" {
			id = idOf(doc.APIVersion, doc.Kind, doc.Metadata.Namespace, doc.Metadata.Name)
		}
		ids = append(ids, id)
	}
}

// SourceKind says what in the repository makes a rendered object.
type SourceKind string

const (
	// FromDocument: a document of a file in resources (or a base's).
	FromDocument SourceKind = "Document"
	// FromGenerator: an entry of configMapGenerator or secretGenerator.
	FromGenerator SourceKind = "Generator"
)

// Source is where a rendered object comes from.
type Source struct {
	Kind SourceKind
	// File is the document's file, or the kustomization holding the
	// generator, relative to the repository's root.
	File string
	// Generator is the generator entry's kind (ConfigMapGenerator or
	// SecretGenerator) and name, for FromGenerator.
	GeneratorKind, Generator string
	// GeneratorNamespace is the entry's namespace (its own, or its
	// kustomization's): entries are told apart by name and namespace.
	GeneratorNamespace string
	// Unknown says why the source was not found (Kind is ""): a change of
	// the object is refused with it.
	Unknown string
}

// Object is one object a kustomization renders.
type Object struct {
	ID     ID
	Source Source
	// YAML is the rendered document, without kustomize's build annotations.
	YAML []byte
}

// Render builds the kustomization in dir and says where each object comes
// from. Remote bases and anything that would run a program are refused.
func Render(files Files, dir string) ([]Object, error) {
	dir = clean(dir)
	if !HasKustomization(files, dir) {
		return nil, fmt.Errorf("%s holds no kustomization", dir)
	}
	if err := refuseRemote(files, dir, map[string]bool{}); err != nil {
		return nil, err
	}
	fsys, err := memFS(files, dir)
	if err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = types.DisabledPluginConfig()
	m, err := krusty.MakeKustomizer(opts).Run(fsys, "/"+dir)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", dir, err)
	}
	var out []Object
	for _, r := range m.Resources() {
		src, err := sourceOf(files, r, dir)
		if err != nil {
			// That object cannot be written; the others still can.
			src = Source{Unknown: err.Error()}
		}
		r.RemoveBuildAnnotations()
		if err := r.PipeE(kyaml.ClearAnnotation(originAnnotation)); err != nil {
			return nil, err
		}
		if len(r.GetAnnotations()) == 0 {
			// Removing kustomize's annotations must not leave "annotations: {}".
			if err := r.PipeE(kyaml.Lookup("metadata"), kyaml.Clear("annotations")); err != nil {
				return nil, err
			}
		}
		y, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		out = append(out, Object{ID: idOf(r.GetApiVersion(), r.GetKind(), r.GetNamespace(), r.GetName()), Source: src, YAML: y})
	}
	return out, nil
}

const originAnnotation = "config.kubernetes.io/origin"

// sourceOf reads the origin annotation kustomize writes with
// buildMetadata: [originAnnotations]; its paths are relative to dir.
func sourceOf(files Files, r *resource.Resource, dir string) (Source, error) {
	o, err := r.GetOrigin()
	if err != nil || o == nil {
		return Source{}, fmt.Errorf("%s/%s: kustomize gave no origin: %v", r.GetKind(), r.GetName(), err)
	}
	if o.Repo != "" {
		return Source{}, fmt.Errorf("%s/%s comes from the remote %s, which is not read", r.GetKind(), r.GetName(), o.Repo)
	}
	if o.ConfiguredIn != "" {
		file := join(dir, o.ConfiguredIn)
		name, ns, err := generatorEntry(files, file, o.ConfiguredBy.Kind, r.OrgId().Name, r.OrgId().Namespace)
		if err != nil {
			return Source{}, err
		}
		return Source{Kind: FromGenerator, File: file, GeneratorKind: o.ConfiguredBy.Kind, Generator: name, GeneratorNamespace: ns}, nil
	}
	return Source{Kind: FromDocument, File: join(dir, o.Path)}, nil
}

// hashLen is the length of the content hash kustomize appends to a
// generated name.
const hashLen = 10

// generatorEntry finds the entry of kind in the kustomization file that
// generated the object first named orgName in orgNamespace (before
// prefixes and suffixes; with the content hash unless disabled), by name
// and namespace, never by position.
func generatorEntry(files Files, file, kind, orgName, orgNamespace string) (name, namespace string, err error) {
	var k types.Kustomization
	if err := kyaml.Unmarshal(files[file], &k); err != nil {
		return "", "", fmt.Errorf("reading %s: %w", file, err)
	}
	var args []types.GeneratorArgs
	switch kind {
	case "ConfigMapGenerator":
		for _, g := range k.ConfigMapGenerator {
			args = append(args, g.GeneratorArgs)
		}
	case "SecretGenerator":
		for _, g := range k.SecretGenerator {
			args = append(args, g.GeneratorArgs)
		}
	default:
		return "", "", fmt.Errorf("%s: objects of a %s are not written back", file, kind)
	}
	// The name may carry the prefixes and suffixes of the kustomizations
	// above: the entry whose name it holds, the longest one, made it.
	base := orgName
	if len(orgName) > hashLen+1 && orgName[len(orgName)-hashLen-1] == '-' {
		base = orgName[:len(orgName)-hashLen-1]
	}
	found := generatorEntries(args, k.Namespace, base, orgName, orgNamespace, true)
	if len(found) == 0 {
		// An overlay's entry with behavior: merge keeps the base's origin
		// but takes the overlay's namespace: the base's entry of that name
		// made it.
		found = generatorEntries(args, k.Namespace, base, orgName, orgNamespace, false)
		if len(found) == 1 {
			ns := found[0].Namespace
			if ns == "" {
				ns = k.Namespace
			}
			return found[0].Name, ns, nil
		}
	}
	if len(found) != 1 {
		return "", "", fmt.Errorf("%s: %d %s entries could have made %s/%s", file, len(found), kind, orgNamespace, orgName)
	}
	return found[0].Name, orgNamespace, nil
}

// generatorEntries are the entries of args whose name the generated name
// holds (the longest such names), in orgNamespace when byNamespace.
func generatorEntries(args []types.GeneratorArgs, kns, base, orgName, orgNamespace string, byNamespace bool) []types.GeneratorArgs {
	var found []types.GeneratorArgs
	for _, g := range args {
		ns := g.Namespace
		if ns == "" {
			ns = kns
		}
		if byNamespace && ns != orgNamespace || !(base == g.Name || orgName == g.Name || strings.Contains(base, g.Name)) {
			continue
		}
		switch {
		case len(found) == 0 || len(g.Name) > len(found[0].Name):
			found = []types.GeneratorArgs{g}
		case len(g.Name) == len(found[0].Name):
			found = append(found, g)
		}
	}
	return found
}

// RemoteError names an entry of a kustomization that is not a path in the
// repository: a remote base, which Reverser neither fetches nor writes.
type RemoteError struct {
	Kustomization, Entry string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("%s names %q, which is not in the repository (remote bases are not read)", e.Kustomization, e.Entry)
}

// refuseRemote walks the kustomizations dir includes and refuses an entry
// of resources, components or bases that is not a path in the snapshot.
func refuseRemote(files Files, dir string, seen map[string]bool) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	file := KustomizationFile(files, dir)
	var k types.Kustomization
	if err := kyaml.Unmarshal(files[file], &k); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	//lint:ignore SA1019 kustomize still reads bases:, so a remote one there is refused too
	for _, e := range slices.Concat(k.Resources, k.Components, k.Bases) {
		p := join(dir, e)
		switch {
		case files[p] != nil:
		case HasKustomization(files, p):
			if err := refuseRemote(files, p, seen); err != nil {
				return err
			}
		default:
			return &RemoteError{Kustomization: file, Entry: e}
		}
	}
	return nil
}

// memFS copies the snapshot into an in-memory file system rooted at "/",
// with buildMetadata: [originAnnotations] added to the kustomization in
// dir so kustomize records where each object comes from.
func memFS(files Files, dir string) (filesys.FileSystem, error) {
	fsys := filesys.MakeFsInMemory()
	top := KustomizationFile(files, dir)
	for p, data := range files {
		if p == top {
			var err error
			if data, err = withOrigins(data); err != nil {
				return nil, fmt.Errorf("reading %s: %w", p, err)
			}
		}
		if err := fsys.WriteFile("/"+p, data); err != nil {
			return nil, err
		}
	}
	return fsys, nil
}

func withOrigins(data []byte) ([]byte, error) {
	node, err := kyaml.Parse(string(data))
	if err != nil {
		return nil, err
	}
	list, err := node.Pipe(kyaml.LookupCreate(kyaml.SequenceNode, "buildMetadata"))
	if err != nil {
		return nil, err
	}
	for _, n := range list.Content() {
		if n.Value == types.OriginAnnotations {
			return data, nil
		}
	}
	if err := list.PipeE(kyaml.Append(kyaml.NewScalarRNode(types.OriginAnnotations).YNode())); err != nil {
		return nil, err
	}
	return []byte(node.MustString()), nil
}

// KustomizationFile is the kustomization file of dir, or "" when it has
// none.
func KustomizationFile(files Files, dir string) string {
	for _, n := range konfig.RecognizedKustomizationFileNames() {
		if p := join(dir, n); files[p] != nil {
			return p
		}
	}
	return ""
}

// HasKustomization tells whether kustomize can build dir.
func HasKustomization(files Files, dir string) bool { return KustomizationFile(files, dir) != "" }

// IsKustomization tells whether p is a kustomization file by its name.
func IsKustomization(p string) bool {
	return slices.Contains(konfig.RecognizedKustomizationFileNames(), path.Base(p))
}

func isYAML(p string) bool { return strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") }

func clean(dir string) string {
	dir = path.Clean(strings.TrimPrefix(dir, "/"))
	if dir == "" {
		return "."
	}
	return dir
}

func join(dir, p string) string { return path.Clean(path.Join(clean(dir), p)) }

func under(p, dir string) bool {
	dir = clean(dir)
	return dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

func sortedPaths(files Files) []string {
	ps := make([]string, 0, len(files))
	for p := range files {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}
