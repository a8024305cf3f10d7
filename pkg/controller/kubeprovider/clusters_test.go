package kubeprovider

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

func secret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func started(t *testing.T, kube *kubefake.Clientset, kps ...*v1.KubeProvider) *Clusters {
	t.Helper()
	objs := make([]runtime.Object, len(kps))
	for i, kp := range kps {
		objs[i] = kp
	}
	// The simple clientset: the generated one has no apply schema of our types.
	rev := fake.NewSimpleClientset(objs...)
	factory := informers.NewSharedInformerFactory(rev, 0)
	c := New(Config{Kube: kube, Source: &rest.Config{Host: "https://home"}, Factory: factory})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	c.Start(ctx)
	require.True(t, cache.WaitForCacheSync(ctx.Done(), c.HasSynced))
	return c
}

func reason(err error) string {
	var r *Reason
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

// A KubeProvider's kubeconfig is read from the controller's namespace only,
// each problem named for the user to fix, and a rotation changes the
// fingerprint the mirror restarts its streams on.
func TestAKubeconfigIsReadFromTheControllersNamespaceOnly(t *testing.T) {
	kube := kubefake.NewClientset(
		secret(DefaultSecretNamespace, "remote", map[string]string{"kubeconfig": kubeconfig}),
		secret(DefaultSecretNamespace, "broken", map[string]string{"kubeconfig": "{"}),
		secret("team-a", "theirs", map[string]string{"kubeconfig": kubeconfig}),
	)
	c := started(t, kube)
	provider := func(ns, name, key string) *v1.KubeProvider {
		return &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "p"},
			Spec: v1.KubeProviderSpec{KubeConfigSecretRef: &v1.SecretKeyReference{Namespace: ns, Name: name, Key: key}}}
	}

	cfg, fp, err := c.Config(&v1.KubeProvider{Spec: v1.KubeProviderSpec{InCluster: true}})
	require.NoError(t, err)
	assert.Equal(t, "https://home", cfg.Host)
	assert.Equal(t, "in-cluster", fp)

	for _, tc := range []struct {
		p    *v1.KubeProvider
		want string
	}{
		{&v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "p"}}, "InvalidKubeProvider"},
		{provider("team-a", "theirs", "kubeconfig"), "SecretNamespaceNotAllowed"},
		{provider(DefaultSecretNamespace, "absent", "kubeconfig"), "SecretNotFound"},
		{provider(DefaultSecretNamespace, "remote", "other-key"), "SecretKeyMissing"},
		{provider(DefaultSecretNamespace, "broken", "kubeconfig"), "InvalidKubeconfig"},
	} {
		_, _, err := c.Config(tc.p)
		assert.Equal(t, tc.want, reason(err), "%v", err)
	}

	cfg, fp, err = c.Config(provider(DefaultSecretNamespace, "remote", "kubeconfig"))
	require.NoError(t, err)
	assert.Equal(t, "https://127.0.0.1:6443", cfg.Host)
	rotated := secret(DefaultSecretNamespace, "remote", map[string]string{"kubeconfig": kubeconfig + "# rotated\n"})
	_, err = kube.CoreV1().Secrets(DefaultSecretNamespace).Update(context.Background(), rotated, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) {
			_, now, err := c.Config(provider(DefaultSecretNamespace, "remote", "kubeconfig"))
			return err == nil && now != fp, err
		}), "a rotated kubeconfig changes the fingerprint")
}

// The audit ingress authenticates from caches: a provider without audit
// has no route, and a token named outside the controller's namespace is
// never read, so its route takes no token at all.
func TestAnAuditRouteTakesOnlyATokenOfTheControllersNamespace(t *testing.T) {
	kube := kubefake.NewClientset(
		secret(DefaultSecretNamespace, "audit", map[string]string{"token": "s3cret"}),
		secret("team-a", "audit", map[string]string{"token": "theirs"}),
	)
	audited := func(name, ns string) *v1.KubeProvider {
		return &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.KubeProviderSpec{InCluster: true, Audit: v1.AuditSpec{
			Enabled: true, ClientCertificateCommonNames: []string{"kube-apiserver"},
			BearerTokenSecretRef: &v1.SecretKeyReference{Namespace: ns, Name: "audit", Key: "token"}}}}
	}
	c := started(t, kube, audited("local", DefaultSecretNamespace), audited("elsewhere", "team-a"),
		&v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}, Spec: v1.KubeProviderSpec{InCluster: true}})

	route, ok := c.AuditRoute("local")
	require.True(t, ok)
	assert.Equal(t, "s3cret", string(route.Token))
	assert.Equal(t, []string{"kube-apiserver"}, route.CommonNames)

	route, ok = c.AuditRoute("elsewhere")
	require.True(t, ok)
	assert.Empty(t, route.Token, "a token of another namespace is never read")

	_, ok = c.AuditRoute("quiet")
	assert.False(t, ok, "audit disabled: no route")
	_, ok = c.AuditRoute("absent")
	assert.False(t, ok)
}

// Ready says NotUsed until a discovery went through the provider.
func TestReadyIsNotUsedUntilADiscovery(t *testing.T) {
	c := started(t, kubefake.NewClientset())
	assert.Equal(t, "NotUsed", c.ready("local").Reason)
	cl, err := c.Cluster(&v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1.KubeProviderSpec{InCluster: true}})
	require.NoError(t, err)
	_, ok := c.Served(cl)
	assert.False(t, ok)
	c.mu.Lock()
	cl.discoveredAt, cl.discoveryErr = time.Now(), errors.New("connection refused")
	c.mu.Unlock()
	r := c.ready("local")
	assert.Equal(t, "Unreachable", r.Reason)
	assert.Contains(t, r.Message, "connection refused")
	c.prune(nil)
	assert.Equal(t, "NotUsed", c.ready("local").Reason, "a deleted provider's clients are forgotten")
}

// A KubeProvider whose kubeconfig Secret is missing, unusable or in a
// refused namespace says so (#29): Ready=False and Stalled=True with the
// reason, not Unknown NotUsed; fixed, Stalled goes and Ready waits for a
// discovery.
func TestABrokenKubeconfigIsReadyFalseAndStalled(t *testing.T) {
	kube := kubefake.NewClientset(secret(DefaultSecretNamespace, "broken", map[string]string{"kubeconfig": "{"}))
	c := started(t, kube)
	ref := func(ns, name string) *v1.KubeProvider {
		return &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "remote"},
			Spec: v1.KubeProviderSpec{KubeConfigSecretRef: &v1.SecretKeyReference{Namespace: ns, Name: name, Key: "kubeconfig"}}}
	}
	for kp, want := range map[*v1.KubeProvider]string{
		ref(DefaultSecretNamespace, "absent"): "SecretNotFound",
		ref(DefaultSecretNamespace, "broken"): "InvalidKubeconfig",
		ref("team-a", "theirs"):               "SecretNamespaceNotAllowed",
	} {
		part := c.part(kp)
		ready, stalled := meta.FindStatusCondition(part.Conditions, v1.ConditionReady), meta.FindStatusCondition(part.Conditions, v1.ConditionStalled)
		require.NotNil(t, ready)
		assert.Equal(t, metav1.ConditionFalse, ready.Status, want)
		assert.Equal(t, want, ready.Reason)
		require.NotNil(t, stalled, want)
		assert.Equal(t, metav1.ConditionTrue, stalled.Status)
		assert.Equal(t, want, stalled.Reason)
	}
	part := c.part(&v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1.KubeProviderSpec{InCluster: true}})
	assert.Equal(t, "NotUsed", meta.FindStatusCondition(part.Conditions, v1.ConditionReady).Reason)
	assert.Nil(t, meta.FindStatusCondition(part.Conditions, v1.ConditionStalled))
	assert.Contains(t, part.Remove, v1.ConditionStalled, "a fixed provider is no longer stalled")
}

// An audit route that accepts client certificates only, on a controller that
// verifies none, could authenticate no one (#29): the KubeProvider is
// Stalled and says how to fix it, and is not once the controller verifies
// certificates or the route has a token.
func TestCertificateOnlyAuditWithoutAClientCAIsStalled(t *testing.T) {
	c := started(t, kubefake.NewClientset())
	kp := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Spec: v1.KubeProviderSpec{InCluster: true,
		Audit: v1.AuditSpec{Enabled: true, ClientCertificateCommonNames: []string{"kube-apiserver"}}}}
	stalled := meta.FindStatusCondition(c.part(kp).Conditions, v1.ConditionStalled)
	require.NotNil(t, stalled)
	assert.Equal(t, metav1.ConditionTrue, stalled.Status)
	assert.Equal(t, "ClientCertificatesNotVerified", stalled.Reason)
	assert.Contains(t, stalled.Message, "overlays/audit-client-certificates")
	assert.Equal(t, metav1.ConditionFalse, meta.FindStatusCondition(c.part(kp).Conditions, v1.ConditionReady).Status)

	withToken := kp.DeepCopy()
	withToken.Spec.Audit.BearerTokenSecretRef = &v1.SecretKeyReference{Namespace: DefaultSecretNamespace, Name: "audit", Key: "token"}
	assert.Nil(t, meta.FindStatusCondition(c.part(withToken).Conditions, v1.ConditionStalled), "a token authenticates the route")

	c.cfg.ClientCertificates = true
	assert.Nil(t, meta.FindStatusCondition(c.part(kp).Conditions, v1.ConditionStalled), "the controller verifies certificates")
}
