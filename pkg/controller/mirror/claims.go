package mirror

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/pkg/controller/claims"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/stream"
	"reverser.dev/reverser/pkg/worker"
)

// defaultCatchUpAfter is FluxClaim's default, for a claim stored without
// one; ArgoCDClaim's is 0s.
const defaultCatchUpAfter = time.Minute

// claim returns the applier the GitTarget's claim hands its worker: only a
// claim the claims controller holds (its Held condition True, and the
// applier object annotated for it), reached through the claim's own
// KubeProvider. nil: the worker drives no applier. appliedInto is the
// namespace that applier puts documents without one into ("" when it
// does not say).
func (c *Controller) claim(ctx context.Context, gt *v1.GitTarget, domain string) (cl *worker.Claim, appliedInto string, err error) {
	ref := gt.Spec.ApplierRef
	if ref == nil {
		return nil, "", nil
	}
	if ref.Kind != v1.ApplierKindFluxClaim && ref.Kind != v1.ApplierKindArgoCDClaim {
		return nil, "", nil
	}
	hc, err := c.claims.Get(ref.Kind, gt.Namespace, ref.Name)
	if apierrors.IsNotFound(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	if !meta.IsStatusConditionTrue(hc.Status.Conditions, claims.ConditionHeld) || hc.Meta.DeletionTimestamp != nil {
		return nil, "", nil // the claim's own status says why
	}
	kp, err := c.kps.Get(hc.KubeProvider)
	if err != nil {
		return nil, "", nil // released by the claims controller, which says why
	}
	cluster, err := c.cfg.Clusters.Cluster(kp)
	if err != nil {
		return nil, "", err
	}
	annotated := hc.Meta.Namespace + "/" + hc.Meta.Name
	cl = &worker.Claim{Key: hc.Key(), Grace: c.cfg.ApplyGrace, Poll: c.cfg.RemotePoll}
	var holder interface {
		HeldBy(ctx context.Context, ref applier.Ref, claim string) (bool, string, error)
	}
	var identities []string
	if ref.Kind == v1.ApplierKindFluxClaim {
		flux := &applier.Flux{Client: cluster.Dynamic}
		holder, identities = flux, c.cfg.FluxIdentities
		cl.Applier, cl.Manager, cl.CatchUpAfter = &applier.Kustomization{Flux: flux, Ref: hc.Target}, applier.FluxManager, defaultCatchUpAfter
	} else {
		argo := &applier.ArgoCD{Client: cluster.Dynamic}
		holder, identities = argo, c.cfg.ArgoCDIdentities
		cl.Applier, cl.Manager = &applier.Application{ArgoCD: argo, Ref: hc.Target}, applier.ArgoCDManager
	}
	// Held is the claim's status, which whoever may write it could forge;
	// the applier object's claimed-by annotation only the claims controller
	// writes, with its own rights, after checking the claim's author.
	held, appliedInto, err := holder.HeldBy(ctx, hc.Target, annotated)
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		// A moment's failure keeps the worker's claim as it is (the caller
		// leaves the mirror running), rather than dropping its waiting saves.
		return nil, "", err
	case err != nil || !held:
		return nil, "", nil // the claims controller says why in the claim's status
	}
	if hc.CatchUpAfter != nil {
		cl.CatchUpAfter = hc.CatchUpAfter.Duration
	}
	for _, u := range identities {
		cl.Writers = append(cl.Writers, identity.For(u, domain))
	}
	key := gt.Namespace + "/" + gt.Name
	cl.Barrier = func(token string) { go c.barrier(key, token) }
	if report := c.cfg.ClaimReports; report != nil {
		cl.Report = func(r worker.ApplyReport) { report(cl.Key, r) }
	}
	return cl, appliedInto, nil
}

// appliedBy is the field manager of the applier kind the GitTarget's
// claim names, held or not: its writes are told from people's by it.
func appliedBy(gt *v1.GitTarget) string {
	if gt.Spec.ApplierRef == nil {
		return ""
	}
	switch gt.Spec.ApplierRef.Kind {
	case v1.ApplierKindFluxClaim:
		return applier.FluxManager
	case v1.ApplierKindArgoCDClaim:
		return applier.ArgoCDManager
	}
	return ""
}

// barrier answers an apply window's barrier for the GitTarget key once
// every stream of its mirror has handed its worker an event at or past the
// newest resourceVersion of its collection. A barrier not met within
// worker.BarrierTimeout is left to the worker, which counts it timed out.
func (c *Controller) barrier(key, token string) {
	c.mu.Lock()
	m, ok := c.mirrors[key]
	var w *runningWorker
	var streams []*stream.Stream
	if ok {
		w = c.workers.get(m.workerKey)
		streams = slices.Collect(maps.Values(m.streams))
	}
	ctx := c.ctx
	c.mu.Unlock()
	if w == nil {
		return
	}
	wait, cancel := context.WithTimeout(ctx, worker.BarrierTimeout)
	defer cancel()
	err := stream.Barrier(wait, streams, 100*time.Millisecond)
	if err != nil {
		klog.FromContext(ctx).Info("Apply window barrier not met", "gitTarget", key, "err", err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return
	}
	w.BarrierMet(ctx, key, token, err)
}

// enqueueNaming enqueues the GitTargets that name the claim of kind in
// namespace ns.
func (c *Controller) enqueueNaming(kind v1.ApplierKind, ns, name string) {
	gts, err := c.targets.GitTargets(ns).List(labels.Everything())
	if err != nil {
		return
	}
	for _, gt := range gts {
		if ref := gt.Spec.ApplierRef; ref != nil && ref.Kind == kind && ref.Name == name {
			c.queue.Add(gt.Namespace + "/" + gt.Name)
		}
	}
}
