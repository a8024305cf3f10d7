package mirror

import (
	"errors"
	"testing"

	"filippo.io/age"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func encrypted(recipients ...string) *v1.GitTarget {
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "site"}}
	if recipients != nil {
		gt.Spec.Encryption = &v1.EncryptionSpec{SOPS: v1.SOPSEncryption{AgeRecipients: recipients}}
	}
	return gt
}

func TestSealer(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	require.NoError(t, err)
	r := id.Recipient().String()
	c := &Controller{cfg: Config{DigestKey: []byte("0123456789abcdef0123456789abcdef")}}

	s, fp, err := c.sealer(encrypted())
	assert.NoError(t, err)
	assert.Nil(t, s, "without spec.encryption nothing is sealed")
	assert.Empty(t, fp)

	s, fp, err = c.sealer(encrypted(r))
	require.NoError(t, err)
	assert.NotNil(t, s)
	assert.Equal(t, "sops:"+r, fp, "the fingerprint changes with the recipients")

	var p *problem
	_, _, err = c.sealer(encrypted("age1qqq"))
	require.True(t, errors.As(err, &p))
	assert.Equal(t, "EncryptionInvalid", p.reason)

	_, _, err = (&Controller{}).sealer(encrypted(r))
	require.True(t, errors.As(err, &p))
	assert.Equal(t, "DigestKeyMissing", p.reason)
	assert.Contains(t, p.message, "--sops-digest-key-secret")
}

func TestARuleThatEncryptsNeedsEncryption(t *testing.T) {
	rules := []v1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
		CredentialFields: []v1.CredentialField{{Path: "data.password"}, {Path: "data.token", Action: v1.CredentialEncrypt}}}}
	p := unencrypted(encrypted(), rules)
	require.NotNil(t, p)
	assert.Equal(t, "EncryptionNotConfigured", p.reason)
	assert.Contains(t, p.message, `credential field "data.token"`)
	assert.Contains(t, p.message, "set spec.encryption.sops.ageRecipients")
	assert.Nil(t, unencrypted(encrypted("age1x"), rules), "with encryption")
	assert.Nil(t, unencrypted(encrypted(), []v1.ResourceRule{{CredentialFields: []v1.CredentialField{{Path: "data.password"}}}}),
		"Drop needs nothing")
}
