// Package providerstatus is the one writer of KubeProvider status. Each
// controller that learns something of a provider hands the writer its part
// (Report): the mirror whether the cluster answers and whether audit facts
// arrive, the source-cluster front ends whether CommitRequests are served.
// The writer merges every part into the status it reads from the informer
// and writes it with an update conditional on that read, again after a
// conflict, so no part overwrites another.
//
// Writer.mu guards the parts only: Report never blocks on the API; writes
// happen on the writer's own queue (Run).
package providerstatus

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/loop"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
)

// Part is what one controller says of a provider.
type Part struct {
	// Conditions are set; Remove are the condition types taken away.
	Conditions []metav1.Condition
	Remove     []string
	// Fields sets the status fields the part owns; nil owns none.
	Fields func(*v1.KubeProviderStatus)
}

// Writer writes KubeProvider status from the parts reported.
type Writer struct {
	client versioned.Interface
	kps    listers.KubeProviderLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	mu    sync.Mutex
	parts map[string]map[string]Part // by provider, then by owner
}

// New returns a writer reading KubeProviders from factory.
func New(client versioned.Interface, factory informers.SharedInformerFactory) *Writer {
	inf := factory.Reverser().V1alpha1().KubeProviders()
	return &Writer{client: client, kps: inf.Lister(), synced: inf.Informer().HasSynced, parts: map[string]map[string]Part{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubeprovider_status"})}
}

// Report replaces what owner says of provider; the status is written
// soon after.
func (w *Writer) Report(provider, owner string, p Part) {
	w.mu.Lock()
	if w.parts[provider] == nil {
		w.parts[provider] = map[string]Part{}
	}
	w.parts[provider][owner] = p
	w.mu.Unlock()
	w.queue.Add(provider)
}

// Run writes statuses until ctx ends.
func (w *Writer) Run(ctx context.Context) error {
	return loop.Run(ctx, w.queue, []cache.InformerSynced{w.synced}, 1, "KubeProvider status", w.write)
}

func (w *Writer) write(ctx context.Context, name string) (time.Duration, error) {
	kp, err := w.kps.Get(name)
	if apierrors.IsNotFound(err) {
		w.mu.Lock()
		delete(w.parts, name)
		w.mu.Unlock()
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	status := kp.Status.DeepCopy()
	status.ObservedGeneration = kp.Generation
	w.mu.Lock()
	parts := maps.Clone(w.parts[name])
	w.mu.Unlock()
	for _, owner := range slices.Sorted(maps.Keys(parts)) {
		p := parts[owner]
		for _, t := range p.Remove {
			meta.RemoveStatusCondition(&status.Conditions, t)
		}
		for _, c := range p.Conditions {
			meta.SetStatusCondition(&status.Conditions, c)
		}
		if p.Fields != nil {
			p.Fields(status)
		}
	}
	if apiequality.Semantic.DeepEqual(status, &kp.Status) {
		return 0, nil
	}
	updated := kp.DeepCopy()
	updated.Status = *status
	_, err = w.client.ReverserV1alpha1().KubeProviders().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		return 100 * time.Millisecond, nil // written from a stale copy: read the newest and merge again
	case apierrors.IsNotFound(err):
		return 0, nil
	}
	return 0, err
}
