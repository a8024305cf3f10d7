package gitrepo

import (
	"regexp"
	"strings"
)

// RedactURL returns raw without anything that may be a secret, for errors,
// logs and status messages: the query and the fragment are dropped, and so
// is the userinfo, except the user name of an ssh URL (ssh://git@host/...,
// git@host:path), whose password alone is dropped. An http(s) user name goes
// too: it may be a token. Where raw does not parse as host[:port], a '@'
// further on ends the userinfo, so that a password holding a '/' is dropped
// as well.
func RedactURL(raw string) string {
	s := raw
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
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
		return prefix + rest
	}
	if user, _, _ := strings.Cut(rest[:at], ":"); keepUser && user != "" {
		return prefix + user + "@" + rest[at+1:]
	}
	return prefix + rest[at+1:]
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

// urlInText finds what looks like a URL in free text: scheme:// up to a
// blank or a quote.
var urlInText = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'<>`]*")

// RedactText rewrites every URL in s (scheme://...) as RedactURL does.
// Punctuation that ends a sentence or closes a bracket after a URL is kept.
func RedactText(s string) string {
	return urlInText.ReplaceAllStringFunc(s, func(u string) string {
		core := strings.TrimRight(u, ".,;:!?)]}")
		return RedactURL(core) + u[len(core):]
	})
}

// Redact returns err with its text rewritten by RedactText, or err itself
// when its text holds nothing to redact. errors.Is and errors.As still see
// the errors it wraps; print the returned error, not those.
func Redact(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := RedactText(msg)
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
