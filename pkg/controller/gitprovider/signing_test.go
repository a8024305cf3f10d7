package gitprovider

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/test/testkeys"
)

// TestSigner: spec.signing's key comes from the GitProvider's namespace
// only; a missing, keyless or unreadable Secret is a problem that stops the
// mirror, never a reason to push unsigned; rotating the key changes the
// fingerprint, which hands the worker the new key.
func TestSigner(t *testing.T) {
	key, _ := testkeys.SSH(t)
	secret := func(ns string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "signer"}, Data: data}
	}
	kube := kubefake.NewClientset(
		secret("team", map[string][]byte{"id": key}),
		secret("other", map[string][]byte{"id": key}),
	)
	c := started(t, kube)
	gp := func(ns, secretNS, key string) *v1.GitProvider {
		return &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "repo"}, Spec: v1.GitProviderSpec{
			Signing: &v1.CommitSigning{SSHKeySecretRef: &v1.SecretKeyReference{Namespace: secretNS, Name: "signer", Key: key}}}}
	}
	ctx := context.Background()

	signer, fp, err := c.Signer(ctx, &v1.GitProvider{})
	require.NoError(t, err)
	assert.Nil(t, signer, "no spec.signing: unsigned")
	assert.Empty(t, fp)

	signer, fp, err = c.Signer(ctx, gp("team", "", "id"))
	require.NoError(t, err)
	require.NotNil(t, signer)
	assert.NotEmpty(t, fp)

	for _, tc := range []struct {
		gp     *v1.GitProvider
		reason string
	}{
		{gp("team", "other", "id"), "SigningKeyNamespaceNotAllowed"},
		{gp("nobody", "", "id"), "SigningKeyNotFound"},
		{gp("team", "", "absent"), "SigningKeyNotFound"},
	} {
		_, _, err := c.Signer(ctx, tc.gp)
		var r *Reason
		require.True(t, errors.As(err, &r), "a lasting problem, the mirror stops: %v", err)
		assert.Equal(t, tc.reason, r.Reason)
	}

	_, err = kube.CoreV1().Secrets("team").Update(ctx, secret("team", map[string][]byte{"id": []byte("garbage")}), metav1.UpdateOptions{})
	require.NoError(t, err)
	var r *Reason
	eventually(t, "the garbled key read", func() bool {
		_, _, err = c.Signer(ctx, gp("team", "", "id"))
		return errors.As(err, &r) && r.Reason == "InvalidSigningKey"
	})
	assert.NotContains(t, r.Message, "garbage", "the key's bytes are never quoted")

	rotated, _ := testkeys.SSH(t)
	_, err = kube.CoreV1().Secrets("team").Update(ctx, secret("team", map[string][]byte{"id": rotated}), metav1.UpdateOptions{})
	require.NoError(t, err)
	eventually(t, "a rotated key handed to the worker", func() bool {
		_, rotatedFP, err := c.Signer(ctx, gp("team", "", "id"))
		return err == nil && rotatedFP != fp
	})
}

// An OpenPGP key signs as well, read the same way; an SSH key where an
// OpenPGP one is named is not usable.
func TestOpenPGPSigner(t *testing.T) {
	private, _ := testkeys.OpenPGP(t, "passphrase")
	sshKey, _ := testkeys.SSH(t)
	kube := kubefake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "signer"},
		Data: map[string][]byte{"pgp": private, "passphrase": []byte("passphrase"), "ssh": sshKey}})
	c := started(t, kube)
	gp := func(key string) *v1.GitProvider {
		return &v1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "repo"}, Spec: v1.GitProviderSpec{
			Signing: &v1.CommitSigning{OpenPGPKeySecretRef: &v1.SecretKeyReference{Name: "signer", Key: key}}}}
	}
	signer, fp, err := c.Signer(context.Background(), gp("pgp"))
	require.NoError(t, err)
	assert.NotNil(t, signer)
	assert.NotEmpty(t, fp)
	_, _, err = c.Signer(context.Background(), gp("ssh"))
	var r *Reason
	require.True(t, errors.As(err, &r))
	assert.Equal(t, "InvalidSigningKey", r.Reason)
	assert.Contains(t, r.Message, "not a usable OpenPGP private key")
}
