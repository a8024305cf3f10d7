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
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/claims"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/watch"
	"reverser.dev/reverser/pkg/worker"
)

// defaultCatchUpAfter is FluxClaim's default, for a claim stored without one.
const defaultCatchUpAfter = time.Minute

// claim returns the applier the GitTarget's claim hands its worker: only a
// FluxClaim the claims controller holds (its Held condition True), reached
// through the claim's own KubeProvider. nil: the worker drives no applier.
func (c *Controller) claim(ctx context.Context, gt *v1.GitTarget, domain string) (*worker.Claim, error) {
	ref := gt.Spec.ApplierRef
	if ref == nil || ref.Kind != v1.ApplierKindFluxClaim {
		return nil, nil
	}
	fc, err := c.claims.FluxClaims(gt.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !meta.IsStatusConditionTrue(fc.Status.Conditions, claims.ConditionHeld) || fc.DeletionTimestamp != nil {
		return nil, nil // the claim's own status says why
	}
	kp, err := c.kps.Get(fc.Spec.KubeProviderRef.Name)
	if err != nil {
		return nil, nil // released by the claims controller, which says why
	}
	src, err := c.source(ctx, kp)
	if err != nil {
		return nil, err
	}
	ks := applier.Ref{Namespace: fc.Spec.KustomizationRef.Namespace, Name: fc.Spec.KustomizationRef.Name}
	claimKey := fc.Namespace + "/" + fc.Name
	// Held is the claim's status, which whoever may write it could forge;
	// the Kustomization's claimed-by annotation only the claims controller
	// writes, with its own rights, after checking the claim's author.
	if held, err := (&applier.Flux{Client: src.dynamic}).HeldBy(ctx, ks, claimKey); err != nil || !held {
		return nil, nil // the claims controller says why in the claim's status
	}
	catchUp := defaultCatchUpAfter
	if fc.Spec.CatchUpAfter != nil {
		catchUp = fc.Spec.CatchUpAfter.Duration
	}
	key := gt.Namespace + "/" + gt.Name
	writers := make([]gitrepo.Signature, 0, len(c.cfg.FluxIdentities))
	for _, u := range c.cfg.FluxIdentities {
		writers = append(writers, attribution.Identity(u, domain))
	}
	report := c.cfg.ClaimReports
	return &worker.Claim{
		Key:          claimKey,
		Applier:      &applier.Kustomization{Flux: &applier.Flux{Client: src.dynamic}, Ref: ks},
		CatchUpAfter: catchUp, Writers: writers, Manager: applier.FluxManager, Grace: c.cfg.ApplyGrace, Poll: c.cfg.RemotePoll,
		Barrier: func(token string) { go c.barrier(key, token) },
		Report: func(r worker.ApplyReport) {
			if report != nil {
				report(claimKey, r)
			}
		},
	}, nil
}

// barrier answers an apply window's barrier for the GitTarget key once
// every stream of its mirror has handed its worker an event at or past the
// newest resourceVersion of its collection. A barrier not met within
// worker.BarrierTimeout is left to the worker, which counts it timed out.
func (c *Controller) barrier(key, token string) {
	c.mu.Lock()
	m, ok := c.mirrors[key]
	var w *runningWorker
	var streams []*watch.Stream
	if ok {
		w = c.workers[m.workerKey]
		streams = slices.Collect(maps.Values(m.streams))
	}
	ctx := c.ctx
	c.mu.Unlock()
	if w == nil {
		return
	}
	wait, cancel := context.WithTimeout(ctx, worker.BarrierTimeout)
	defer cancel()
	err := watch.Barrier(wait, streams, 100*time.Millisecond)
	if err != nil {
		klog.FromContext(ctx).Info("Apply window barrier not met", "gitTarget", key, "err", err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return
	}
	w.BarrierMet(ctx, key, token, err)
}

// enqueueNaming enqueues the GitTargets that name the claim fc.
func (c *Controller) enqueueNaming(fc *v1.FluxClaim) {
	gts, err := c.targets.GitTargets(fc.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, gt := range gts {
		if ref := gt.Spec.ApplierRef; ref != nil && ref.Kind == v1.ApplierKindFluxClaim && ref.Name == fc.Name {
			c.queue.Add(gt.Namespace + "/" + gt.Name)
		}
	}
}
