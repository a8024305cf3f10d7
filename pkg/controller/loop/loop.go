// Package loop runs the worker loop that Reverser's controllers share: wait for the informers, then let workers take keys
// from a rate-limited queue and reconcile them, each reconcile returning when
// to look again.
package loop

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Reconcile handles one key; a positive duration asks to be called again
// after it, an error retries with the queue's backoff.
type Reconcile func(ctx context.Context, key string) (time.Duration, error)

// Run waits for synced, runs workers over q until ctx is done, and shuts q
// down. what names the controller in errors and logs.
func Run(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], synced []cache.InformerSynced, workers int, what string,
	reconcile Reconcile) error {
	defer q.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("%s informers did not sync", what)
	}
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) { Work(ctx, q, what, reconcile) }, time.Second)
	}
	<-ctx.Done()
	return nil
}

// Work is one worker: it takes keys from q and reconciles them until q
// shuts down, for controllers that start their workers themselves.
func Work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], what string, reconcile Reconcile) {
	for next(ctx, q, what, reconcile) {
	}
}

// Once adapts a reconcile that never asks to be called again.
func Once(reconcile func(ctx context.Context, key string) error) Reconcile {
	return func(ctx context.Context, key string) (time.Duration, error) { return 0, reconcile(ctx, key) }
}

func next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], what string, reconcile Reconcile) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	after, err := reconcile(ctx, key)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reconciling", "controller", what, "key", key)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	if after > 0 {
		q.AddAfter(key, after)
	}
	return true
}
