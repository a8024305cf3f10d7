package kustomize

import (
	"fmt"
	"reflect"
	"strings"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// planTransformed writes a change of replicas or container images into the
// images: and replicas: entries of dir's kustomization, where kustomize
// sets them: an entry that names the object or image is updated; for a
// document in a read-only base, an entry is added, so the overlay says it.
// It returns no edits when the change is not only that, or when the
// document under dir is where it goes.
func planTransformed(files Files, dir string, o Object, ch Change) ([]Edit, bool, error) {
	if ch.New == nil {
		return nil, false, nil
	}
	old := ch.Old
	if old == nil {
		old = o.YAML
	}
	var before, after map[string]any
	if err := kyaml.Unmarshal(old, &before); err != nil {
		return nil, false, err
	}
	if err := kyaml.Unmarshal(ch.New, &after); err != nil {
		return nil, false, err
	}
	replicas, images, only := transformable(before, after)
	if !only || (replicas == nil && len(images) == 0) {
		return nil, false, nil
	}
	srcDoc, err := sourceDocument(files, o, ch.ID)
	if err != nil {
		return nil, false, err
	}
	readOnly := !under(o.Source.File, dir)
	kfile := KustomizationFile(files, dir)
	k, err := kyaml.Parse(string(files[kfile]))
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", kfile, err)
	}
	docName := stringAt(srcDoc, "metadata", "name")
	if replicas != nil {
		entry := findEntry(k, "replicas", docName)
		switch {
		case entry != nil:
			if err := entry.PipeE(kyaml.SetField("count", kyaml.NewScalarRNode(fmt.Sprint(replicas)))); err != nil {
				return nil, false, err
			}
			entry.Field("count").Value.YNode().Tag = kyaml.NodeTagInt
		case readOnly:
			if err := appendEntry(k, "replicas", "name", docName, "count", replicas); err != nil {
				return nil, false, err
			}
		default:
			return nil, false, nil
		}
	}
	srcImages := containerImages(srcDoc)
	for i, img := range images {
		if i >= len(srcImages) || img == "" {
			continue
		}
		key, _ := splitImage(srcImages[i])
		newName, newTag := splitImage(img)
		entry := findEntry(k, "images", key)
		switch {
		case entry != nil:
			if err := setImage(entry, key, newName, newTag); err != nil {
				return nil, false, err
			}
		case readOnly:
			kv := []any{"name", key}
			if newName != key {
				kv = append(kv, "newName", newName)
			}
			if err := appendEntry(k, "images", append(kv, "newTag", newTag)...); err != nil {
				return nil, false, err
			}
		default:
			return nil, false, nil
		}
	}
	return []Edit{{File: kfile, Content: formatAs(k, files[kfile])}}, true, nil
}

// transformable reports the replicas and the container images (by index of
// containers, then initContainers; "" where unchanged) that changed, and
// whether they are all that changed.
func transformable(before, after map[string]any) (replicas any, images []string, only bool) {
	rest := func(obj map[string]any) map[string]any {
		c, _ := deepCopy(obj).(map[string]any)
		if spec, ok := c["spec"].(map[string]any); ok {
			delete(spec, "replicas")
			forContainers(c, func(ctr map[string]any) { delete(ctr, "image") })
		}
		return c
	}
	if !reflect.DeepEqual(rest(before), rest(after)) {
		return nil, nil, false
	}
	if a, b := at(after, "spec", "replicas"), at(before, "spec", "replicas"); !reflect.DeepEqual(a, b) {
		replicas = a
	}
	oldImages, newImages := containerImages(before), containerImages(after)
	changed := false
	for i := range newImages {
		if i < len(oldImages) && oldImages[i] != newImages[i] {
			images = append(images, newImages[i])
			changed = true
		} else {
			images = append(images, "")
		}
	}
	if !changed {
		images = nil
	}
	return replicas, images, true
}

func containerImages(obj map[string]any) []string {
	var out []string
	forContainers(obj, func(c map[string]any) {
		s, _ := c["image"].(string)
		out = append(out, s)
	})
	return out
}

// forContainers calls f for each container of a workload's Pod template
// (or a Pod's), containers first, then initContainers.
func forContainers(obj map[string]any, f func(map[string]any)) {
	pod, _ := at(obj, "spec", "template", "spec").(map[string]any)
	if pod == nil {
		pod, _ = at(obj, "spec").(map[string]any)
	}
	for _, field := range []string{"containers", "initContainers"} {
		list, _ := pod[field].([]any)
		for _, c := range list {
			if m, ok := c.(map[string]any); ok {
				f(m)
			}
		}
	}
}

func at(obj map[string]any, path ...string) any {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func stringAt(obj map[string]any, path ...string) string {
	s, _ := at(obj, path...).(string)
	return s
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = deepCopy(e)
		}
		return l
	default:
		return v
	}
}

// splitImage splits "name:tag" (or "name@digest") into name and the rest.
func splitImage(image string) (name, tag string) {
	if i := strings.Index(image, "@"); i >= 0 {
		return image[:i], image[i+1:]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

// findEntry finds the entry of a kustomization's list field (images,
// replicas) whose name is name.
func findEntry(k *kyaml.RNode, field, name string) *kyaml.RNode {
	list := k.Field(field)
	if list == nil {
		return nil
	}
	for _, e := range list.Value.Content() {
		n := kyaml.NewRNode(e)
		if f := n.Field("name"); f != nil && f.Value.YNode().Value == name {
			return n
		}
	}
	return nil
}

// appendEntry adds an entry to a kustomization's list field, its fields in
// the order given (name first, as people write them).
func appendEntry(k *kyaml.RNode, field string, kv ...any) error {
	list, err := k.Pipe(kyaml.LookupCreate(kyaml.SequenceNode, field))
	if err != nil {
		return err
	}
	entry := kyaml.NewMapRNode(nil)
	for i := 0; i+1 < len(kv); i += 2 {
		v, err := nodeOf(kv[i+1])
		if err != nil {
			return err
		}
		if err := entry.PipeE(kyaml.SetField(kv[i].(string), v)); err != nil {
			return err
		}
	}
	return list.PipeE(kyaml.Append(entry.YNode()))
}

// setImage points an images: entry at name:tag, as newName only when the
// name changed and newTag (a digest goes in digest).
func setImage(entry *kyaml.RNode, key, name, tag string) error {
	if name != key {
		if err := entry.PipeE(kyaml.SetField("newName", kyaml.NewScalarRNode(name))); err != nil {
			return err
		}
	}
	field := "newTag"
	if strings.HasPrefix(tag, "sha256:") {
		field = "digest"
	}
	return entry.PipeE(kyaml.SetField(field, kyaml.NewStringRNode(tag)))
}

// sourceDocument decodes the document an object comes from.
func sourceDocument(files Files, o Object, id ID) (map[string]any, error) {
	loc, err := documentOf(files, o, id)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := kyaml.Unmarshal([]byte(splitDocuments(files[loc.File])[loc.Index]), &doc); err != nil {
		return nil, err
	}
	return doc, nil
}
