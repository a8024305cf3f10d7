package gitprovider

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	"reverser.dev/reverser/pkg/gitrepo"
)

// statusFixture runs the GitProvider controller's reconcile against fake
// clients: alice may get Secret team/git, nobody anything else.
type statusFixture struct {
	t      *testing.T
	c      *Controller
	client *fake.Clientset
	kube   *kubefake.Clientset
	clock  *clocktesting.FakeClock
	asked  atomic.Int32
	answer atomic.Value // error or nil, wrapped
}

type answer struct{ err error }

func newStatusFixture(t *testing.T, gps ...*v1.GitProvider) *statusFixture {
	f := &statusFixture{t: t, clock: clocktesting.NewFakeClock(time.Now())}
	f.answer.Store(answer{})
	f.kube = kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "git"},
		Data: map[string][]byte{"username": []byte("bot"), "password": []byte("first")}})
	f.client = fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(f.client, 0)
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser().GetName() == "alice" && a.GetResource() == "secrets" && a.GetNamespace() == "team" && a.GetName() == "git" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	secrets := New(Config{Kube: f.kube, DataDir: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go secrets.Run(ctx)
	f.c = NewController(ControllerConfig{Reverser: f.client, Factory: factory, Secrets: secrets, Authorizer: authz, Clock: f.clock,
		ProbeEvery: 5 * time.Minute,
		CheckPush: func(context.Context, string, transport.AuthMethod) error {
			f.asked.Add(1)
			return f.answer.Load().(answer).err
		}})
	indexer := factory.Reverser().V1alpha1().GitProviders().Informer().GetIndexer()
	for _, gp := range gps {
		_, err := f.client.ReverserV1alpha1().GitProviders(gp.Namespace).Create(ctx, gp, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, indexer.Add(gp))
	}
	return f
}

// reconcile reconciles gp and returns its status as written.
func (f *statusFixture) reconcile(gp *v1.GitProvider) v1.GitProviderStatus {
	f.t.Helper()
	stored, err := f.client.ReverserV1alpha1().GitProviders(gp.Namespace).Get(context.Background(), gp.Name, metav1.GetOptions{})
	require.NoError(f.t, err)
	require.NoError(f.t, f.c.cfg.Factory.Reverser().V1alpha1().GitProviders().Informer().GetIndexer().Update(stored))
	_, _ = f.c.reconcile(context.Background(), gp.Namespace+"/"+gp.Name)
	stored, err = f.client.ReverserV1alpha1().GitProviders(gp.Namespace).Get(context.Background(), gp.Name, metav1.GetOptions{})
	require.NoError(f.t, err)
	return stored.Status
}

func provided(name, secret string, by string) *v1.GitProvider {
	gp := &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Generation: 1},
		Spec: v1.GitProviderSpec{URL: "https://git.example/r.git"}}
	if secret != "" {
		gp.Spec.SecretRef = &v1.LocalObjectReference{Name: secret}
	}
	if by != "" {
		gp.Status.AuthorizedBy = &v1.Author{Username: by}
	}
	return gp
}

func reasonOf(s v1.GitProviderStatus, typ string) string {
	if c := meta.FindStatusCondition(s.Conditions, typ); c != nil {
		return string(c.Status) + " " + c.Reason
	}
	return "absent"
}

// GitProvider status is written (#28, #29): Ready and GitReachable from the
// remote's answer, Stalled with the reason when a Secret or its author's
// right is missing, each for the generation observed. The remote is not
// asked when the author may not read the Secret: nothing is sent.
func TestGitProviderStatusSaysWhatIsWrong(t *testing.T) {
	ok, unauthorized, missing := provided("ok", "git", "alice"), provided("bobs", "git", "bob"), provided("missing", "absent", "alice")
	f := newStatusFixture(t, ok, unauthorized, missing)

	s := f.reconcile(ok)
	assert.Equal(t, int64(1), s.ObservedGeneration)
	assert.Equal(t, "True Ready", reasonOf(s, v1.ConditionReady))
	assert.Equal(t, "True PushAllowed", reasonOf(s, v1.ConditionGitReachable))
	assert.Equal(t, "absent", reasonOf(s, v1.ConditionStalled))
	assert.Equal(t, "alice", s.AuthorizedBy.Username, "who authorised it is kept")

	asked := f.asked.Load()
	s = f.reconcile(unauthorized)
	assert.Equal(t, "False SecretNotAuthorized", reasonOf(s, v1.ConditionReady))
	assert.Equal(t, "True SecretNotAuthorized", reasonOf(s, v1.ConditionStalled))
	assert.Equal(t, "Unknown NotChecked", reasonOf(s, v1.ConditionGitReachable))
	assert.Equal(t, asked, f.asked.Load(), "the remote is not asked with a Secret its author may not read")

	s = f.reconcile(missing)
	assert.Equal(t, "False SecretNotAuthorized", reasonOf(s, v1.ConditionReady), "alice may not get team/absent either")

	f.answer.Store(answer{fmt.Errorf("%w: https://git.example/r.git: 403", gitrepo.ErrPushRefused)})
	f.clock.Step(5 * time.Minute)
	s = f.reconcile(ok)
	assert.Equal(t, "False PushNotAllowed", reasonOf(s, v1.ConditionReady))
	assert.Equal(t, "True PushNotAllowed", reasonOf(s, v1.ConditionStalled))
	assert.Contains(t, meta.FindStatusCondition(s.Conditions, v1.ConditionReady).Message, "give it credentials that may push")

	f.answer.Store(answer{errors.New("dial tcp: connection refused")})
	f.clock.Step(5 * time.Minute)
	s = f.reconcile(ok)
	assert.Equal(t, "False GitUnreachable", reasonOf(s, v1.ConditionReady))
	assert.Equal(t, "absent", reasonOf(s, v1.ConditionStalled), "an unreachable remote may come back: not stalled")
}

// The remote is asked again only after ProbeEvery (on the fake clock), or
// at once when the generation or the credentials change.
func TestTheRemoteIsAskedAgainOnlyWhenSomethingChangedOrAfterProbeEvery(t *testing.T) {
	gp := provided("ok", "git", "alice")
	f := newStatusFixture(t, gp)
	f.reconcile(gp)
	f.reconcile(gp)
	assert.Equal(t, int32(1), f.asked.Load(), "a resync reuses the answer")
	f.clock.Step(4 * time.Minute)
	f.reconcile(gp)
	assert.Equal(t, int32(1), f.asked.Load())
	f.clock.Step(time.Minute)
	f.reconcile(gp)
	assert.Equal(t, int32(2), f.asked.Load(), "ProbeEvery passed")

	_, err := f.kube.CoreV1().Secrets("team").Update(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "git"},
		Data: map[string][]byte{"username": []byte("bot"), "password": []byte("second")}}, metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, "rotated credentials asked at once", func() bool {
		f.reconcile(gp)
		return f.asked.Load() == 3
	})

	stored, err := f.client.ReverserV1alpha1().GitProviders("team").Get(context.Background(), "ok", metav1.GetOptions{})
	require.NoError(t, err)
	stored.Generation = 2
	_, err = f.client.ReverserV1alpha1().GitProviders("team").Update(context.Background(), stored, metav1.UpdateOptions{})
	require.NoError(t, err)
	s := f.reconcile(gp)
	assert.Equal(t, int32(4), f.asked.Load(), "a new generation is asked at once")
	assert.Equal(t, int64(2), s.ObservedGeneration)
}
