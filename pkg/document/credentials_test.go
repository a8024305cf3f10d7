package document

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

const withCredentials = `
apiVersion: example.com/v1
kind: Database
metadata:
  name: orders
  namespace: demo
  annotations:
    token: abc
    owner: shop
spec:
  auth:
    password: hunter2
    user: app
  replicas:
    primary: {password: p1, size: 3}
    replica: {password: p2, size: 1}
  notes: kept
`

var databases = schema.GroupResource{Group: "example.com", Resource: "databases"}

func TestAPolicyDropsTheFieldsNamed(t *testing.T) {
	p := NewPolicy(SkipSecrets, []v1.CredentialField{
		{Path: "spec.auth.password"}, {Path: "spec.replicas.*.password", Action: v1.CredentialDrop}, {Path: "metadata.annotations.token"},
		{Path: "spec.nothing.here"},
	})
	doc, encrypt, err := p.Document(databases, parse(t, withCredentials))
	require.NoError(t, err)
	assert.Empty(t, encrypt, "nothing to encrypt: written in clear")
	assert.Equal(t, `apiVersion: example.com/v1
kind: Database
metadata:
  annotations:
    owner: shop
  name: orders
  namespace: demo
spec:
  auth:
    user: app
  notes: kept
  replicas:
    primary:
      size: 3
    replica:
      size: 1
`, string(doc))
	// A map the drop leaves empty goes too.
	doc, _, err = NewPolicy(SkipSecrets, []v1.CredentialField{{Path: "spec.auth.*"}}).Document(databases, parse(t, withCredentials))
	require.NoError(t, err)
	assert.NotContains(t, string(doc), "auth")
}

func TestAPolicyHandsOnWhatItEncrypts(t *testing.T) {
	p := NewPolicy(SealSecrets, []v1.CredentialField{
		{Path: "spec.auth.password", Action: v1.CredentialEncrypt}, {Path: "spec.replicas.*", Action: v1.CredentialEncrypt},
		// Both dropped and encrypted (two rules): dropped.
		{Path: "spec.notes", Action: v1.CredentialEncrypt}, {Path: "spec.notes"},
	})
	doc, encrypt, err := p.Document(databases, parse(t, withCredentials))
	require.NoError(t, err)
	assert.Equal(t, []string{"password", "replicas"}, encrypt)
	assert.Contains(t, string(doc), "hunter2", "in clear for the sink, which encrypts it")
	assert.NotContains(t, string(doc), "notes")

	// An object without the fields is written in clear.
	_, encrypt, err = p.Document(databases, parse(t, "apiVersion: example.com/v1\nkind: Database\nmetadata: {name: x}\nspec: {size: 1}\n"))
	require.NoError(t, err)
	assert.Empty(t, encrypt)

	// A Secret always encrypts its values.
	_, encrypt, err = p.Document(SecretsResource, parse(t, "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: dg==}\n"))
	require.NoError(t, err)
	assert.Equal(t, []string{"data", "stringData"}, encrypt)
}

func TestPoliciesAreToldApart(t *testing.T) {
	a := NewPolicy(SkipSecrets, []v1.CredentialField{{Path: "spec.a"}, {Path: "spec.b", Action: v1.CredentialEncrypt}})
	b := NewPolicy(SkipSecrets, []v1.CredentialField{{Path: "spec.b", Action: v1.CredentialEncrypt}, {Path: "spec.a"}})
	assert.Equal(t, a.String(), b.String(), "the order of fields does not matter")
	assert.NotEqual(t, a.String(), NewPolicy(SealSecrets, []v1.CredentialField{{Path: "spec.a"}, {Path: "spec.b", Action: v1.CredentialEncrypt}}).String())
	assert.NotEqual(t, a.String(), NewPolicy(SkipSecrets, []v1.CredentialField{{Path: "spec.a"}, {Path: "spec.b"}}).String())
	assert.Equal(t, "skip", Policy{}.String())
}
