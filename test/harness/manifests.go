package harness

import (
	"fmt"
	"strings"

	"reverser.dev/reverser/test/controlplane"
)

// Docs joins YAML documents (or streams of them) into one stream for
// kubectl apply -f -.
func Docs(docs ...string) string {
	var b strings.Builder
	for _, d := range docs {
		d = strings.TrimPrefix(d, "---\n")
		if d == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("---\n")
		}
		b.WriteString(lines(d))
	}
	return b.String()
}

// lines ends s with exactly one newline ("" stays empty).
func lines(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return s + "\n"
}

// Namespace is a Namespace.
func Namespace(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n", name)
}

// AuditedKubeProvider is an inCluster KubeProvider whose audit route
// authenticates with the local plane's webhook token (Secret
// reverser-system/audit-local): the audited cluster of the suites.
func AuditedKubeProvider(name string) string {
	return KubeProvider(name, `  audit:
    enabled: true
    bearerTokenSecretRef: {namespace: reverser-system, name: audit-local, key: token}`)
}

// KubeProvider is an inCluster KubeProvider; spec lines (indented by two)
// are added to its spec.
func KubeProvider(name, spec string) string {
	return fmt.Sprintf("apiVersion: reverser.dev/v1alpha1\nkind: KubeProvider\nmetadata: {name: %s}\nspec:\n  inCluster: true\n%s", name, lines(spec))
}

// GitProvider is a GitProvider pushing to url; spec lines (indented by two)
// are added to its spec.
func GitProvider(ns, name, url, spec string) string {
	return fmt.Sprintf("apiVersion: reverser.dev/v1alpha1\nkind: GitProvider\nmetadata: {name: %s, namespace: %s}\nspec:\n  url: %q\n%s",
		name, ns, url, lines(spec))
}

// Target is a GitTarget on branch main, named "site" with a GitProvider
// "repo" unless said otherwise.
type Target struct {
	Namespace, Name           string
	KubeProvider, GitProvider string
	Path, Silence, MaxAge     string
	// Spec lines (indented by two) are added to its spec.
	Spec string
}

// GitTarget is the YAML of t; without Silence and MaxAge its window is the
// default.
func GitTarget(t Target) string {
	name, gp, spec := or(t.Name, "site"), or(t.GitProvider, "repo"), lines(t.Spec)
	if t.Silence != "" || t.MaxAge != "" {
		spec = fmt.Sprintf("  commit: {window: {silence: %s, maxAge: %s}}\n", or(t.Silence, "10s"), or(t.MaxAge, "10m")) + spec
	}
	return fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: GitTarget
metadata: {name: %s, namespace: %s}
spec:
  kubeProviderRef: {name: %s}
  gitProviderRef: {name: %s}
  branch: main
  path: %s
%s`, name, t.Namespace, t.KubeProvider, gp, t.Path, spec)
}

// WatchRule is a WatchRule of the GitTarget target; spec lines (indented by
// two, e.g. "  rules:\n  - ...") follow its gitTargetRef.
func WatchRule(ns, name, target, spec string) string {
	return fmt.Sprintf("apiVersion: reverser.dev/v1alpha1\nkind: WatchRule\nmetadata: {name: %s, namespace: %s}\nspec:\n  gitTargetRef: {name: %s}\n%s",
		name, ns, target, lines(spec))
}

// ConfigMapRule is an item of a WatchRule's rules selecting ConfigMaps;
// ConfigMapRules a WatchRule spec with it alone.
const (
	ConfigMapRule  = "  - apiGroups: [\"\"]\n    resources: [configmaps]"
	ConfigMapRules = "  rules:\n" + ConfigMapRule
)

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// UserRole is a Role named name in ns with rules (YAML list items, e.g.
// "- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get]") and a
// RoleBinding of the same name granting it to user.
func UserRole(ns, name, user, rules string) string {
	return Docs(fmt.Sprintf("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: %s, namespace: %s}\nrules:\n%s", name, ns, lines(rules)),
		controlplane.Binding(name, ns, "Role", name, "User", user))
}

// FluxSync is a Flux GitRepository on url's branch main and a Kustomization
// of the same name applying its folder path into targetNamespace (none:
// the manifests' own), both at interval; spec lines (indented by two) are
// added to the Kustomization's spec.
func FluxSync(ns, name, url, path, targetNamespace, interval, spec string) string {
	target := ""
	if targetNamespace != "" {
		target = "  targetNamespace: " + targetNamespace + "\n"
	}
	return fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  url: %[3]q
  ref: {branch: main}
  interval: %[6]s
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  sourceRef: {kind: GitRepository, name: %[1]s}
  path: %[4]s
%[5]s  prune: true
  interval: %[6]s
%[7]s`, name, ns, url, path, target, interval, lines(spec))
}

// FluxClaim is a FluxClaim through KubeProvider kubeProvider of the
// Kustomization ksNamespace/ks; spec lines (indented by two) are added.
func FluxClaim(ns, name, kubeProvider, ksNamespace, ks, spec string) string {
	return claim("FluxClaim", "kustomizationRef", ns, name, kubeProvider, ksNamespace, ks, spec)
}

// ArgoCDClaim is an ArgoCDClaim through KubeProvider kubeProvider of the
// Application appNamespace/app; spec lines (indented by two) are added.
func ArgoCDClaim(ns, name, kubeProvider, appNamespace, app, spec string) string {
	return claim("ArgoCDClaim", "applicationRef", ns, name, kubeProvider, appNamespace, app, spec)
}

func claim(kind, ref, ns, name, kubeProvider, appliedNamespace, applied, spec string) string {
	return fmt.Sprintf(`apiVersion: reverser.dev/v1alpha1
kind: %s
metadata: {name: %s, namespace: %s}
spec:
  kubeProviderRef: {name: %s}
  %s: {namespace: %s, name: %s}
%s`, kind, name, ns, kubeProvider, ref, appliedNamespace, applied, lines(spec))
}
