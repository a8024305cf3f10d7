package attribution

import (
	"strings"
	"time"

	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/watch"
)

// DefaultEmailDomain makes addresses for users whose name is not one. The
// .invalid top-level domain is reserved: no mail is ever sent there.
const DefaultEmailDomain = "users.reverser.invalid"

// UnresolvedName is the author of a change no audit fact named in time.
const UnresolvedName = "unknown (attribution unresolved)"

// Identity maps a Kubernetes user to a Git identity, predictably:
//   - a name that looks like an email address is its own address;
//   - system:serviceaccount:<ns>:<name> becomes <name>.<ns>.serviceaccount@<domain>;
//   - any other name n becomes n@<domain>, lower-cased, with characters an
//     address cannot hold replaced by '-'.
//
// The Git name is always the Kubernetes user name.
func Identity(user, domain string) gitrepo.Signature {
	if domain == "" {
		domain = DefaultEmailDomain
	}
	if at := strings.LastIndexByte(user, '@'); at > 0 && strings.Contains(user[at:], ".") && !strings.ContainsAny(user, " <>") {
		return gitrepo.Signature{Name: user, Email: user}
	}
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		if ns, name, ok := strings.Cut(rest, ":"); ok {
			return gitrepo.Signature{Name: user, Email: local(name) + "." + local(ns) + ".serviceaccount@" + domain}
		}
	}
	return gitrepo.Signature{Name: user, Email: local(user) + "@" + domain}
}

// local turns a name into the local part of an address.
func local(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '+', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return strings.Trim(b.String(), ".")
}

// Resolver decides the author of the changes a KubeProvider's streams see.
type Resolver struct {
	Index    *Index
	Provider string
	// Enabled says the provider sends audit events; without them every
	// change is authored by Committer.
	Enabled   bool
	Grace     time.Duration
	Domain    string
	Committer gitrepo.Signature
}

// Author returns the author of ch, or ready=false with when to ask again
// while its fact may still arrive.
func (r *Resolver) Author(ch watch.Change, now time.Time) (author gitrepo.Signature, ready bool, retryAt time.Time) {
	if !r.Enabled || r.Index == nil {
		metrics.Attributions.WithLabelValues("disabled").Inc()
		return r.Committer, true, time.Time{}
	}
	if ch.Snapshot {
		// What the cluster held when the stream started: nobody's edit now.
		metrics.Attributions.WithLabelValues("snapshot").Inc()
		return r.Committer, true, time.Time{}
	}
	k := Key{Provider: r.Provider, Group: ch.GVR.Group, Resource: ch.GVR.Resource, Namespace: ch.Namespace, Name: ch.Name,
		ResourceVersion: ch.ResourceVersion}
	if ch.Content == nil {
		k.ResourceVersion = DeleteMarker
	}
	if f, ok := r.Index.Lookup(k); ok {
		metrics.Attributions.WithLabelValues("resolved").Inc()
		metrics.AttributionWait.Observe(max(now.Sub(ch.Seen), 0).Seconds())
		return Identity(f.User.Name, r.Domain), true, time.Time{}
	}
	deadline := ch.Seen.Add(r.Grace)
	if now.Before(deadline) {
		return gitrepo.Signature{}, false, deadline
	}
	metrics.Attributions.WithLabelValues("unresolved").Inc()
	metrics.AttributionWait.Observe(r.Grace.Seconds())
	return gitrepo.Signature{Name: UnresolvedName, Email: "unresolved@" + orDefault(r.Domain)}, true, time.Time{}
}

func orDefault(domain string) string {
	if domain == "" {
		return DefaultEmailDomain
	}
	return domain
}
