// Package validation checks reverser.dev objects before they are stored. Every
// error names the field it is about, so `kubectl` shows users what to fix.
package validation

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
)

// MaxMessageLength is the longest CommitRequest message, in characters.
const MaxMessageLength = 1024

// ValidateGitProviderSpec checks a GitProvider's spec.
func ValidateGitProviderSpec(spec *reverser.GitProviderSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateGitURL(spec.URL, fld.Child("url"))...)
	if spec.SecretRef != nil {
		errs = append(errs, validateName(spec.SecretRef.Name, fld.Child("secretRef", "name"))...)
	}
	errs = append(errs, validateIdentityPart(spec.Committer.Name, fld.Child("committer", "name"))...)
	errs = append(errs, validateIdentityPart(spec.Committer.Email, fld.Child("committer", "email"))...)
	if spec.Committer.Email != "" && !strings.Contains(spec.Committer.Email, "@") {
		errs = append(errs, field.Invalid(fld.Child("committer", "email"), spec.Committer.Email, "must be an email address"))
	}
	for i, b := range spec.AllowedBranches {
		p := fld.Child("allowedBranches").Index(i)
		if b == "*" {
			continue
		}
		if _, err := path.Match(b, ""); err != nil {
			errs = append(errs, field.Invalid(p, b, "must be a branch name or a glob pattern: "+err.Error()))
			continue
		}
		// Glob characters are allowed here; the rest must make a valid ref.
		if msg := branchNameProblem(strings.NewReplacer("*", "x", "?", "x", "[", "x", "]", "x").Replace(b)); msg != "" {
			errs = append(errs, field.Invalid(p, b, msg))
		}
	}
	if spec.Signing != nil {
		errs = append(errs, validateSecretKeyRef(&spec.Signing.SSHKeySecretRef, false, fld.Child("signing", "sshKeySecretRef"))...)
	}
	if d := spec.AuthorEmailDomain; d != "" {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(d) {
			errs = append(errs, field.Invalid(fld.Child("authorEmailDomain"), d, msg))
		}
	}
	return errs
}

// scpLikeURL matches the scp form of an SSH remote, user@host:path.
var scpLikeURL = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$`)

func validateGitURL(raw string, fld *field.Path) field.ErrorList {
	if raw == "" {
		return field.ErrorList{field.Required(fld, "the repository URL, e.g. https://git.example.com/org/repo.git")}
	}
	if scpLikeURL.MatchString(raw) {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Invalid(fld, raw, "must be a URL: "+err.Error())}
	}
	switch u.Scheme {
	case "https", "http", "ssh":
	default:
		return field.ErrorList{field.Invalid(fld, raw, "scheme must be https, http or ssh (or use user@host:path)")}
	}
	if u.Host == "" {
		return field.ErrorList{field.Invalid(fld, raw, "must name a host")}
	}
	if u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword {
			return field.ErrorList{field.Invalid(fld, "<redacted>", "must not embed a password: put credentials in the Secret named by secretRef")}
		}
	}
	return nil
}

// validateIdentityPart rejects what would corrupt a Git author or committer line.
func validateIdentityPart(v string, fld *field.Path) field.ErrorList {
	if strings.ContainsAny(v, "<>\n\r\x00") {
		return field.ErrorList{field.Invalid(fld, v, "must not contain '<', '>' or line breaks")}
	}
	return nil
}

// ValidateKubeProviderSpec checks a KubeProvider's spec.
func ValidateKubeProviderSpec(spec *reverser.KubeProviderSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case spec.InCluster && spec.KubeConfigSecretRef != nil:
		errs = append(errs, field.Invalid(fld.Child("inCluster"), true, "set exactly one of inCluster and kubeConfigSecretRef"))
	case !spec.InCluster && spec.KubeConfigSecretRef == nil:
		errs = append(errs, field.Required(fld.Child("kubeConfigSecretRef"), "set exactly one of inCluster: true and kubeConfigSecretRef"))
	case spec.KubeConfigSecretRef != nil:
		errs = append(errs, validateSecretKeyRef(spec.KubeConfigSecretRef, true, fld.Child("kubeConfigSecretRef"))...)
	}
	if sel := spec.ConsumerNamespaces; sel != nil {
		if sel.From == reverser.NamespacesFromSame {
			errs = append(errs, field.NotSupported(fld.Child("consumerNamespaces", "from"), sel.From,
				[]string{string(reverser.NamespacesFromAll), string(reverser.NamespacesFromNames), string(reverser.NamespacesFromSelector)}))
		} else {
			errs = append(errs, validateNamespaceSelection(sel, fld.Child("consumerNamespaces"))...)
		}
	}
	errs = append(errs, validateSourceNamespaces(spec.SourceNamespaces, fld.Child("sourceNamespaces"))...)
	switch spec.CommitRequests {
	case reverser.CommitRequestsIgnore:
	case reverser.CommitRequestsReconcile, reverser.CommitRequestsReconcileAndDeleteFinished:
		if spec.InCluster {
			errs = append(errs, field.Invalid(fld.Child("commitRequests"), spec.CommitRequests,
				"only Ignore is allowed with inCluster: CommitRequests on this cluster are served by the reverser.dev API"))
		}
	default:
		errs = append(errs, field.NotSupported(fld.Child("commitRequests"), spec.CommitRequests,
			[]string{string(reverser.CommitRequestsIgnore), string(reverser.CommitRequestsReconcile), string(reverser.CommitRequestsReconcileAndDeleteFinished)}))
	}
	a := fld.Child("audit")
	if spec.Audit.BearerTokenSecretRef != nil {
		errs = append(errs, validateSecretKeyRef(spec.Audit.BearerTokenSecretRef, true, a.Child("bearerTokenSecretRef"))...)
	}
	if spec.Audit.Enabled && spec.Audit.BearerTokenSecretRef == nil && len(spec.Audit.ClientCertificateCommonNames) == 0 {
		errs = append(errs, field.Required(a.Child("bearerTokenSecretRef"),
			"an enabled audit route must authenticate its sender: set bearerTokenSecretRef or clientCertificateCommonNames"))
	}
	for i, cn := range spec.Audit.ClientCertificateCommonNames {
		if strings.TrimSpace(cn) == "" {
			errs = append(errs, field.Invalid(a.Child("clientCertificateCommonNames").Index(i), cn, "must not be empty"))
		}
	}
	return errs
}

func validateSourceNamespaces(names []string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, ns := range names {
		if ns == "*" {
			if len(names) > 1 {
				errs = append(errs, field.Invalid(fld.Index(i), ns, `"*" must stand alone`))
			}
			continue
		}
		errs = append(errs, validateNamespaceName(ns, fld.Index(i))...)
	}
	return errs
}

func validateNamespaceSelection(sel *reverser.NamespaceSelection, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch sel.From {
	case reverser.NamespacesFromSame, reverser.NamespacesFromAll:
		if len(sel.Names) > 0 {
			errs = append(errs, field.Forbidden(fld.Child("names"), "only allowed with from: Names"))
		}
		if sel.Selector != nil {
			errs = append(errs, field.Forbidden(fld.Child("selector"), "only allowed with from: Selector"))
		}
	case reverser.NamespacesFromNames:
		if len(sel.Names) == 0 {
			errs = append(errs, field.Required(fld.Child("names"), "from: Names needs at least one namespace"))
		}
		for i, n := range sel.Names {
			errs = append(errs, validateNamespaceName(n, fld.Child("names").Index(i))...)
		}
		if sel.Selector != nil {
			errs = append(errs, field.Forbidden(fld.Child("selector"), "only allowed with from: Selector"))
		}
	case reverser.NamespacesFromSelector:
		if sel.Selector == nil {
			errs = append(errs, field.Required(fld.Child("selector"), "from: Selector needs a label selector"))
		} else {
			errs = append(errs, metav1validation.ValidateLabelSelector(sel.Selector, metav1validation.LabelSelectorValidationOptions{}, fld.Child("selector"))...)
		}
		if len(sel.Names) > 0 {
			errs = append(errs, field.Forbidden(fld.Child("names"), "only allowed with from: Names"))
		}
	default:
		errs = append(errs, field.NotSupported(fld.Child("from"), sel.From, []string{
			string(reverser.NamespacesFromSame), string(reverser.NamespacesFromNames),
			string(reverser.NamespacesFromSelector), string(reverser.NamespacesFromAll)}))
	}
	return errs
}

// ValidateGitTargetSpec checks a GitTarget's spec.
func ValidateGitTargetSpec(spec *reverser.GitTargetSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateName(spec.KubeProviderRef.Name, fld.Child("kubeProviderRef", "name"))...)
	errs = append(errs, validateName(spec.GitProviderRef.Name, fld.Child("gitProviderRef", "name"))...)
	if spec.Branch == "" {
		errs = append(errs, field.Required(fld.Child("branch"), "the branch to write, e.g. main"))
	} else if msg := branchNameProblem(spec.Branch); msg != "" {
		errs = append(errs, field.Invalid(fld.Child("branch"), spec.Branch, msg))
	}
	errs = append(errs, ValidateRepoPath(spec.Path, fld.Child("path"))...)
	w := fld.Child("commit", "window")
	errs = append(errs, validateDuration(spec.Commit.Window.Silence, false, w.Child("silence"))...)
	errs = append(errs, validateDuration(spec.Commit.Window.MaxAge, true, w.Child("maxAge"))...)
	switch spec.Prune {
	case reverser.PruneAlways, reverser.PruneOnEvent:
	default:
		errs = append(errs, field.NotSupported(fld.Child("prune"), spec.Prune, []string{string(reverser.PruneAlways), string(reverser.PruneOnEvent)}))
	}
	for i := range spec.AllowedCommitRequests {
		errs = append(errs, validateGrant(&spec.AllowedCommitRequests[i], fld.Child("allowedCommitRequests").Index(i))...)
	}
	if ref := spec.ApplierRef; ref != nil {
		switch ref.Kind {
		case reverser.ApplierKindFluxClaim, reverser.ApplierKindArgoCDClaim:
		default:
			errs = append(errs, field.NotSupported(fld.Child("applierRef", "kind"), ref.Kind, []string{string(reverser.ApplierKindFluxClaim), string(reverser.ApplierKindArgoCDClaim)}))
		}
		errs = append(errs, validateName(ref.Name, fld.Child("applierRef", "name"))...)
	}
	if enc := spec.Encryption; enc != nil {
		rf := fld.Child("encryption", "sops", "ageRecipients")
		if len(enc.SOPS.AgeRecipients) == 0 {
			errs = append(errs, field.Required(rf, "at least one age recipient (age1...)"))
		}
		for i, r := range enc.SOPS.AgeRecipients {
			if !strings.HasPrefix(r, "age1") || strings.ContainsFunc(r, unicode.IsSpace) {
				errs = append(errs, field.Invalid(rf.Index(i), r, "must be an age public key starting with age1"))
			}
		}
	}
	return errs
}

func validateGrant(g *reverser.CommitRequestGrant, fld *field.Path) field.ErrorList {
	hasConsumers, hasSources := g.ConsumerNamespaces != nil, len(g.SourceNamespaces) > 0
	switch {
	case hasConsumers && hasSources:
		return field.ErrorList{field.Invalid(fld, "consumerNamespaces and sourceNamespaces", "set exactly one of consumerNamespaces and sourceNamespaces")}
	case !hasConsumers && !hasSources:
		return field.ErrorList{field.Required(fld, "set exactly one of consumerNamespaces and sourceNamespaces")}
	case hasConsumers:
		return validateNamespaceSelection(g.ConsumerNamespaces, fld.Child("consumerNamespaces"))
	default:
		return validateSourceNamespaces(g.SourceNamespaces, fld.Child("sourceNamespaces"))
	}
}

// ValidateGitTargetUpdate checks the fields that cannot change.
func ValidateGitTargetUpdate(spec, old *reverser.GitTargetSpec, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, apivalidation.ValidateImmutableField(spec.Branch, old.Branch, fld.Child("branch"))...)
	errs = append(errs, apivalidation.ValidateImmutableField(spec.Path, old.Path, fld.Child("path"))...)
	errs = append(errs, apivalidation.ValidateImmutableField(spec.KubeProviderRef, old.KubeProviderRef, fld.Child("kubeProviderRef"))...)
	errs = append(errs, apivalidation.ValidateImmutableField(spec.GitProviderRef, old.GitProviderRef, fld.Child("gitProviderRef"))...)
	return errs
}

// ValidateRepoPath accepts a folder relative to the repository root, without
// "..", absolute or Windows-style forms, so a GitTarget never writes outside it.
func ValidateRepoPath(p string, fld *field.Path) field.ErrorList {
	if p == "" {
		return nil
	}
	switch {
	case strings.HasPrefix(p, "/"):
		return field.ErrorList{field.Invalid(fld, p, "must be relative to the repository root (no leading '/')")}
	case strings.Contains(p, `\`):
		return field.ErrorList{field.Invalid(fld, p, "must use '/' as separator")}
	case strings.ContainsFunc(p, unicode.IsControl):
		return field.ErrorList{field.Invalid(fld, p, "must not contain control characters")}
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		switch seg {
		case "..":
			return field.ErrorList{field.Invalid(fld, p, "must not contain '..'")}
		case ".git":
			return field.ErrorList{field.Invalid(fld, p, "must not enter the .git folder")}
		case "":
			return field.ErrorList{field.Invalid(fld, p, "must not contain empty segments ('//')")}
		}
	}
	return nil
}

// branchNameProblem applies git check-ref-format's rules to refs/heads/<name>.
func branchNameProblem(b string) string {
	switch {
	case strings.HasPrefix(b, "-"):
		return "must not start with '-'"
	case strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/"):
		return "must not start or end with '/'"
	case strings.HasSuffix(b, ".") || strings.HasSuffix(b, ".lock"):
		return "must not end with '.' or '.lock'"
	case strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{") || b == "@":
		return "must not contain '..', '//' or '@{'"
	case strings.ContainsAny(b, " ~^:?*[\\\x7f") || strings.ContainsFunc(b, unicode.IsControl):
		return "must be a valid Git branch name (no spaces, '~', '^', ':', '?', '*', '[', '\\' or control characters)"
	}
	for _, seg := range strings.Split(b, "/") {
		if strings.HasPrefix(seg, ".") {
			return "no path component may start with '.'"
		}
	}
	return ""
}

// ValidateResourceRules checks the rules of a WatchRule or ClusterWatchRule.
func ValidateResourceRules(rules []reverser.ResourceRule, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(rules) == 0 {
		return field.ErrorList{field.Required(fld, "at least one rule, e.g. {apiGroups: [\"\"], resources: [\"configmaps\"]}")}
	}
	for i, r := range rules {
		rf := fld.Index(i)
		if len(r.APIGroups) == 0 {
			errs = append(errs, field.Required(rf.Child("apiGroups"), `list the groups: "" for the core group, "*" for all`))
		}
		for j, g := range r.APIGroups {
			if g == "" || g == "*" {
				continue
			}
			for _, msg := range utilvalidation.IsDNS1123Subdomain(g) {
				errs = append(errs, field.Invalid(rf.Child("apiGroups").Index(j), g, msg))
			}
		}
		for j, v := range r.APIVersions {
			if v == "*" {
				continue
			}
			for _, msg := range utilvalidation.IsDNS1035Label(v) {
				errs = append(errs, field.Invalid(rf.Child("apiVersions").Index(j), v, msg))
			}
		}
		if len(r.Resources) == 0 {
			errs = append(errs, field.Required(rf.Child("resources"), `list the resources, e.g. "configmaps", or "*" for all`))
		}
		for j, res := range r.Resources {
			if res == "*" {
				continue
			}
			if strings.Contains(res, "/") {
				errs = append(errs, field.Invalid(rf.Child("resources").Index(j), res, "subresources cannot be mirrored"))
				continue
			}
			for _, msg := range utilvalidation.IsDNS1123Subdomain(res) {
				errs = append(errs, field.Invalid(rf.Child("resources").Index(j), res, msg))
			}
		}
	}
	return errs
}

// ValidateWatchRuleSpec checks a WatchRule's spec.
func ValidateWatchRuleSpec(spec *reverser.WatchRuleSpec, fld *field.Path) field.ErrorList {
	errs := validateName(spec.GitTargetRef.Name, fld.Child("gitTargetRef", "name"))
	if spec.SourceNamespace != "" {
		errs = append(errs, validateNamespaceName(spec.SourceNamespace, fld.Child("sourceNamespace"))...)
	}
	return append(errs, ValidateResourceRules(spec.Rules, fld.Child("rules"))...)
}

// ValidateClusterWatchRuleSpec checks a ClusterWatchRule's spec.
func ValidateClusterWatchRuleSpec(spec *reverser.ClusterWatchRuleSpec, fld *field.Path) field.ErrorList {
	errs := validateObjectRef(&spec.GitTargetRef, true, fld.Child("gitTargetRef"))
	return append(errs, ValidateResourceRules(spec.Rules, fld.Child("rules"))...)
}

// ValidateCommitRequestSpec checks a CommitRequest's spec.
func ValidateCommitRequestSpec(spec *reverser.CommitRequestSpec, fld *field.Path) field.ErrorList {
	errs := validateObjectRef(&spec.GitTargetRef, false, fld.Child("gitTargetRef"))
	errs = append(errs, ValidateMessage(spec.Message, fld.Child("message"))...)
	switch spec.Attach {
	case reverser.AttachCurrent, reverser.AttachNext:
	default:
		errs = append(errs, field.NotSupported(fld.Child("attach"), spec.Attach, []string{string(reverser.AttachCurrent), string(reverser.AttachNext)}))
	}
	switch spec.WhenNothingToCommit {
	case reverser.NothingToCommitSkip, reverser.NothingToCommitCommitEmpty:
	default:
		errs = append(errs, field.NotSupported(fld.Child("whenNothingToCommit"), spec.WhenNothingToCommit,
			[]string{string(reverser.NothingToCommitSkip), string(reverser.NothingToCommitCommitEmpty)}))
	}
	switch spec.CatchUp {
	case reverser.CatchUpAsDefinedOnClaim, reverser.CatchUpAfterPush:
	default:
		errs = append(errs, field.NotSupported(fld.Child("catchUp"), spec.CatchUp,
			[]string{string(reverser.CatchUpAsDefinedOnClaim), string(reverser.CatchUpAfterPush)}))
	}
	return append(errs, validateDuration(spec.Window.AttachTimeout, false, fld.Child("window", "attachTimeout"))...)
}

// ValidateMessage accepts 1 to MaxMessageLength characters of text; line
// breaks and tabs are the only control characters allowed.
func ValidateMessage(msg string, fld *field.Path) field.ErrorList {
	switch n := utf8.RuneCountInString(msg); {
	case strings.TrimSpace(msg) == "":
		return field.ErrorList{field.Required(fld, "a commit message of 1 to 1024 characters")}
	case !utf8.ValidString(msg):
		return field.ErrorList{field.Invalid(fld, msg, "must be valid UTF-8")}
	case n > MaxMessageLength:
		return field.ErrorList{field.TooLong(fld, "", MaxMessageLength)}
	}
	for i, r := range msg {
		if unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			return field.ErrorList{field.Invalid(fld, msg, fmt.Sprintf("must not contain control character %U (at byte %d)", r, i))}
		}
	}
	return nil
}

// ValidateCommitRequestUpdate refuses any change of the spec.
func ValidateCommitRequestUpdate(spec, old *reverser.CommitRequestSpec, fld *field.Path) field.ErrorList {
	if apiequality.Semantic.DeepEqual(spec, old) {
		return nil
	}
	return field.ErrorList{field.Forbidden(fld, "the spec of a CommitRequest is immutable: create a new CommitRequest instead")}
}

// ValidateFluxClaimSpec checks a FluxClaim's spec.
func ValidateFluxClaimSpec(spec *reverser.FluxClaimSpec, fld *field.Path) field.ErrorList {
	errs := validateName(spec.KubeProviderRef.Name, fld.Child("kubeProviderRef", "name"))
	errs = append(errs, validateObjectRef(&spec.KustomizationRef, true, fld.Child("kustomizationRef"))...)
	return append(errs, validateDuration(spec.CatchUpAfter, false, fld.Child("catchUpAfter"))...)
}

// ValidateArgoCDClaimSpec checks an ArgoCDClaim's spec.
func ValidateArgoCDClaimSpec(spec *reverser.ArgoCDClaimSpec, fld *field.Path) field.ErrorList {
	errs := validateName(spec.KubeProviderRef.Name, fld.Child("kubeProviderRef", "name"))
	errs = append(errs, validateObjectRef(&spec.ApplicationRef, true, fld.Child("applicationRef"))...)
	return append(errs, validateDuration(spec.CatchUpAfter, false, fld.Child("catchUpAfter"))...)
}

func validateObjectRef(ref *reverser.ObjectReference, namespaceRequired bool, fld *field.Path) field.ErrorList {
	errs := validateName(ref.Name, fld.Child("name"))
	switch {
	case ref.Namespace != "":
		errs = append(errs, validateNamespaceName(ref.Namespace, fld.Child("namespace"))...)
	case namespaceRequired:
		errs = append(errs, field.Required(fld.Child("namespace"), "the namespace of the referent"))
	}
	return errs
}

func validateSecretKeyRef(ref *reverser.SecretKeyReference, namespaceRequired bool, fld *field.Path) field.ErrorList {
	errs := validateObjectRef(&reverser.ObjectReference{Namespace: ref.Namespace, Name: ref.Name}, namespaceRequired, fld)
	if ref.Key == "" {
		errs = append(errs, field.Required(fld.Child("key"), "the key within the Secret's data"))
	} else {
		for _, msg := range utilvalidation.IsConfigMapKey(ref.Key) {
			errs = append(errs, field.Invalid(fld.Child("key"), ref.Key, msg))
		}
	}
	return errs
}

func validateName(name string, fld *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fld, "")}
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(fld, name, msg))
	}
	return errs
}

func validateNamespaceName(ns string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
		errs = append(errs, field.Invalid(fld, ns, msg))
	}
	return errs
}

// validateDuration checks a defaulted duration; nil never reaches here after
// defaulting, but is tolerated for objects built in Go.
func validateDuration(d *metav1.Duration, positive bool, fld *field.Path) field.ErrorList {
	if d == nil {
		return nil
	}
	switch {
	case d.Duration < 0:
		return field.ErrorList{field.Invalid(fld, d.Duration.String(), "must not be negative")}
	case positive && d.Duration == 0:
		return field.ErrorList{field.Invalid(fld, d.Duration.String(), "must be greater than zero")}
	}
	return nil
}

// ValidateStatusCommon checks the status fields every kind has.
func ValidateStatusCommon(observedGeneration int64, conds []metav1.Condition, fld *field.Path) field.ErrorList {
	errs := apivalidation.ValidateNonnegativeField(observedGeneration, fld.Child("observedGeneration"))
	return append(errs, metav1validation.ValidateConditions(conds, fld.Child("conditions"))...)
}
