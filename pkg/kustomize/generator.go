package kustomize

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/api/types"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// writeGeneratorData carries a generated ConfigMap's data change into the
// inputs of its generator entry, key by key: a literal is rewritten where
// it stands, an env file's line where it stands, a file's content in the
// file; a new key becomes a literal of the entry; a removed key leaves its
// literal or its line.
func writeGeneratorData(files Files, kfile string, args types.GeneratorArgs, src Source, old, now map[string]string, id ID) ([]Edit, error) {
	k, entry, err := parseGenerator(files, kfile, src)
	if err != nil {
		return nil, err
	}
	edited := map[string][]byte{} // files other than the kustomization
	dir := path.Dir(kfile)
	for _, key := range changedKeys(old, now) {
		value, keep := now[key]
		where, file := inputOf(files, dir, args, key)
		if who := sharedWith(files, file); file != "" && who != "" {
			return nil, refuse(id, "key %s comes from %s, which %s also reads as values: edit it in Git", key, file, who)
		}
		switch where {
		case "literal":
			if err := setLiteral(entry, key, value, keep); err != nil {
				return nil, err
			}
		case "env":
			content, ok := edited[file]
			if !ok {
				content = files[file]
			}
			edited[file] = setEnvLine(content, key, value, keep)
		case "file":
			if !keep {
				return nil, refuse(id, "key %s is the file %s: removing it from the generator is not written", key, file)
			}
			edited[file] = []byte(value)
		default:
			if !keep {
				continue
			}
			if err := setLiteral(entry, key, value, true); err != nil {
				return nil, err
			}
		}
	}
	var edits []Edit
	if out := formatAs(k, files[kfile]); string(out) != string(files[kfile]) {
		edits = append(edits, Edit{File: kfile, Content: out})
	}
	for _, f := range sortedPaths(edited) {
		if string(edited[f]) != string(files[f]) {
			edits = append(edits, Edit{File: f, Content: edited[f]})
		}
	}
	return edits, nil
}

// changedKeys are the keys whose value changed, appeared or went, sorted.
func changedKeys(old, now map[string]string) []string {
	var keys []string
	for k, v := range now {
		if o, ok := old[k]; !ok || o != v {
			keys = append(keys, k)
		}
	}
	for k := range old {
		if _, ok := now[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// inputOf says which input of the entry gives key: "literal", "env" (with
// the env file) or "file" (with the file), or "" for none.
func inputOf(files Files, dir string, args types.GeneratorArgs, key string) (where, file string) {
	for _, l := range args.LiteralSources {
		if k, _, _ := strings.Cut(l, "="); k == key {
			return "literal", ""
		}
	}
	for _, e := range args.EnvSources {
		f := join(dir, e)
		for _, line := range strings.Split(string(files[f]), "\n") {
			if k, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == key {
				return "env", f
			}
		}
	}
	for _, s := range args.FileSources {
		k, p, named := strings.Cut(s, "=")
		if !named {
			k, p = path.Base(s), s
		}
		if k == key {
			return "file", join(dir, p)
		}
	}
	return "", ""
}

// parseGenerator parses a kustomization and finds src's entry in it.
func parseGenerator(files Files, kfile string, src Source) (k, entry *kyaml.RNode, err error) {
	if k, err = kyaml.Parse(string(files[kfile])); err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", kfile, err)
	}
	entry, err = generatorNode(k, src)
	return k, entry, err
}

// generatorNode finds the configMapGenerator entry of src in a parsed
// kustomization, by name and namespace.
func generatorNode(k *kyaml.RNode, src Source) (*kyaml.RNode, error) {
	list := k.Field("configMapGenerator")
	if list == nil {
		return nil, fmt.Errorf("%s has no configMapGenerator", src.File)
	}
	top := ""
	if n := k.Field("namespace"); n != nil {
		top = n.Value.YNode().Value
	}
	for _, e := range list.Value.Content() {
		n := kyaml.NewRNode(e)
		ns := top
		if f := n.Field("namespace"); f != nil {
			ns = f.Value.YNode().Value
		}
		if f := n.Field("name"); f != nil && f.Value.YNode().Value == src.Generator && ns == src.GeneratorNamespace {
			return n, nil
		}
	}
	return nil, fmt.Errorf("%s: no configMapGenerator entry %s in namespace %q", src.File, src.Generator, src.GeneratorNamespace)
}

// setLiteral sets, adds (keep) or removes key's literal of an entry.
func setLiteral(entry *kyaml.RNode, key, value string, keep bool) error {
	list, err := entry.Pipe(kyaml.LookupCreate(kyaml.SequenceNode, "literals"))
	if err != nil {
		return err
	}
	content := list.YNode().Content
	for i, n := range content {
		if k, _, _ := strings.Cut(n.Value, "="); k == key {
			if !keep {
				list.YNode().Content = slices.Delete(content, i, i+1)
				return nil
			}
			n.Value = key + "=" + value
			return nil
		}
	}
	if keep {
		return list.PipeE(kyaml.Append(kyaml.NewScalarRNode(key + "=" + value).YNode()))
	}
	return nil
}

// setEnvLine sets, adds (keep) or removes key's line of an env file,
// leaving its other lines and comments as they are.
func setEnvLine(content []byte, key, value string, keep bool) []byte {
	lines := strings.Split(string(content), "\n")
	for i, line := range lines {
		if k, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == key {
			if keep {
				lines[i] = key + "=" + value
			} else {
				lines = slices.Delete(lines, i, i+1)
			}
			return []byte(strings.Join(lines, "\n"))
		}
	}
	if keep {
		text := strings.TrimSuffix(string(content), "\n")
		if text != "" {
			text += "\n"
		}
		return []byte(text + key + "=" + value + "\n")
	}
	return content
}

// removeGenerator removes a deleted ConfigMap's generator entry. Its input
// files stay: another entry, or a HelmRelease, may read them.
func removeGenerator(files Files, kfile string, src Source) ([]Edit, error) {
	k, entry, err := parseGenerator(files, kfile, src)
	if err != nil {
		return nil, err
	}
	list := k.Field("configMapGenerator").Value
	list.YNode().Content = slices.DeleteFunc(list.YNode().Content, func(n *kyaml.Node) bool { return n == entry.YNode() })
	if len(list.YNode().Content) == 0 {
		if _, err := k.Pipe(kyaml.Clear("configMapGenerator")); err != nil {
			return nil, err
		}
	}
	return []Edit{{File: kfile, Content: formatAs(k, files[kfile])}}, nil
}
