package admit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"reverser.dev/reverser/pkg/apis/reverser"
)

func gitProvider(secret, signingKey string) *reverser.GitProvider {
	gp := &reverser.GitProvider{ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: "team"},
		Spec: reverser.GitProviderSpec{URL: "https://git.example/x.git"}}
	if secret != "" {
		gp.Spec.SecretRef = &reverser.LocalObjectReference{Name: secret}
	}
	if signingKey != "" {
		gp.Spec.Signing = &reverser.CommitSigning{SSHKeySecretRef: &reverser.SecretKeyReference{Name: signingKey, Key: "id"}}
	}
	return gp
}

func gitProviderAttrs(gp, old *reverser.GitProvider) admission.Attributes {
	op := admission.Create
	if old != nil {
		op = admission.Update
	}
	return admission.NewAttributesRecord(gp, old, reverser.Kind("GitProvider").WithVersion(""), gp.Namespace, gp.Name,
		reverser.Resource("gitproviders").WithVersion(""), "", op, &metav1.CreateOptions{}, false,
		&user.DefaultInfo{Name: "bob", Groups: []string{"devs"}})
}

// TestAGitProviderUsesOnlySecretsItsWriterMayRead (#27, finding 4): bob
// may write GitProviders but not get Secret db-creds; a GitProvider of his
// naming it, as its credentials or its signing key, is refused by name.
func TestAGitProviderUsesOnlySecretsItsWriterMayRead(t *testing.T) {
	var asked []string
	authz := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		asked = append(asked, a.GetVerb()+" "+a.GetResource()+" "+a.GetNamespace()+"/"+a.GetName())
		if a.GetName() == "git-creds" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	c := NewCredentials(authz)
	require.NoError(t, c.ValidateInitialization())
	validate := func(gp, old *reverser.GitProvider) error {
		return c.Validate(context.Background(), gitProviderAttrs(gp, old), nil)
	}

	assert.NoError(t, validate(gitProvider("", ""), nil), "no Secret named")
	assert.NoError(t, validate(gitProvider("git-creds", ""), nil))
	assert.Equal(t, []string{"get secrets team/git-creds"}, asked)
	for _, gp := range []*reverser.GitProvider{gitProvider("db-creds", ""), gitProvider("git-creds", "db-creds")} {
		err := validate(gp, nil)
		require.Error(t, err)
		assert.True(t, apierrors.IsForbidden(err))
		assert.Contains(t, err.Error(), `user "bob" may not have Reverser use these Secrets: it lacks get secrets team/db-creds`)
	}

	// An update that changes the spec is checked as a create; one that
	// leaves it alone keeps whoever authorised it.
	held := gitProvider("db-creds", "")
	moved := held.DeepCopy()
	moved.Spec.URL = "https://attacker.example/x.git"
	assert.Error(t, validate(moved, held), "bob may not send db-creds anywhere")
	relabelled := held.DeepCopy()
	relabelled.Labels = map[string]string{"team": "a"}
	assert.NoError(t, validate(relabelled, held))
}
