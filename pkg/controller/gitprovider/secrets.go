// Package gitprovider owns what the controller reads of the Secrets
// GitProviders name: the Git credentials of spec.secretRef and the signing
// key of spec.signing, built into what a branch worker pushes and signs
// with, each with a fingerprint that changes when the Secret is rotated.
//
// Each Secret a GitProvider names is watched by an informer of its own,
// selected by name in the GitProvider's namespace. So the controller caches
// only the Secrets GitProviders name, never a namespace's others (Helm
// releases, service account tokens); it needs list and watch only where
// reverser-controller-secrets is bound; and it hears of a rotation at once
// (OnChange) rather than at the next resync. A watch nobody has read from
// for Config.Idle is stopped (Run).
//
// Controller is the one writer of GitProvider status: whether the
// GitProvider's author may still have its Secrets used, whether they make
// usable credentials, and whether the remote takes pushes with them.
//
// Secrets.mu guards the set of watches and each watch's last use; a
// watch's own mu guards its last list error. Neither is held while waiting
// for a watch to list.
package gitprovider

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Config wires Secrets.
type Config struct {
	// Kube reaches the control cluster, where GitProviders' Secrets live.
	Kube kubernetes.Interface
	// DataDir holds the known_hosts files SSH credentials are checked with.
	DataDir string
	// SyncTimeout bounds how long a first read waits for its watch to list
	// the Secret; zero is 10s.
	SyncTimeout time.Duration
	// Idle is how long a watch nobody reads from is kept; zero is 10m,
	// well over a resync, so a running mirror's Secrets stay watched.
	Idle time.Duration
	// Clock tells the time of last use; nil is the real clock.
	Clock clock.Clock
}

// Reason is a lasting problem with a named Secret (missing, forbidden,
// unusable): its Reason names it for a condition and its message says what
// to fix.
type Reason struct{ Reason, Message string }

func (r *Reason) Error() string { return r.Reason + ": " + r.Message }

// Condition returns the reason and message, for the mirror's conditions.
func (r *Reason) Condition() (reason, message string) { return r.Reason, r.Message }

func reasonf(reason, format string, args ...any) *Reason {
	return &Reason{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Secrets reads the Secrets GitProviders name through one watch each.
type Secrets struct {
	cfg Config

	mu       sync.Mutex
	ctx      context.Context         // Run's: watches stop with it
	watches  map[string]*secretWatch // by namespace/name
	onChange []func(namespace, name string)
}

type secretWatch struct {
	informer cache.SharedIndexInformer
	stop     context.CancelFunc
	lastUsed time.Time // guarded by Secrets.mu

	mu      sync.Mutex
	listErr error // the reflector's last error; nil once it lists
}

// New builds Secrets; Run serves its watches.
func New(cfg Config) *Secrets {
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = 10 * time.Second
	}
	if cfg.Idle == 0 {
		cfg.Idle = 10 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Secrets{cfg: cfg, watches: map[string]*secretWatch{}, ctx: context.Background()}
}

// OnChange calls f (which must not block) when a watched Secret is added,
// changed or deleted. Call it before Run.
func (s *Secrets) OnChange(f func(namespace, name string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = append(s.onChange, f)
}

// Run stops idle watches until ctx ends, then every watch.
func (s *Secrets) Run(ctx context.Context) {
	s.mu.Lock()
	s.ctx = ctx
	s.mu.Unlock()
	wait.UntilWithContext(ctx, func(context.Context) { s.Prune() }, time.Minute)
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, w := range s.watches {
		w.stop()
		delete(s.watches, key)
	}
}

// Prune stops the watches nobody has read from for Config.Idle.
func (s *Secrets) Prune() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, w := range s.watches {
		if s.cfg.Clock.Since(w.lastUsed) >= s.cfg.Idle {
			w.stop()
			delete(s.watches, key)
		}
	}
}

// Watched says how many Secrets are watched now.
func (s *Secrets) Watched() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// Get returns Secret namespace/name from its watch, started on first use;
// the first read waits for the watch to list. NotFound is an API NotFound
// error; a watch the controller may not list fails at once with Forbidden.
func (s *Secrets) Get(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	w := s.watch(namespace, name)
	if !w.informer.HasSynced() {
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, s.cfg.SyncTimeout, true, func(context.Context) (bool, error) {
			if err := w.err(); apierrors.IsForbidden(err) {
				return false, err
			}
			return w.informer.HasSynced(), nil
		})
		switch {
		case apierrors.IsForbidden(err):
			return nil, err
		case err != nil:
			return nil, fmt.Errorf("the watch of Secret %s/%s did not list it within %s: %w", namespace, name, s.cfg.SyncTimeout, errors.Join(err, w.err()))
		}
	}
	obj, ok, err := w.informer.GetStore().GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
	}
	return obj.(*corev1.Secret), nil
}

// watch returns the watch of namespace/name, started if there is none,
// and marks it used.
func (s *Secrets) watch(namespace, name string) *secretWatch {
	key := namespace + "/" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.watches[key]; ok {
		w.lastUsed = s.cfg.Clock.Now()
		return w
	}
	w := &secretWatch{lastUsed: s.cfg.Clock.Now()}
	w.informer = coreinformers.NewFilteredSecretInformer(s.cfg.Kube, namespace, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
	changed := s.onChange
	notify := func(any) {
		for _, f := range changed {
			f(namespace, name)
		}
	}
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: notify, UpdateFunc: func(_, obj any) { notify(obj) }, DeleteFunc: notify,
	}); err != nil {
		klog.ErrorS(err, "Watching a GitProvider's Secret", "secret", key)
	}
	_ = w.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		w.setErr(err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	ctx, stop := context.WithCancel(s.ctx)
	w.stop = stop
	go w.informer.RunWithContext(ctx)
	s.watches[key] = w
	return w
}

func (w *secretWatch) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.listErr = err
}

func (w *secretWatch) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listErr
}
