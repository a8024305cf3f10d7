package attribution

import (
	"time"

	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/metrics"
)

// Resolver decides the author of the changes a KubeProvider's streams see
// for one GitTarget.
type Resolver struct {
	Index    *Index
	Provider string
	// Consumer is the GitTarget's "namespace/name": each fact is taken once
	// per consumer.
	Consumer string
	// Enabled says the provider sends audit events; without them every
	// change is authored by Committer.
	Enabled   bool
	Grace     time.Duration
	Domain    string
	Committer identity.Signature
}

// Unnamed is the author of the changes no audit fact names: the committer
// when the provider sends no audit events, else the unresolved author.
func (r *Resolver) Unnamed() identity.Signature {
	if !r.Enabled || r.Index == nil {
		return r.Committer
	}
	return identity.Unresolved(r.Domain)
}

// key is the key of ch's fact: the object and its resourceVersion, or for a
// delete its UID and DeleteMarker.
func (r *Resolver) key(ch document.Change) Key {
	k := Key{Provider: r.Provider, Group: ch.GVR.Group, Resource: ch.GVR.Resource, Namespace: ch.Namespace, Name: ch.Name,
		ResourceVersion: ch.ResourceVersion}
	if ch.Content == nil {
		k.UID, k.ResourceVersion = ch.UID, DeleteMarker
	}
	return k
}

// Author returns the author of ch, or ready=false with when to ask again
// while its fact may still arrive. A fact it returns is taken: asked again
// for the same change, it finds none.
func (r *Resolver) Author(ch document.Change, now time.Time) (author identity.Signature, ready bool, retryAt time.Time) {
	if !r.Enabled || r.Index == nil {
		metrics.Attributions.WithLabelValues("disabled").Inc()
		return r.Committer, true, time.Time{}
	}
	if ch.Snapshot {
		// What the cluster held when the stream started: nobody's edit now.
		metrics.Attributions.WithLabelValues("snapshot").Inc()
		return r.Committer, true, time.Time{}
	}
	if f, ok := r.Index.Take(r.key(ch), r.Consumer); ok {
		metrics.Attributions.WithLabelValues("resolved").Inc()
		metrics.AttributionWait.Observe(max(now.Sub(ch.Seen), 0).Seconds())
		return identity.For(f.User.Name, r.Domain), true, time.Time{}
	}
	deadline := ch.Seen.Add(r.Grace)
	if now.Before(deadline) {
		return identity.Signature{}, false, deadline
	}
	metrics.Attributions.WithLabelValues("unresolved").Inc()
	metrics.AttributionWait.Observe(r.Grace.Seconds())
	return identity.Unresolved(r.Domain), true, time.Time{}
}
