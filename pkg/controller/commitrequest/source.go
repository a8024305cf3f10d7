package commitrequest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	"reverser.dev/reverser/pkg/tenancy"
)

// Source is where a source-cluster front end's requests come from.
type Source struct {
	// Provider is the KubeProvider whose GitTargets the front end serves.
	Provider string
	Mode     v1.CommitRequestsMode
	// Requests reaches the source cluster's CommitRequests through the
	// provider's credential; Factory informs on one namespace of them (or
	// all, for a loan of "*").
	Requests versioned.Interface
	Factory  informers.SharedInformerFactory
	// Facts holds the source cluster's audit facts; a request's author is
	// the fact of its create, looked for within Grace.
	Facts *attribution.Index
	Grace time.Duration
}

// SourceCluster completes cfg as the front end of one KubeProvider's
// source cluster: requests there, for that provider's GitTargets only,
// admitted by sourceNamespaces grants the provider lends, authored by the
// source cluster's audit facts. A request for another provider's GitTarget
// is left alone, for its owner.
func SourceCluster(cfg Config, src Source) Config {
	cfg.Requests, cfg.RequestsFactory = src.Requests, src.Factory
	cfg.Owns = func(kp *v1.KubeProvider) bool { return kp.Name == src.Provider }
	cfg.Foreign = nil
	cfg.Authorizer = nil // the source cluster's users are not this cluster's
	cfg.KeepFinished = src.Mode != v1.CommitRequestsReconcileAndDeleteFinished
	cfg.NamedTargetsOnly, cfg.Untrusted = true, true
	cfg.Admit = func(ctx context.Context, cr *v1.CommitRequest, gt *v1.GitTarget, kp *v1.KubeProvider) (tenancy.GrantDecision, error) {
		return admitsSource(ctx, gt, kp, cr.Namespace, cfg.namespaceLabels)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	started := cfg.Clock.Now()
	book := &claimBook{authors: map[types.UID]Requester{}}
	cfg.Author = func(cr *v1.CommitRequest, gt *v1.GitTarget, kp *v1.KubeProvider) (Requester, time.Duration) {
		if who, ok := book.get(cr.UID); ok {
			return who, 0
		}
		who, retry := sourceAuthor(cfg, src, started, cr, gt, kp)
		if who.User != nil || who.Unnamed {
			book.put(cr.UID, who)
		}
		return who, retry
	}
	cfg.Forget = book.forget
	return cfg
}

// claimBook remembers, on the control side, whom each source-cluster
// request was claimed for: the request's status lives on the source
// cluster, where whoever may write commitrequests/status could copy a
// claimed request's gitTargetUID and name anybody as its author (#27,
// finding 2). A request this process did not claim is judged afresh.
type claimBook struct {
	mu      sync.Mutex
	authors map[types.UID]Requester
}

func (b *claimBook) get(uid types.UID) (Requester, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	who, ok := b.authors[uid]
	return who, ok
}

func (b *claimBook) put(uid types.UID, who Requester) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.authors[uid] = who
}

// forget drops a finished or deleted request.
func (b *claimBook) forget(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.authors, uid)
}

// sourceAuthor is who made a source-cluster request this process has not
// claimed: the audit fact of the request's create (its name and the
// resourceVersion it was first seen with), waited for up to the grace.
// Nobody is named on a cluster that sends no audit facts; on one that
// does, a request no fact names is unresolved.
//
// Nothing of the request's status is believed: one that names the
// GitTarget's uid, as a claim does, was claimed by an earlier run of the
// controller (whose memory is gone) or written by somebody who copied it,
// and its author cannot be told safely any more; any other status is
// ignored.
func sourceAuthor(cfg Config, src Source, started time.Time, cr *v1.CommitRequest, gt *v1.GitTarget,
	kp *v1.KubeProvider) (Requester, time.Duration) {
	if cr.Status.GitTargetUID == string(gt.UID) {
		return Requester{Unresolved: "this request's status says it was claimed, but not by this controller (it restarted, or someone " +
			"else wrote the status on the source cluster): its author cannot be told safely; create the request again"}, 0
	}
	if !kp.Spec.Audit.Enabled || src.Facts == nil {
		return Requester{Unnamed: true}, 0
	}
	key := attribution.Key{Provider: src.Provider, Group: v1.GroupName, Resource: "commitrequests", Namespace: cr.Namespace,
		Name: cr.Name, ResourceVersion: cr.ResourceVersion}
	if f, ok := src.Facts.Peek(key); ok {
		return Requester{User: &v1.Author{Username: f.User.Name, UID: f.User.UID, Groups: slices.Clone(f.User.Groups)}}, 0
	}
	// The grace runs from the create, or from this process's start for a
	// request made while it was down.
	since := cr.CreationTimestamp.Time
	if started.After(since) {
		since = started
	}
	if wait := since.Add(src.Grace).Sub(cfg.Clock.Now()); wait > 0 {
		return Requester{}, min(wait, 250*time.Millisecond) // facts arrive in batches: look again soon
	}
	if _, received := src.Facts.LastReceived(src.Provider); !received {
		return Requester{Unnamed: true}, 0
	}
	return Requester{Unresolved: fmt.Sprintf("no audit event of KubeProvider %s names who created this request within the "+
		"attribution grace (%s), though that cluster sends them: check that its audit policy logs creates of "+
		"commitrequests.reverser.dev at RequestResponse (artifacts/deploy/audit/policy.yaml)", src.Provider, src.Grace)}, 0
}

// admitsSource decides whether a GitTarget's grants admit a request made
// in namespace requestNamespace of its provider's cluster: a
// sourceNamespaces grant must name it (or "*"), and the provider must lend
// it to the GitTarget's namespace, so a grant never reaches further than a
// WatchRule of that namespace could.
func admitsSource(ctx context.Context, gt *v1.GitTarget, kp *v1.KubeProvider, requestNamespace string,
	labelsOf tenancy.NamespaceLabels) (tenancy.GrantDecision, error) {
	granted := false
	for _, g := range gt.Spec.AllowedCommitRequests {
		if slices.Contains(g.SourceNamespaces, requestNamespace) || slices.Contains(g.SourceNamespaces, "*") {
			granted = true
			break
		}
	}
	if !granted {
		return tenancy.GrantDecision{Reason: fmt.Sprintf("no grant in spec.allowedCommitRequests admits CommitRequests from namespace %q "+
			"of KubeProvider %s's cluster; add {sourceNamespaces: [%s]}", requestNamespace, kp.Name, requestNamespace)}, nil
	}
	lent, err := tenancy.Lends(ctx, kp, gt.Namespace, requestNamespace, false, labelsOf)
	if err != nil {
		return tenancy.GrantDecision{}, err
	}
	if !lent {
		return tenancy.GrantDecision{Reason: fmt.Sprintf("KubeProvider %s does not lend source namespace %q to namespace %q, so no grant "+
			"of this GitTarget can admit it: ask the provider's owner for a spec.lend entry (or spec.lendSameNamespaces)", kp.Name, requestNamespace, gt.Namespace)}, nil
	}
	return tenancy.GrantDecision{Allowed: true}, nil
}
