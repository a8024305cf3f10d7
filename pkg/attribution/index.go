// Package attribution says who made each change: it receives kube-apiserver's
// audit events, keeps the facts they carry (who wrote which object at which
// resourceVersion, who deleted which object) in a bounded, expiring index,
// and maps users to Git identities.
package attribution

import (
	"container/list"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/metrics"
)

// Key names one write: the object and the resourceVersion the write gave it.
//
// A delete is keyed with ResourceVersion DeleteMarker and the deleted
// object's UID, since the watch's DELETED event carries a newer
// resourceVersion than the delete's response and a name can be reused by a
// new object. Other writes leave UID empty: their resourceVersion is unique
// already.
type Key struct {
	Provider        string
	Group, Resource string
	Namespace, Name string
	// UID is set for deletes only.
	UID             types.UID
	ResourceVersion string
}

// DeleteMarker stands for the resourceVersion of a delete.
const DeleteMarker = "<deleted>"

// MaxConsumers is how many consumers (GitTargets mirroring the same object)
// can take one fact. It keeps every entry's memory bounded; a consumer past
// it finds no fact, and its change ends up unresolved rather than
// misattributed.
const MaxConsumers = 32

// User is who made a write.
type User struct {
	Name   string
	UID    string
	Groups []string
	// Impersonator is set when Name was impersonated by another user.
	Impersonator string
}

// Fact is one attributed write.
type Fact struct {
	User User
	At   time.Time
}

// Index holds facts for a while. It is safe for concurrent use.
type Index struct {
	mu    sync.Mutex
	ttl   time.Duration
	max   int
	facts map[Key]*list.Element
	// order is, per provider, its *entry in the order they were added:
	// oldest first. Each provider has a budget of max facts of its own, so
	// one cluster's burst never pushes out another's (#27, finding 8).
	order    map[string]*list.List
	total    int
	received map[string]time.Time
	notify   []chan struct{}
	clock    func() time.Time
}

type entry struct {
	key  Key
	fact Fact
	// requested is the event's RequestReceivedTimestamp, which orders two
	// events claiming the same key.
	requested time.Time
	// added is when the index learned the key; it expires ttl later.
	added time.Time
	// takenBy are the consumers that took the fact, at most MaxConsumers.
	takenBy []string
}

// NewIndex keeps at most max facts of each provider, each for at most ttl.
func NewIndex(max int, ttl time.Duration) *Index {
	return &Index{ttl: ttl, max: max, facts: map[Key]*list.Element{}, order: map[string]*list.List{},
		received: map[string]time.Time{}, clock: time.Now}
}

// Unsubscribe stops notifying a channel Subscribe returned.
func (x *Index) Unsubscribe(ch <-chan struct{}) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.notify = slices.DeleteFunc(x.notify, func(c chan struct{}) bool { return c == ch })
}

// Subscribe returns a channel that receives (without blocking the index)
// whenever facts arrive, so waiters can look again.
func (x *Index) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	x.mu.Lock()
	x.notify = append(x.notify, ch)
	x.mu.Unlock()
	return ch
}

// Take returns the fact of a write, if it has arrived, at most once for a
// given consumer (a GitTarget's "namespace/name"): a second change claiming
// the same write for the same consumer finds nothing. Other consumers
// mirroring the same object can still take it, once each, up to
// MaxConsumers.
func (x *Index) Take(k Key, consumer string) (Fact, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.lookupLocked(k)
	if e == nil {
		return Fact{}, false
	}
	if slices.Contains(e.takenBy, consumer) {
		return Fact{}, false
	}
	if len(e.takenBy) >= MaxConsumers {
		klog.V(2).InfoS("Audit fact taken by too many consumers; leaving the change unresolved",
			"kubeProvider", k.Provider, "resource", k.Resource, "namespace", k.Namespace, "name", k.Name,
			"consumer", consumer, "maxConsumers", MaxConsumers)
		return Fact{}, false
	}
	e.takenBy = append(e.takenBy, consumer)
	return e.fact, true
}

// Peek returns the fact of a write, if it has arrived, without taking it:
// for a reader that may ask again after a failed write, as the
// CommitRequest core does for a request's own create.
func (x *Index) Peek(k Key) (Fact, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.lookupLocked(k); e != nil {
		return e.fact, true
	}
	return Fact{}, false
}

// lookupLocked is the unexpired entry of k, or nil.
func (x *Index) lookupLocked(k Key) *entry {
	x.expireLocked()
	if el, ok := x.facts[k]; ok {
		return el.Value.(*entry)
	}
	return nil
}

// LastReceived is when a provider's route last delivered a fact.
func (x *Index) LastReceived(provider string) (time.Time, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t, ok := x.received[provider]
	return t, ok
}

// Len is how many facts are held.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.total
}

// Add records the facts of a batch of audit events for a provider and
// returns how many it kept (new keys, and earlier claims replacing later
// ones).
//
// A key that is held already keeps its fact. A no-op update or patch (one
// that changed nothing) answers with the resourceVersion the object already
// had, so its key is that of the write that made the version; letting it
// replace the fact would hand the version to whoever re-applied it. Only an
// event whose RequestReceivedTimestamp is strictly earlier than the kept
// one's replaces it, because audit batches may arrive out of order and the
// earlier request is the one that made the version. A replaced fact keeps the
// consumers that took it already: they never take the same key twice.
func (x *Index) Add(provider string, events []auditv1.Event) int {
	now := x.clock()
	// Responses are decoded before locking: Take does not wait for them.
	var claims []keyedFact
	for i := range events {
		claims = append(claims, factsOf(provider, &events[i], now)...)
	}
	x.mu.Lock()
	x.expireLocked()
	kept := 0
	for _, c := range claims {
		if el, exists := x.facts[c.key]; exists {
			held := el.Value.(*entry)
			if !c.requested.IsZero() && c.requested.Before(held.requested) {
				held.fact, held.requested = c.fact, c.requested
				kept++
			}
			continue
		}
		kept++
		order := x.order[provider]
		if order == nil {
			order = list.New()
			x.order[provider] = order
		}
		x.facts[c.key] = order.PushBack(&entry{key: c.key, fact: c.fact, requested: c.requested, added: now})
		x.total++
		for order.Len() > x.max {
			x.removeLocked(order, order.Front())
			metrics.AuditFactsEvicted.Inc()
		}
	}
	if kept > 0 {
		x.received[provider] = now
	}
	x.expireLocked()
	metrics.AuditFacts.Set(float64(x.total))
	subscribers := x.notify
	x.mu.Unlock()
	if kept > 0 {
		for _, ch := range subscribers {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	return kept
}

// expireLocked drops the facts added more than ttl ago. Each list is in
// the order of addition, so they are at its front.
func (x *Index) expireLocked() {
	cutoff := x.clock().Add(-x.ttl)
	expired := false
	for provider, order := range x.order {
		for e := order.Front(); e != nil && e.Value.(*entry).added.Before(cutoff); e = order.Front() {
			x.removeLocked(order, e)
			expired = true
		}
		if order.Len() == 0 {
			delete(x.order, provider)
		}
	}
	if expired {
		metrics.AuditFacts.Set(float64(x.total))
	}
}

// removeLocked drops the fact e of a provider's list order.
func (x *Index) removeLocked(order *list.List, e *list.Element) {
	delete(x.facts, e.Value.(*entry).key)
	order.Remove(e)
	x.total--
}

type keyedFact struct {
	key  Key
	fact Fact
	// requested is the event's RequestReceivedTimestamp.
	requested time.Time
}

// connectSubresources are proxied to something else than the object: what
// they answer says nothing about the object's resourceVersion.
var connectSubresources = map[string]bool{"proxy": true, "exec": true, "attach": true, "portforward": true}

// factsOf extracts the facts of one audit event: a completed, successful,
// non-dry-run write.
//   - create, update, patch: keyed on the response's resourceVersion (the
//     event must be logged at RequestResponse);
//   - update and patch of a subresource (deployments/scale, */status): keyed
//     on the parent resource, with the name and resourceVersion of the
//     response (a Scale carries its parent's); create of a subresource
//     (pods/eviction, serviceaccounts/token, pods/binding) writes no version
//     of the object and makes no fact;
//   - delete: keyed on the deleted object's UID, taken from the response (the
//     object, or a Status whose details name it) or else objectRef.uid; a
//     delete without a UID makes no fact;
//   - deletecollection: one delete fact per deleted item of the response's
//     list.
func factsOf(provider string, ev *auditv1.Event, now time.Time) []keyedFact {
	if !writes(ev) {
		return nil
	}
	ref := ev.ObjectRef
	sub := ref.Subresource
	resp, ok := decodeResponse(ev)
	if !ok {
		return nil
	}
	f := Fact{User: userOf(ev), At: now}
	if !ev.StageTimestamp.IsZero() && ev.StageTimestamp.Time.Before(now) {
		f.At = ev.StageTimestamp.Time
	}
	requested := ev.RequestReceivedTimestamp.Time
	base := Key{Provider: provider, Group: ref.APIGroup, Resource: ref.Resource, Namespace: ref.Namespace}

	switch ev.Verb {
	case "deletecollection":
		return collectionDeletes(base, resp, keyedFact{fact: f, requested: requested})
	case "delete":
		k := base
		k.Name, k.ResourceVersion = ref.Name, DeleteMarker
		if resp.Kind == "Status" {
			k.UID = resp.statusUID() // what the generic store answers for, e.g., ConfigMaps
		} else {
			k.UID = resp.Metadata.UID // the deleted object
		}
		if k.UID == "" {
			k.UID = ref.UID
		}
		if k.Name == "" || k.UID == "" {
			return nil
		}
		return []keyedFact{{key: k, fact: f, requested: requested}}
	}

	k := base
	k.ResourceVersion = resp.Metadata.ResourceVersion
	if k.ResourceVersion == "" {
		return nil // logged below RequestResponse: nothing to join on
	}
	k.Name = ref.Name
	if sub != "" {
		// The response of a subresource write names its parent: it must be
		// the object the request addressed.
		if resp.Metadata.Name != "" {
			if k.Name != "" && resp.Metadata.Name != k.Name {
				return nil
			}
			k.Name = resp.Metadata.Name
		}
	} else if k.Name == "" {
		k.Name = resp.Metadata.Name // creates with generateName
	}
	if k.Name == "" {
		return nil
	}
	return []keyedFact{{key: k, fact: f, requested: requested}}
}

// writes says whether an event is a successful, persisted write that can
// make a fact: complete, 2xx, not a dry run, and a verb (and subresource)
// that writes a version of the object or deletes it.
func writes(ev *auditv1.Event) bool {
	if ev.Stage != auditv1.StageResponseComplete || ev.ObjectRef == nil {
		return false
	}
	if ev.ResponseStatus != nil && (ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code > 299) {
		return false
	}
	if dryRun(ev.RequestURI) {
		return false
	}
	switch sub := ev.ObjectRef.Subresource; ev.Verb {
	case "create", "delete", "deletecollection":
		return sub == ""
	case "update", "patch":
		return !connectSubresources[sub]
	}
	return false
}

// collectionDeletes is one delete fact, like proto, per deleted item of a
// deletecollection's response.
func collectionDeletes(base Key, resp response, proto keyedFact) []keyedFact {
	items := resp.items()
	out := make([]keyedFact, 0, len(items))
	for _, item := range items {
		k := base
		k.Name, k.UID, k.ResourceVersion = item.Metadata.Name, item.Metadata.UID, DeleteMarker
		if item.Metadata.Namespace != "" {
			k.Namespace = item.Metadata.Namespace
		}
		if k.Name == "" || k.UID == "" {
			continue
		}
		kf := proto
		kf.key = k
		out = append(out, kf)
	}
	return out
}

func userOf(ev *auditv1.Event) User {
	if ev.ImpersonatedUser != nil {
		return User{Name: ev.ImpersonatedUser.Username, UID: ev.ImpersonatedUser.UID, Groups: ev.ImpersonatedUser.Groups,
			Impersonator: ev.User.Username}
	}
	return User{Name: ev.User.Username, UID: ev.User.UID, Groups: ev.User.Groups}
}

func dryRun(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil {
		return strings.Contains(uri, "dryRun=")
	}
	return len(u.Query()["dryRun"]) > 0
}

type objectMeta struct {
	Name            string    `json:"name"`
	Namespace       string    `json:"namespace"`
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion"`
}

// response is what a fact needs of an event's responseObject: an object, a
// list of deleted objects, or a metav1.Status. Details and Items are read
// only where they are expected, so an object with fields of those names
// still makes its fact.
type response struct {
	Kind     string          `json:"kind"`
	Metadata objectMeta      `json:"metadata"`
	Details  json.RawMessage `json:"details"`
	Items    json.RawMessage `json:"items"`
}

type statusDetails struct {
	UID types.UID `json:"uid"`
}

type listItem struct {
	Metadata objectMeta `json:"metadata"`
}

// decodeResponse reads the event's responseObject; ok=false when it is
// there but not a JSON object.
func decodeResponse(ev *auditv1.Event) (response, bool) {
	var r response
	if ev.ResponseObject == nil || len(ev.ResponseObject.Raw) == 0 {
		return r, true
	}
	if err := json.Unmarshal(ev.ResponseObject.Raw, &r); err != nil {
		klog.V(4).InfoS("Audit event's responseObject cannot be read; no fact", "auditID", ev.AuditID, "err", err)
		return response{}, false
	}
	return r, true
}

// statusUID is the UID a metav1.Status names in its details.
func (r response) statusUID() types.UID {
	var d statusDetails
	if r.Kind != "Status" || len(r.Details) == 0 || json.Unmarshal(r.Details, &d) != nil {
		return ""
	}
	return d.UID
}

// items are the objects of a list response.
func (r response) items() []listItem {
	var items []listItem
	if len(r.Items) == 0 || json.Unmarshal(r.Items, &items) != nil {
		return nil
	}
	return items
}
