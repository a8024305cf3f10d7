package gitprovider

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/testkeys"
)

func started(t *testing.T, kube *kubefake.Clientset) *Secrets {
	t.Helper()
	s := New(Config{Kube: kube, DataDir: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Run(ctx)
	return s
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.NoError(t, wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }), what)
}

func provider(secret string) *v1.GitProvider {
	return &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "repo"},
		Spec: v1.GitProviderSpec{URL: "https://git.example/r.git", SecretRef: &v1.LocalObjectReference{Name: secret}}}
}

// Credentials are read through a watch of the named Secret alone: the
// controller lists no other Secret of the namespace, and a rotation is
// heard at once, with a new fingerprint.
func TestCredentialsAreWatchedByNameAndARotationIsHeard(t *testing.T) {
	kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "git"},
		Data: map[string][]byte{"username": []byte("bot"), "password": []byte("first")}})
	var mu sync.Mutex
	var selectors []string
	kube.PrependReactor("list", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		selectors = append(selectors, a.(clienttesting.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	s := started(t, kube)
	changed := make(chan string, 10)
	s.OnChange(func(ns, name string) { changed <- ns + "/" + name })

	auth, fp, err := s.Auth(context.Background(), provider("git"))
	require.NoError(t, err)
	assert.Equal(t, &githttp.BasicAuth{Username: "bot", Password: "first"}, auth)
	mu.Lock()
	assert.Equal(t, []string{"metadata.name=git"}, selectors, "only the named Secret is listed")
	mu.Unlock()
	assert.Equal(t, "team/git", <-changed, "its first listing")

	_, err = kube.CoreV1().Secrets("team").Update(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "git"},
		Data: map[string][]byte{"username": []byte("bot"), "password": []byte("second")}}, metav1.UpdateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "team/git", <-changed, "a rotation is heard")
	auth, rotated, err := s.Auth(context.Background(), provider("git"))
	require.NoError(t, err)
	assert.Equal(t, "second", auth.(*githttp.BasicAuth).Password)
	assert.NotEqual(t, fp, rotated)
	assert.Equal(t, 1, s.Watched(), "one watch per Secret, however often it is read")
}

// A Secret the controller may not list fails at once, naming the binding
// that fixes it, rather than after the sync timeout.
func TestASecretTheControllerMayNotListIsForbiddenAtOnce(t *testing.T) {
	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), "", errors.New("RBAC: no"))
	})
	s := New(Config{Kube: kube, SyncTimeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _, err := s.Auth(ctx, provider("git"))
	var r *Reason
	require.True(t, errors.As(err, &r), "%v", err)
	assert.Equal(t, "SecretForbidden", r.Reason)
	assert.Contains(t, r.Message, "reverser-controller-secrets")
	require.NoError(t, ctx.Err(), "answered before the deadline")
}

// Missing Secrets and keys are lasting problems, each naming its fix.
func TestCredentialProblemsAreNamed(t *testing.T) {
	kube := kubefake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "nopass"}, Data: map[string][]byte{"username": []byte("bot")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "nohosts"}, Data: map[string][]byte{"identity": []byte("x")}},
	)
	s := started(t, kube)
	for name, want := range map[string]string{"absent": "SecretNotFound", "nopass": "SecretKeyMissing", "nohosts": "InvalidCredentials"} {
		_, _, err := s.Auth(context.Background(), provider(name))
		var r *Reason
		require.True(t, errors.As(err, &r), "%s: %v", name, err)
		assert.Equal(t, want, r.Reason, name)
	}
	auth, fp, err := s.Auth(context.Background(), &v1.GitProvider{})
	require.NoError(t, err)
	assert.Nil(t, auth, "no secretRef: anonymous")
	assert.Empty(t, fp)
}

// A watch nobody has read from for Idle is stopped; one in use is kept.
func TestIdleWatchesAreStopped(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	kube := kubefake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "a"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "b"}},
	)
	s := New(Config{Kube: kube, Idle: 10 * time.Minute, Clock: clock})
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		_, err := s.Get(ctx, "team", name)
		require.NoError(t, err)
	}
	clock.Step(6 * time.Minute)
	_, err := s.Get(ctx, "team", "a")
	require.NoError(t, err)
	s.Prune()
	assert.Equal(t, 2, s.Watched(), "neither idle for 10m yet")
	clock.Step(5 * time.Minute)
	s.Prune()
	assert.Equal(t, 1, s.Watched(), "b idle for 11m: stopped; a read 5m ago: kept")
	clock.Step(5 * time.Minute)
	s.Prune()
	assert.Equal(t, 0, s.Watched())
}

// The known_hosts an SSH credential is checked with is read whole by every
// reader, however many build credentials at once: the mirror and the
// GitProvider controller both do. Written in place, a reader could parse a
// file another had just truncated and refuse the right host ("key is
// unknown").
func TestKnownHostsAreNeverReadHalfWritten(t *testing.T) {
	identity, _ := testkeys.SSH(t)
	_, hostKey := testkeys.SSH(t)
	known := "[127.0.0.1]:2222 " + string(ssh.MarshalAuthorizedKey(hostKey))
	kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "ssh"},
		Data: map[string][]byte{"identity": identity, "known_hosts": []byte(known)}})
	s := started(t, kube)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2222}
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			auth, _, err := s.Auth(context.Background(), provider("ssh"))
			if err != nil {
				errs <- err
				return
			}
			errs <- auth.(*gitssh.PublicKeys).HostKeyCallback("127.0.0.1:2222", addr, hostKey)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "the known host is accepted by every reader")
	}
}
