// Package validation checks reverser.dev objects before they are stored. Every
// error names the field it is about, so `kubectl` shows users what to fix.
package validation

import (
	"filippo.io/age"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/redact"
)

// MaxMessageLength is the longest CommitRequest message, in characters.
const MaxMessageLength = 1024

// MaxPathLength is the longest GitTarget spec.path, in bytes.
const MaxPathLength = 253

// MaxAttachTimeout is the longest CommitRequest spec.window.attachTimeout.
const MaxAttachTimeout = 10 * time.Minute

// ReservedTrailer is the commit trailer by which Reverser records the
// CommitRequest a commit saved; it is the same literal as
// pkg/worker.RequestTrailer ("Reverser-Commit-Request"), which this package
// does not import. A message may not carry it: a forged trailer would make
// the controller take a request as saved by a commit that did not save it.
const ReservedTrailer = "Reverser-Commit-Request"

// ValidateGitProviderSpec checks a GitProvider's spec. namespace is the
// GitProvider's own namespace, the only one its Secrets may be read from.
func ValidateGitProviderSpec(spec *reverser.GitProviderSpec, namespace string, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	scheme, urlErrs := validateGitURL(spec.URL, fld.Child("url"))
	errs = append(errs, urlErrs...)
	if scheme == "http" && spec.SecretRef != nil && !spec.AllowInsecureHTTP {
		errs = append(errs, field.Invalid(fld.Child("url"), redact.URL(spec.URL),
			"with secretRef, credentials would travel in clear over http://: use https://, or set allowInsecureHTTP: true to accept that"))
	}
	if spec.AllowInsecureHTTP && scheme != "" && scheme != "http" {
		errs = append(errs, field.Invalid(fld.Child("allowInsecureHTTP"), true,
			"only meaningful with an http:// URL: remove it, the URL is "+scheme))
	}
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
	if s := spec.Signing; s != nil {
		sf := fld.Child("signing")
		ref, rf := s.SSHKeySecretRef, sf.Child("sshKeySecretRef")
		switch {
		case s.SSHKeySecretRef != nil && s.OpenPGPKeySecretRef != nil:
			errs = append(errs, field.Forbidden(sf.Child("openPGPKeySecretRef"), "set one key: sshKeySecretRef or openPGPKeySecretRef"))
		case s.SSHKeySecretRef == nil && s.OpenPGPKeySecretRef == nil:
			errs = append(errs, field.Required(sf, "a key: sshKeySecretRef (OpenSSH) or openPGPKeySecretRef (armored OpenPGP)"))
		case s.OpenPGPKeySecretRef != nil:
			ref, rf = s.OpenPGPKeySecretRef, sf.Child("openPGPKeySecretRef")
		}
		if ref != nil {
			r := *ref
			if r.Namespace != "" && r.Namespace != namespace {
				errs = append(errs, field.Invalid(rf.Child("namespace"), r.Namespace,
					fmt.Sprintf("must be empty or the GitProvider's own namespace %q: the signing key is read only from there", namespace)))
				r.Namespace = "" // reported once
			}
			errs = append(errs, validateSecretKeyRef(&r, false, rf)...)
		}
	}
	if d := spec.AuthorEmailDomain; d != "" {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(d) {
			errs = append(errs, field.Invalid(fld.Child("authorEmailDomain"), d, msg))
		}
	}
	return errs
}

// scpLikeURL matches the scp form of an SSH remote, user@host:path. The user
// part cannot hold a ':', so no password.
var scpLikeURL = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s]+$`)

// validateGitURL checks a repository URL and returns its scheme (https, http
// or ssh; ssh for the scp form), or "" when it has none of those. No
// credentials may be in it, and no error value shows them.
func validateGitURL(raw string, fld *field.Path) (string, field.ErrorList) {
	if raw == "" {
		return "", field.ErrorList{field.Required(fld, "the repository URL, e.g. https://git.example.com/org/repo.git")}
	}
	if scpLikeURL.MatchString(raw) {
		return "ssh", nil
	}
	shown := redact.URL(raw)
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error quotes the URL, and parts of it: not shown.
		return "", field.ErrorList{field.Invalid(fld, shown,
			"must be a URL such as https://git.example.com/org/repo.git, ssh://git@git.example.com/org/repo.git or git@git.example.com:org/repo.git")}
	}
	switch u.Scheme {
	case "https", "http", "ssh":
	default:
		return "", field.ErrorList{field.Invalid(fld, shown, "scheme must be https, http or ssh (or use user@host:path)")}
	}
	if u.Host == "" {
		return "", field.ErrorList{field.Invalid(fld, shown, "must name a host, e.g. https://git.example.com/org/repo.git")}
	}
	var errs field.ErrorList
	switch u.Scheme {
	case "https", "http":
		if u.User != nil {
			errs = append(errs, field.Invalid(fld, shown,
				"must not contain credentials (user@ or user:password@, a token as user name too): put them in the Secret named by secretRef"))
		}
		if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(raw, "?#") {
			errs = append(errs, field.Invalid(fld, shown,
				"must not have a query or fragment ('?', '#'): give the repository address only, and put credentials in the Secret named by secretRef"))
		}
	case "ssh":
		if _, hasPassword := u.User.Password(); hasPassword {
			errs = append(errs, field.Invalid(fld, shown,
				"must not contain a password: only a user name is allowed (ssh://git@host/path); put the key in the Secret named by secretRef"))
		}
	}
	return u.Scheme, errs
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
	for i := range spec.Lend {
		errs = append(errs, validateLoan(&spec.Lend[i], fld.Child("lend").Index(i))...)
		if spec.InCluster && spec.Lend[i].Secrets {
			errs = append(errs, field.Invalid(fld.Child("lend").Index(i).Child("secrets"), true,
				"only meaningful with kubeConfigSecretRef: on this cluster RBAC decides who reads Secrets"))
		}
	}
	if spec.InCluster && spec.LendSameNamespaces {
		errs = append(errs, field.Invalid(fld.Child("lendSameNamespaces"), true,
			"only meaningful with kubeConfigSecretRef: on this cluster every namespace reads its own, as RBAC allows"))
	}
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

// validateLoan checks one loan of source namespaces to consumer namespaces.
func validateLoan(l *reverser.NamespaceLoan, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(l.SourceNamespaces) == 0 {
		errs = append(errs, field.Required(fld.Child("sourceNamespaces"), `the source namespaces lent, or "*"`))
	}
	errs = append(errs, validateSourceNamespaces(l.SourceNamespaces, fld.Child("sourceNamespaces"))...)
	if l.To.From == reverser.NamespacesFromSame {
		return append(errs, field.NotSupported(fld.Child("to", "from"), l.To.From,
			[]string{string(reverser.NamespacesFromAll), string(reverser.NamespacesFromNames), string(reverser.NamespacesFromSelector)}))
	}
	return append(errs, validateNamespaceSelection(&l.To, fld.Child("to"))...)
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
	for i, n := range spec.AcceptClusterWatchRules {
		af := fld.Child("acceptClusterWatchRules").Index(i)
		if n == "*" {
			if len(spec.AcceptClusterWatchRules) > 1 {
				errs = append(errs, field.Invalid(af, n, `"*" accepts every ClusterWatchRule and must stand alone`))
			}
			continue
		}
		for _, msg := range utilvalidation.IsDNS1123Subdomain(n) {
			errs = append(errs, field.Invalid(af, n, `must be a ClusterWatchRule name or "*": `+msg))
		}
	}
	if ref := spec.ApplierRef; ref != nil {
		switch ref.Kind {
		case reverser.ApplierKindFluxClaim, reverser.ApplierKindArgoCDClaim:
		default:
			errs = append(errs, field.NotSupported(fld.Child("applierRef", "kind"), ref.Kind, []string{string(reverser.ApplierKindFluxClaim), string(reverser.ApplierKindArgoCDClaim)}))
		}
		errs = append(errs, validateName(ref.Name, fld.Child("applierRef", "name"))...)
	}
	if spec.TargetNamespace != "" {
		errs = append(errs, validateNamespaceName(spec.TargetNamespace, fld.Child("targetNamespace"))...)
	}
	if enc := spec.Encryption; enc != nil {
		rf := fld.Child("encryption", "sops", "ageRecipients")
		if len(enc.SOPS.AgeRecipients) == 0 {
			errs = append(errs, field.Required(rf, "at least one age recipient (age1...)"))
		}
		for i, r := range enc.SOPS.AgeRecipients {
			if _, err := age.ParseX25519Recipient(r); err != nil {
				errs = append(errs, field.Invalid(rf.Index(i), r, "must be an age X25519 public key (age1..., as age-keygen prints it)"))
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

// ValidateRepoPath accepts a folder relative to the repository root ("" is
// the root), so a GitTarget never writes outside it, into .git, or to a name
// that aliases another on Windows or macOS checkouts: segments separated by
// single '/', none empty, '.' or '..', none naming .git (in any case, with
// trailing dots or spaces, as git~1 or with an NTFS stream suffix), none
// ending in '.' or ' ', no '\', printable characters of valid UTF-8 only,
// at most MaxPathLength bytes. One trailing '/' is accepted; NormalizeRepoPath
// removes it.
func ValidateRepoPath(p string, fld *field.Path) field.ErrorList {
	if p == "" {
		return nil
	}
	if len(p) > MaxPathLength {
		return field.ErrorList{field.TooLong(fld, p, MaxPathLength)}
	}
	if !utf8.ValidString(p) {
		return field.ErrorList{field.Invalid(fld, p, "must be valid UTF-8")}
	}
	for i, r := range p {
		if !printable(r) {
			return field.ErrorList{field.Invalid(fld, p, fmt.Sprintf(
				"must contain printable characters only: %U at byte %d is a control, format (bidi, zero-width) or line/paragraph separator character", r, i))}
		}
	}
	switch {
	case strings.HasPrefix(p, "/"):
		return field.ErrorList{field.Invalid(fld, p, "must be relative to the repository root (no leading '/'), e.g. clusters/dev")}
	case strings.Contains(p, `\`):
		return field.ErrorList{field.Invalid(fld, p, "must use '/' as separator (no '\\')")}
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		if msg := pathSegmentProblem(seg); msg != "" {
			return field.ErrorList{field.Invalid(fld, p, msg)}
		}
	}
	return nil
}

// NormalizeRepoPath is p without one trailing '/', the form a GitTarget's
// path is stored in. It leaves "/" and a path ending in "//" as they are, so
// that ValidateRepoPath still refuses them.
func NormalizeRepoPath(p string) string {
	if len(p) > 1 && strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "//") {
		return p[:len(p)-1]
	}
	return p
}

// printable refuses control and format characters (bidi controls,
// zero-width spaces and joiners, the byte order mark) and the line and
// paragraph separators.
func printable(r rune) bool {
	return !unicode.IsControl(r) && !unicode.Is(unicode.Cf, r) && r != '\u2028' && r != '\u2029'
}

func pathSegmentProblem(seg string) string {
	switch seg {
	case "":
		return "must not contain empty segments ('//'): separate folders with a single '/'"
	case ".", "..":
		return "must not contain '.' or '..' segments: name each folder, e.g. clusters/dev"
	}
	// Windows drops trailing dots and spaces and reads "name:stream" as
	// name; git~1 is the 8.3 short name of .git.
	name, _, _ := strings.Cut(seg, ":")
	name = strings.TrimRight(name, ". ")
	if strings.EqualFold(name, ".git") || strings.EqualFold(name, "git~1") {
		return "must not name the .git folder in any form: .git in any case, with trailing dots or spaces, or its short name git~1"
	}
	if strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ") {
		return "no segment may end in '.' or ' ' (Windows drops them, so the folder would alias another)"
	}
	return ""
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
		errs = append(errs, validateCredentialFields(r.CredentialFields, rf.Child("credentialFields"))...)
	}
	return errs
}

// identifying are the fields that name an object: an applier needs them in
// clear, so they can be neither dropped nor encrypted.
var identifying = map[string]bool{"apiVersion": true, "kind": true, "metadata": true, "metadata.name": true, "metadata.namespace": true}

func validateCredentialFields(fields []reverser.CredentialField, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, f := range fields {
		ff := fld.Index(i)
		pf := ff.Child("path")
		keys := strings.Split(f.Path, ".")
		switch {
		case f.Path == "":
			errs = append(errs, field.Required(pf, `the field's keys, separated by dots, e.g. "spec.auth.password"`))
		case slices.Contains(keys, ""):
			errs = append(errs, field.Invalid(pf, f.Path, "a key between two dots, or at either end, is empty"))
		case strings.ContainsAny(f.Path, "[]"):
			errs = append(errs, field.Invalid(pf, f.Path, `list items cannot be named: name map keys only, "*" for every key of a map`))
		case keys[0] == "*":
			errs = append(errs, field.Invalid(pf, f.Path, "the first key must be named"))
		case identifying[f.Path] || keys[0] == "apiVersion" || keys[0] == "kind":
			errs = append(errs, field.Invalid(pf, f.Path, "apiVersion, kind, metadata.name and metadata.namespace name the object and stay in clear"))
		case seen[f.Path]:
			errs = append(errs, field.Duplicate(pf, f.Path))
		}
		seen[f.Path] = true
		switch f.Action {
		case "", reverser.CredentialDrop:
		case reverser.CredentialEncrypt:
			if keys[0] == "metadata" {
				errs = append(errs, field.Invalid(ff.Child("action"), f.Action, "metadata stays in clear: Drop the field instead"))
			}
		default:
			errs = append(errs, field.NotSupported(ff.Child("action"), f.Action, []string{string(reverser.CredentialDrop), string(reverser.CredentialEncrypt)}))
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
	at := fld.Child("window", "attachTimeout")
	errs = append(errs, validateDuration(spec.Window.AttachTimeout, false, at)...)
	if d := spec.Window.AttachTimeout; d != nil && d.Duration > MaxAttachTimeout {
		errs = append(errs, field.Invalid(at, d.Duration.String(), fmt.Sprintf("must be at most %s", MaxAttachTimeout)))
	}
	return errs
}

// ValidateMessage accepts 1 to MaxMessageLength characters of valid UTF-8;
// line feeds and tabs are the only control characters allowed, and no line
// may start with the ReservedTrailer, which Reverser alone writes.
func ValidateMessage(msg string, fld *field.Path) field.ErrorList {
	switch n := utf8.RuneCountInString(msg); {
	case strings.TrimSpace(msg) == "":
		return field.ErrorList{field.Required(fld, "a commit message of 1 to 1024 characters")}
	case !utf8.ValidString(msg):
		return field.ErrorList{field.Invalid(fld, msg, "must be valid UTF-8")}
	case n > MaxMessageLength:
		return field.ErrorList{field.TooLongCharacters(fld, msg, MaxMessageLength)}
	}
	for i, r := range msg {
		switch {
		case r == '\r':
			return field.ErrorList{field.Invalid(fld, msg, fmt.Sprintf(
				"must not contain carriage returns (at byte %d): end lines with \\n only", i))}
		case unicode.IsControl(r) && r != '\n' && r != '\t':
			return field.ErrorList{field.Invalid(fld, msg, fmt.Sprintf(
				"must not contain control character %U (at byte %d): line feeds and tabs are the only ones allowed", r, i))}
		}
	}
	for _, line := range strings.Split(msg, "\n") {
		if hasReservedTrailer(line) {
			return field.ErrorList{field.Invalid(fld, line,
				"no line may start with the trailer "+ReservedTrailer+": (in any case): it is written by Reverser only, to record which CommitRequest a commit saved")}
		}
	}
	return nil
}

// hasReservedTrailer says whether line, after leading whitespace, starts
// with ReservedTrailer and ':' in any case. Git also reads "Token : value" as
// a trailer, so blanks before the ':' do not help.
func hasReservedTrailer(line string) bool {
	t := strings.TrimLeftFunc(line, unicode.IsSpace)
	if len(t) < len(ReservedTrailer) || !strings.EqualFold(t[:len(ReservedTrailer)], ReservedTrailer) {
		return false
	}
	return strings.HasPrefix(strings.TrimLeft(t[len(ReservedTrailer):], " \t"), ":")
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

// ValidateFluxClaimUpdate checks the fields that cannot change: a claim
// holds the applier it names, so naming another is a new claim.
func ValidateFluxClaimUpdate(spec, old *reverser.FluxClaimSpec, fld *field.Path) field.ErrorList {
	errs := apivalidation.ValidateImmutableField(spec.KubeProviderRef, old.KubeProviderRef, fld.Child("kubeProviderRef"))
	return append(errs, apivalidation.ValidateImmutableField(spec.KustomizationRef, old.KustomizationRef, fld.Child("kustomizationRef"))...)
}

// ValidateArgoCDClaimUpdate checks the fields that cannot change.
func ValidateArgoCDClaimUpdate(spec, old *reverser.ArgoCDClaimSpec, fld *field.Path) field.ErrorList {
	errs := apivalidation.ValidateImmutableField(spec.KubeProviderRef, old.KubeProviderRef, fld.Child("kubeProviderRef"))
	return append(errs, apivalidation.ValidateImmutableField(spec.ApplicationRef, old.ApplicationRef, fld.Child("applicationRef"))...)
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
