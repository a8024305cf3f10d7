// Package redact hides what may be a secret in a Git remote's URL: the
// userinfo (a password, or a token given as user name), the query and the
// fragment. Credentials must never reach error values, logs or status
// messages, and every place that shows a URL goes through this one
// implementation.
//
// Each removed part is replaced by "<redacted>", so that a reader learns that
// something was there without seeing it. The package is a leaf that imports
// the standard library only: the API server's validation uses it without
// linking go-git, which pkg/gitrepo imports.
package redact

import (
	"regexp"
	"strings"
)

// redacted stands for what was removed.
const redacted = "<redacted>"

// URL returns raw with anything that may be a secret replaced by
// "<redacted>": the userinfo, the query ("?<redacted>") and the fragment
// ("#<redacted>"). The user name of an ssh URL (ssh, git+ssh or ssh+git
// scheme, or the scp form user@host:path) is kept and only its password is
// replaced (ssh://git:<redacted>@host/...); any other userinfo is replaced
// whole, an http(s) user name too, since it may be a token. Where raw does not
// parse as host[:port], a '@' further on ends the userinfo, so that a password
// holding a '/' is hidden as well. URL(URL(raw)) is URL(raw).
func URL(raw string) string {
	s, tail := raw, ""
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s, tail = s[:i], s[i:i+1]+redacted
	}
	prefix, rest, keepUser := "", s, true // no scheme: the scp form user@host:path
	if scheme, after, ok := strings.Cut(s, "://"); ok {
		prefix, rest = scheme+"://", after
		switch strings.ToLower(scheme) {
		case "ssh", "git+ssh", "ssh+git":
		default:
			keepUser = false
		}
	}
	authority := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 && badPort(authority) {
		at = strings.LastIndexByte(rest, '@')
	}
	if at < 0 {
		return prefix + rest + tail
	}
	userinfo := redacted
	if user, _, hasPassword := strings.Cut(rest[:at], ":"); keepUser && user != "" {
		userinfo = user
		if hasPassword {
			userinfo += ":" + redacted
		}
	}
	return prefix + userinfo + "@" + rest[at+1:] + tail
}

// badPort says whether host[:port] has a port that is not a number, which is
// what a userinfo holding a '/' leaves behind.
func badPort(authority string) bool {
	i := strings.LastIndexByte(authority, ':')
	if i < 0 || strings.HasSuffix(authority, "]") {
		return false
	}
	return strings.ContainsFunc(authority[i+1:], func(r rune) bool { return r < '0' || r > '9' })
}

// urlInText finds what looks like a URL in free text: scheme:// up to a blank,
// a quote or an angle bracket. The literal "<redacted>" is taken as part of
// the URL, so that Text leaves a URL already redacted as it is.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://(?:[^\\s\"'<>`]|" + regexp.QuoteMeta(redacted) + ")*")

// Text rewrites every URL in s (scheme://...) as URL does. Punctuation that
// ends a sentence or closes a bracket after a URL is kept. Text(Text(s)) is
// Text(s).
func Text(s string) string {
	return urlInText.ReplaceAllStringFunc(s, func(u string) string {
		core := strings.TrimRight(u, ".,;:!?)]}")
		return URL(core) + u[len(core):]
	})
}

// Error returns err with its text rewritten by Text, or err itself when its
// text holds nothing to redact. errors.Is and errors.As still see the errors
// it wraps; print the returned error, not those.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := Text(msg)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
