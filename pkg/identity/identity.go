// Package identity maps Kubernetes user names to Git identities
// (Signature), one to one: the names and addresses commits are authored
// with. It imports nothing of Reverser's, so the Git plumbing and the
// attribution of changes share its type without importing each other.
package identity

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Signature is a Git identity: a commit's author or committer.
type Signature struct {
	Name, Email string
}

// DefaultEmailDomain makes addresses for users whose name is not one. The
// .invalid top-level domain is reserved: no mail is ever sent there.
const DefaultEmailDomain = "users.reverser.invalid"

// UnresolvedName is the author of a change no audit fact named in time.
const UnresolvedName = "unknown (attribution unresolved)"

// unresolvedLocal is the local part of the unresolved author's address. No
// user maps to it: an encoded user name has '=' only before two uppercase
// hex digits, and 'u' is not one.
const unresolvedLocal = "attribution=unresolved"

const serviceAccountPrefix = "system:serviceaccount:"

// serviceAccountSuffix ends the local part of every service account's
// address, and of no other user's.
const serviceAccountSuffix = ".serviceaccount"

// For maps a Kubernetes user name to a Git identity. The mapping is
// one-to-one: distinct user names never share an address, and no user name
// can inject anything into a commit header.
//
// The Git name is GitName(user). The address, with domain the GitProvider's
// authorEmailDomain (DefaultEmailDomain when empty), is:
//
//  1. the user name itself when it is an address whose domain is not
//     domain (compared case-insensitively): exactly one '@'; a non-empty
//     local part made only of [A-Za-z0-9.!#$&'*+/=?^_`{|}~-] with no
//     leading, trailing or doubled '.'; a domain that is a valid DNS-1123
//     subdomain containing a '.'. Its case is kept;
//  2. <name>.<ns>.serviceaccount@<domain> for
//     system:serviceaccount:<ns>:<name>, with ns a DNS-1123 label and name a
//     DNS-1123 subdomain;
//  3. enc(user)@<domain> for any other user name, where enc keeps
//     [a-z0-9_-] and '.' (except a '.' that is leading, trailing or follows
//     another '.') and writes every other byte, upper-case letters included,
//     as =XX (the upper-case hex of each UTF-8 byte). When the result ends in
//     ".serviceaccount", that last '.' is written =2E, so no user takes a
//     service account's address (theirs end in ".serviceaccount" and their
//     namespace segment holds no '.').
//
// "alice" is alice@<domain>, "Alice" is =41lice@<domain>, "system:admin" is
// system=3Aadmin@<domain>, "deployer.ops.serviceaccount" is
// deployer.ops=2Eserviceaccount@<domain> while the service account ops/deployer
// is deployer.ops.serviceaccount@<domain>, and "alice@<domain>" is
// alice=40<domain, '.' kept>@<domain>. The empty user name is the unresolved
// author (see Unresolved).
func For(user, domain string) Signature {
	if user == "" {
		return Unresolved(domain)
	}
	return Signature{Name: GitName(user), Email: Email(user, domain)}
}

// Unresolved is the author of a change no audit fact named in time:
// UnresolvedName <attribution=unresolved@domain>, an address no user name
// maps to.
func Unresolved(domain string) Signature {
	return Signature{Name: UnresolvedName, Email: unresolvedLocal + "@" + orDefault(domain)}
}

// GitName is the Git author name of a Kubernetes user name: the name with
// these characters percent-encoded as %XX (the upper-case hex of each UTF-8
// byte), and everything else unchanged:
//   - '%', '<' and '>';
//   - every control character (unicode.IsControl: \n, \r, \t, DEL, ...);
//   - every format character (Unicode category Cf: U+202E RIGHT-TO-LEFT
//     OVERRIDE and the other bidi controls, zero-width spaces...), which
//     would make a name read as another in a log or a review;
//   - a byte that is not valid UTF-8;
//   - the first and the last character when it is whitespace
//     (unicode.IsSpace) or one Git strips from the ends of an identity:
//     . , : ; " ' and \.
//
// So "Eve <ceo@corp.example>" is "Eve %3Cceo@corp.example%3E", and no newline
// ever reaches a commit header. Decoding every %XX gives the user name back.
// The empty user name is UnresolvedName.
func GitName(user string) string {
	if user == "" {
		return UnresolvedName
	}
	var b strings.Builder
	b.Grow(len(user))
	for i := 0; i < len(user); {
		r, size := utf8.DecodeRuneInString(user[i:])
		edge := i == 0 || i+size == len(user)
		if (r == utf8.RuneError && size == 1) || r == '%' || r == '<' || r == '>' || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) ||
			(edge && strippedAtEnds(r)) {
			for j := i; j < i+size; j++ {
				fmt.Fprintf(&b, "%%%02X", user[j])
			}
		} else {
			b.WriteString(user[i : i+size])
		}
		i += size
	}
	return b.String()
}

// strippedAtEnds are the characters Git trims from the ends of a name
// (whitespace, and the "crud" of Git's ident.c).
func strippedAtEnds(r rune) bool {
	return unicode.IsSpace(r) || strings.ContainsRune(`.,:;"'\`, r)
}

// Email is the Git author address of a Kubernetes user name; see Identity.
func Email(user, domain string) string {
	domain = orDefault(domain)
	if user == "" {
		return Unresolved(domain).Email
	}
	if _, host, ok := address(user); ok && !strings.EqualFold(host, domain) {
		return user
	}
	if rest, ok := strings.CutPrefix(user, serviceAccountPrefix); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok &&
			len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0 {
			return name + "." + ns + serviceAccountSuffix + "@" + domain
		}
	}
	return encodeLocal(user) + "@" + domain
}

// address splits a user name that is a plain address (see Identity).
func address(s string) (local, host string, ok bool) {
	if strings.Count(s, "@") != 1 {
		return "", "", false
	}
	local, host, _ = strings.Cut(s, "@")
	if local == "" || local[0] == '.' || local[len(local)-1] == '.' || strings.Contains(local, "..") {
		return "", "", false
	}
	for i := 0; i < len(local); i++ {
		if !atext(local[i]) {
			return "", "", false
		}
	}
	if len(validation.IsDNS1123Subdomain(host)) > 0 || !strings.Contains(host, ".") {
		return "", "", false
	}
	return local, host, true
}

// atext are the bytes a plain address's local part may hold: RFC 5322 atext
// without '%', and '.'.
func atext(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte(".!#$&'*+/=?^_`{|}~-", c) >= 0
}

// encodeLocal is enc of Identity, rule 3.
func encodeLocal(user string) string {
	var b strings.Builder
	b.Grow(len(user))
	for i := 0; i < len(user); i++ {
		c := user[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
			b.WriteByte(c)
		case c == '.' && i > 0 && i < len(user)-1 && user[i-1] != '.':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	out := b.String()
	if head, ok := strings.CutSuffix(out, serviceAccountSuffix); ok {
		out = head + "=2E" + serviceAccountSuffix[1:]
	}
	return out
}

func orDefault(domain string) string {
	if domain == "" {
		return DefaultEmailDomain
	}
	return domain
}
