// Package attribution says who made each change: it receives kube-apiserver's
// audit events, keeps the facts they carry (who wrote which object at which
// resourceVersion) in a bounded, expiring index, and maps users to Git
// identities.
package attribution

import (
	"container/list"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"reverser.dev/reverser/pkg/metrics"
)

// Key names one write: the object and the resourceVersion the write gave it.
// A delete is keyed with ResourceVersion DeleteMarker, since the watch's
// DELETED event carries a newer resourceVersion than the delete's response.
type Key struct {
	Provider        string
	Group, Resource string
	Namespace, Name string
	ResourceVersion string
}

// DeleteMarker stands for the resourceVersion of a delete.
const DeleteMarker = "<deleted>"

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
	mu       sync.Mutex
	ttl      time.Duration
	max      int
	facts    map[Key]*list.Element
	order    *list.List // oldest first, of *entry
	received map[string]time.Time
	notify   []chan struct{}
	clock    func() time.Time
}

type entry struct {
	key  Key
	fact Fact
}

// NewIndex keeps at most max facts, each for at most ttl.
func NewIndex(max int, ttl time.Duration) *Index {
	return &Index{ttl: ttl, max: max, facts: map[Key]*list.Element{}, order: list.New(),
		received: map[string]time.Time{}, clock: time.Now}
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

// Lookup returns the fact of a write, if it has arrived.
func (x *Index) Lookup(k Key) (Fact, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.expireLocked()
	if e, ok := x.facts[k]; ok {
		return e.Value.(*entry).fact, true
	}
	return Fact{}, false
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
	return x.order.Len()
}

// Add records the facts of a batch of audit events for a provider and
// returns how many it kept.
func (x *Index) Add(provider string, events []auditv1.Event) int {
	now := x.clock()
	x.mu.Lock()
	kept := 0
	for i := range events {
		k, f, ok := factOf(provider, &events[i], now)
		if !ok {
			continue
		}
		kept++
		if e, exists := x.facts[k]; exists {
			x.order.Remove(e)
		}
		x.facts[k] = x.order.PushBack(&entry{key: k, fact: f})
		for x.order.Len() > x.max {
			oldest := x.order.Front()
			delete(x.facts, oldest.Value.(*entry).key)
			x.order.Remove(oldest)
			metrics.AuditFactsEvicted.Inc()
		}
	}
	if kept > 0 {
		x.received[provider] = now
	}
	x.expireLocked()
	metrics.AuditFacts.Set(float64(x.order.Len()))
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

func (x *Index) expireLocked() {
	cutoff := x.clock().Add(-x.ttl)
	for e := x.order.Front(); e != nil && e.Value.(*entry).fact.At.Before(cutoff); e = x.order.Front() {
		delete(x.facts, e.Value.(*entry).key)
		x.order.Remove(e)
	}
}

var writeVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true}

// factOf extracts the fact of one audit event: a completed, successful,
// non-dry-run write whose response names the object's resourceVersion.
// deletecollection names no single object and makes no fact.
func factOf(provider string, ev *auditv1.Event, now time.Time) (Key, Fact, bool) {
	if ev.Stage != auditv1.StageResponseComplete || !writeVerbs[ev.Verb] || ev.ObjectRef == nil {
		return Key{}, Fact{}, false
	}
	if ev.ResponseStatus != nil && (ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code > 299) {
		return Key{}, Fact{}, false
	}
	if dryRun(ev.RequestURI) || ev.ObjectRef.Subresource != "" {
		return Key{}, Fact{}, false
	}
	k := Key{Provider: provider, Group: ev.ObjectRef.APIGroup, Resource: ev.ObjectRef.Resource,
		Namespace: ev.ObjectRef.Namespace, Name: ev.ObjectRef.Name}
	if ev.Verb == "delete" {
		k.ResourceVersion = DeleteMarker
	} else {
		k.ResourceVersion = responseResourceVersion(ev)
		if k.ResourceVersion == "" {
			return Key{}, Fact{}, false // logged below RequestResponse: nothing to join on
		}
		if k.Name == "" {
			k.Name = responseName(ev) // creates with generateName
		}
	}
	if k.Name == "" {
		return Key{}, Fact{}, false
	}
	u := User{Name: ev.User.Username, UID: ev.User.UID, Groups: ev.User.Groups}
	if ev.ImpersonatedUser != nil {
		u = User{Name: ev.ImpersonatedUser.Username, UID: ev.ImpersonatedUser.UID, Groups: ev.ImpersonatedUser.Groups,
			Impersonator: ev.User.Username}
	}
	at := now
	if !ev.StageTimestamp.IsZero() && ev.StageTimestamp.Time.Before(now) {
		at = ev.StageTimestamp.Time
	}
	return k, Fact{User: u, At: at}, true
}

func dryRun(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil {
		return strings.Contains(uri, "dryRun=")
	}
	return len(u.Query()["dryRun"]) > 0
}

type responseMeta struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

func decodeResponse(ev *auditv1.Event) responseMeta {
	var m responseMeta
	if ev.ResponseObject != nil && len(ev.ResponseObject.Raw) > 0 {
		_ = json.Unmarshal(ev.ResponseObject.Raw, &m)
	}
	return m
}

func responseResourceVersion(ev *auditv1.Event) string {
	return decodeResponse(ev).Metadata.ResourceVersion
}

func responseName(ev *auditv1.Event) string { return decodeResponse(ev).Metadata.Name }
