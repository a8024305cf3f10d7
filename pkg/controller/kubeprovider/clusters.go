// Package kubeprovider owns what the controller holds of each KubeProvider:
// the clients of its cluster (rebuilt when its kubeconfig Secret is
// rotated) and the last discovery through them, the route its audit
// ingress authenticates, and its part of the KubeProvider's status (Ready
// and AuditFactsReceived, handed to providerstatus.Writer). The mirror and
// the source-cluster front ends ask it; neither builds clients of its own.
//
// Clusters.mu guards the map of clusters and each cluster's discovery
// fields; it is never held across an API call. Secrets are read from an
// informer of the controller's own namespace, the only one a
// cluster-scoped KubeProvider may name.
package kubeprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/providerstatus"
	"reverser.dev/reverser/pkg/document"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	listers "reverser.dev/reverser/pkg/generated/listers/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/resolve"
	"reverser.dev/reverser/pkg/stream"
)

// DefaultSecretNamespace is where KubeProviders' Secrets live unless
// configured otherwise.
const DefaultSecretNamespace = "reverser-system"

// discoveryMaxAge is how long one discovery of a cluster serves the
// GitTargets reconciled after it, so that a resync of many GitTargets
// discovers each cluster once, not once per GitTarget.
const discoveryMaxAge = 10 * time.Second

// Config wires Clusters.
type Config struct {
	// Kube reaches the control cluster, for the KubeProviders' Secrets.
	Kube kubernetes.Interface
	// Source is the cluster the controller runs against: what inCluster
	// KubeProviders reach.
	Source *rest.Config
	// SecretNamespace is the only namespace KubeProviders' Secrets
	// (kubeconfigs, audit tokens) are read from: a cluster-scoped object has
	// no namespace of its own, and this one is the controller's.
	SecretNamespace string
	// Factory shares the KubeProvider informer with other controllers.
	Factory informers.SharedInformerFactory
	// Facts says when each provider's last audit fact arrived; nil without
	// an audit ingress.
	Facts *attribution.Index
	// Status writes the KubeProviders' status.
	Status *providerstatus.Writer
	// ClientCertificates is whether the audit ingress verifies client
	// certificates (--audit-client-ca-file): without it no route's
	// clientCertificateCommonNames can match.
	ClientCertificates bool
}

// Reason is a lasting problem of a KubeProvider (a missing Secret, an
// unusable kubeconfig): its Reason names it for a condition and its message
// says what to fix.
type Reason struct{ Reason, Message string }

func (r *Reason) Error() string { return r.Reason + ": " + r.Message }

// Condition returns the reason and message, for the mirror's conditions.
func (r *Reason) Condition() (reason, message string) { return r.Reason, r.Message }

func reasonf(reason, format string, args ...any) *Reason {
	return &Reason{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Cluster is the clients of one KubeProvider's cluster, shared by every
// GitTarget that mirrors it.
type Cluster struct {
	// Fingerprint changes when the credentials it was built from do.
	Fingerprint string
	Dynamic     dynamic.Interface
	Discovery   discovery.DiscoveryInterface
	// Informers are shared by every GitTarget mirroring this cluster.
	Informers *stream.Informers

	// Guarded by Clusters.mu: the last discovery, shared by the GitTargets
	// reconciled within discoveryMaxAge of it, and its outcome for the
	// provider's Ready (zero time when nothing used it yet).
	served       resolve.Served
	servedAt     time.Time
	discoveredAt time.Time
	discoveryErr error
}

// Clusters holds every KubeProvider's cluster.
type Clusters struct {
	cfg           Config
	secretsCache  kubeinformers.SharedInformerFactory
	secrets       corelisters.SecretNamespaceLister
	kubeProviders listers.KubeProviderLister
	synced        []cache.InformerSynced

	mu       sync.Mutex
	clusters map[string]*Cluster // by KubeProvider name
}

// New builds Clusters and registers its informers; Run starts them.
func New(cfg Config) *Clusters {
	if cfg.SecretNamespace == "" {
		cfg.SecretNamespace = DefaultSecretNamespace
	}
	secrets := kubeinformers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, kubeinformers.WithNamespace(cfg.SecretNamespace))
	kps := cfg.Factory.Reverser().V1alpha1().KubeProviders()
	return &Clusters{
		cfg: cfg, secretsCache: secrets, secrets: secrets.Core().V1().Secrets().Lister().Secrets(cfg.SecretNamespace),
		kubeProviders: kps.Lister(), clusters: map[string]*Cluster{},
		synced: []cache.InformerSynced{secrets.Core().V1().Secrets().Informer().HasSynced, kps.Informer().HasSynced},
	}
}

// OnSecretChange calls f when a Secret of the controller's namespace
// changes: a kubeconfig or an audit token may have been rotated.
func (c *Clusters) OnSecretChange(f func()) {
	_, err := c.secretsCache.Core().V1().Secrets().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { f() }, UpdateFunc: func(any, any) { f() }, DeleteFunc: func(any) { f() }})
	utilruntime.Must(err)
}

// Start starts the Secret informer (the KubeProvider informer is the shared
// factory's, started by its owner).
func (c *Clusters) Start(ctx context.Context) { c.secretsCache.Start(ctx.Done()) }

// HasSynced says whether the informers Clusters reads have their initial
// state: before, a Secret would look missing.
func (c *Clusters) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run reports each KubeProvider's status part every few seconds until ctx
// ends.
func (c *Clusters) Run(ctx context.Context) {
	wait.UntilWithContext(ctx, c.report, 5*time.Second)
}

// Config returns the REST config of a KubeProvider's cluster and a
// fingerprint that changes when its kubeconfig Secret is rotated. An
// error's message says what to fix (a *Reason when it lasts).
func (c *Clusters) Config(kp *v1.KubeProvider) (*rest.Config, string, error) {
	if kp.Spec.InCluster {
		return rest.CopyConfig(c.cfg.Source), "in-cluster", nil
	}
	ref := kp.Spec.KubeConfigSecretRef
	if ref == nil {
		return nil, "", reasonf("InvalidKubeProvider", "KubeProvider %s sets neither inCluster nor kubeConfigSecretRef", kp.Name)
	}
	data, err := c.secret("KubeProvider "+kp.Name, ref)
	if err != nil {
		return nil, "", err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, "", reasonf("InvalidKubeconfig", "Secret %s/%s key %q is not a usable kubeconfig: %v", ref.Namespace, ref.Name, ref.Key, err)
	}
	return cfg, Fingerprint(data), nil
}

// Fingerprint is a short digest of parts, to tell when credentials change.
func Fingerprint(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// secret reads one key of a Secret a cluster-scoped KubeProvider names, from
// the informer cache of the controller's own namespace: a reference
// elsewhere is refused, so a KubeProvider cannot make the controller read
// Secrets its author could not.
func (c *Clusters) secret(owner string, ref *v1.SecretKeyReference) ([]byte, error) {
	if ref.Namespace != c.cfg.SecretNamespace {
		return nil, reasonf("SecretNamespaceNotAllowed", "%s names Secret %s/%s: a KubeProvider's Secrets must be in namespace %s, "+
			"the controller's", owner, ref.Namespace, ref.Name, c.cfg.SecretNamespace)
	}
	s, err := c.secrets.Get(ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, reasonf("SecretNotFound", "Secret %s/%s named by %s does not exist: create it or fix the reference", ref.Namespace, ref.Name, owner)
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return nil, reasonf("SecretKeyMissing", "Secret %s/%s named by %s has no key %q", ref.Namespace, ref.Name, owner, ref.Key)
	}
	return v, nil
}

// Cluster returns the clients of a KubeProvider's cluster, rebuilt when its
// kubeconfig Secret is rotated.
func (c *Clusters) Cluster(kp *v1.KubeProvider) (*Cluster, error) {
	cfg, fp, err := c.Config(kp)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	cl, ok := c.clusters[kp.Name]
	c.mu.Unlock()
	if ok && cl.Fingerprint == fp {
		return cl, nil
	}
	if cl, err = newCluster(cfg, fp); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clusters[kp.Name] = cl
	c.mu.Unlock()
	return cl, nil
}

func newCluster(cfg *rest.Config, fp string) (*Cluster, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// ConfigMaps and Secrets are informed on in protobuf (stream.Informers.WithTyped).
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = runtime.ContentTypeProtobuf
	pcfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	proto, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, err
	}
	return &Cluster{Fingerprint: fp, Dynamic: dyn, Discovery: disc, Informers: stream.NewInformers(dyn, clusterWide(kube)).WithTyped(proto)}, nil
}

// clusterWide asks the cluster whether its credentials may list and watch a
// resource in every namespace: then one informer serves every namespace.
func clusterWide(kube kubernetes.Interface) stream.ClusterWide {
	return func(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
		for _, verb := range []string{"list", "watch"} {
			review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, fmt.Errorf("reviewing the source's access to %s: %w", document.GVRString(gvr), err)
			}
			if !review.Status.Allowed {
				return false, nil
			}
		}
		return true, nil
	}
}

// Discover returns what the cluster serves: the last discovery while it is
// younger than discoveryMaxAge and cached says it will do, else a new one.
func (c *Clusters) Discover(cl *Cluster, cached bool) (resolve.Served, error) {
	if served, at := c.last(cl); cached && !at.IsZero() && time.Since(at) < discoveryMaxAge {
		return served, nil
	}
	groups, lists, err := cl.Discovery.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		err = fmt.Errorf("discovering the source's API: %w", err)
	} else {
		err = nil
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	cl.discoveredAt, cl.discoveryErr = now, err
	if err != nil {
		cl.servedAt = time.Time{}
		return resolve.Served{}, err
	}
	cl.served, cl.servedAt = resolve.NewServed(groups, lists), now
	return cl.served, nil
}

// Served is the cluster's last successful discovery, whatever its age, and
// whether there is one.
func (c *Clusters) Served(cl *Cluster) (resolve.Served, bool) {
	served, at := c.last(cl)
	return served, !at.IsZero()
}

func (c *Clusters) last(cl *Cluster) (resolve.Served, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cl.served, cl.servedAt
}

// AuditRoute returns the audit route of a KubeProvider, for the ingress:
// only providers with audit enabled have one. It reads informer caches only,
// so the ingress authenticates without any API call.
func (c *Clusters) AuditRoute(name string) (attribution.Route, bool) {
	kp, err := c.kubeProviders.Get(name)
	if err != nil || !kp.Spec.Audit.Enabled {
		return attribution.Route{}, false
	}
	route := attribution.Route{CommonNames: kp.Spec.Audit.ClientCertificateCommonNames}
	if ref := kp.Spec.Audit.BearerTokenSecretRef; ref != nil {
		token, err := c.secret("KubeProvider "+kp.Name, ref)
		if err != nil {
			klog.V(2).InfoS("No audit token", "kubeProvider", name, "err", err)
		} else {
			route.Token = token
		}
	}
	return route, true
}

// report hands the KubeProvider status writer each provider's Ready (from
// the last discovery through it) and AuditFactsReceived conditions, and
// when its last audit fact arrived; it forgets the clusters of providers
// that no longer exist.
func (c *Clusters) report(context.Context) {
	kps, err := c.kubeProviders.List(labels.Everything())
	if err != nil {
		return
	}
	c.prune(kps)
	for _, kp := range kps {
		c.cfg.Status.Report(kp.Name, "clusters", c.part(kp))
	}
}

// part is what Clusters reports of a KubeProvider: Ready (a kubeconfig
// Secret that is missing or unusable is Ready=False and Stalled=True, else
// whether the last discovery answered), AuditFactsReceived and when the
// last audit fact arrived.
func (c *Clusters) part(kp *v1.KubeProvider) providerstatus.Part {
	var part providerstatus.Part
	var r *Reason
	_, _, err := c.Config(kp)
	if !errors.As(err, &r) {
		r = c.untrustedCertificates(kp)
	}
	if r != nil {
		part.Conditions = []metav1.Condition{condition(v1.ConditionReady, false, r.Reason, r.Message),
			condition(v1.ConditionStalled, true, r.Reason, r.Message)}
	} else {
		part.Conditions, part.Remove = []metav1.Condition{c.ready(kp.Name)}, []string{v1.ConditionStalled}
	}
	last, received := time.Time{}, false
	if c.cfg.Facts != nil {
		last, received = c.cfg.Facts.LastReceived(kp.Name)
	}
	switch {
	case !kp.Spec.Audit.Enabled:
		part.Conditions = append(part.Conditions, condition(v1.ConditionAuditFactsReceived, false, "Disabled",
			"spec.audit.enabled is false: changes are authored by each GitProvider's committer."))
	case received:
		part.Fields = func(s *v1.KubeProviderStatus) { s.LastAuditFactTime = &metav1.Time{Time: last.Truncate(time.Second)} }
		part.Conditions = append(part.Conditions, condition(v1.ConditionAuditFactsReceived, true, "Received",
			"Audit events arrive; changes are authored by the people who made them."))
	default:
		part.Conditions = append(part.Conditions, condition(v1.ConditionAuditFactsReceived, false, "NoAuditEvents",
			fmt.Sprintf("No audit event has arrived on POST %s%s: point kube-apiserver's --audit-webhook-config-file at it, "+
				"with a policy that logs writes at RequestResponse. Until then changes are authored %q.",
				attribution.RoutePrefix, kp.Name, identity.UnresolvedName)))
	}
	return part
}

// untrustedCertificates is the audit route that can authenticate no one:
// it accepts client certificates only, and the ingress verifies none.
func (c *Clusters) untrustedCertificates(kp *v1.KubeProvider) *Reason {
	a := kp.Spec.Audit
	if !a.Enabled || a.BearerTokenSecretRef != nil || len(a.ClientCertificateCommonNames) == 0 || c.cfg.ClientCertificates {
		return nil
	}
	return reasonf("ClientCertificatesNotVerified", "spec.audit.clientCertificateCommonNames needs the controller to verify "+
		"client certificates, and it runs without --audit-client-ca-file: every audit event would be refused. Apply "+
		"artifacts/deploy/overlays/audit-client-certificates, or set spec.audit.bearerTokenSecretRef.")
}

// ready is a KubeProvider's Ready: whether the last discovery through it
// answered.
func (c *Clusters) ready(name string) metav1.Condition {
	c.mu.Lock()
	cl := c.clusters[name]
	var used bool
	var discoveryErr error
	if cl != nil {
		used, discoveryErr = !cl.discoveredAt.IsZero(), cl.discoveryErr
	}
	c.mu.Unlock()
	switch {
	case !used:
		return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionUnknown,
			Reason: "NotUsed", Message: "No GitTarget mirrors this cluster yet."}
	case discoveryErr != nil:
		return condition(v1.ConditionReady, false, "Unreachable", discoveryErr.Error()+": check the cluster's address and the credential's permissions")
	}
	return condition(v1.ConditionReady, true, "Reachable", "The cluster answers discovery.")
}

// prune forgets the clusters of KubeProviders that no longer exist.
func (c *Clusters) prune(kps []*v1.KubeProvider) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.clusters {
		if !slices.ContainsFunc(kps, func(kp *v1.KubeProvider) bool { return kp.Name == name }) {
			delete(c.clusters, name)
		}
	}
}

func condition(typ string, ok bool, reason, message string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message}
}
