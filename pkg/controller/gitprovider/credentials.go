package gitprovider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/kubeprovider"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/tenancy"
)

// Auth builds the credentials a GitProvider's Secret holds: username and
// password (or token) for HTTP(S), identity and known_hosts for SSH; nil
// without spec.secretRef. The fingerprint changes when the Secret is
// rotated.
func (s *Secrets) Auth(ctx context.Context, gp *v1.GitProvider) (transport.AuthMethod, string, error) {
	if gp.Spec.SecretRef == nil {
		return nil, "", nil
	}
	name := gp.Spec.SecretRef.Name
	sec, err := s.Get(ctx, gp.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", reasonf("SecretNotFound", "Secret %s/%s named by GitProvider %s does not exist", gp.Namespace, name, gp.Name)
	case apierrors.IsForbidden(err):
		return nil, "", reasonf("SecretForbidden", "reverser-controller may not list and watch Secret %s/%s: bind ClusterRole "+
			"reverser-controller-secrets to it in namespace %s", gp.Namespace, name, gp.Namespace)
	case err != nil:
		return nil, "", fmt.Errorf("reading Secret %s/%s: %w", gp.Namespace, name, err)
	}
	auth, err := s.auth(gp, sec)
	if err != nil {
		return nil, "", err
	}
	d := sec.Data
	return auth, kubeprovider.Fingerprint(d["username"], d["password"], d["identity"], d["known_hosts"]), nil
}

func (s *Secrets) auth(gp *v1.GitProvider, sec *corev1.Secret) (transport.AuthMethod, error) {
	if id, ok := sec.Data["identity"]; ok {
		keys, err := gitssh.NewPublicKeys("git", id, string(sec.Data["password"]))
		if err != nil {
			return nil, reasonf("InvalidCredentials", "Secret %s/%s key identity is not a usable SSH private key: %v", gp.Namespace, sec.Name, err)
		}
		hosts, ok := sec.Data["known_hosts"]
		if !ok {
			return nil, reasonf("SecretKeyMissing", "Secret %s/%s has an SSH identity but no known_hosts key", gp.Namespace, sec.Name)
		}
		file := filepath.Join(s.cfg.DataDir, "known_hosts", gp.Namespace+"_"+gp.Name)
		if err := writeWhole(file, hosts); err != nil {
			return nil, err
		}
		if keys.HostKeyCallback, err = gitssh.NewKnownHostsCallback(file); err != nil {
			return nil, reasonf("InvalidCredentials", "Secret %s/%s key known_hosts cannot be read: %v", gp.Namespace, sec.Name, err)
		}
		return keys, nil
	}
	user, pass := string(sec.Data["username"]), string(sec.Data["password"])
	if pass == "" {
		return nil, reasonf("SecretKeyMissing", "Secret %s/%s needs keys username and password (or identity and known_hosts for SSH)",
			gp.Namespace, sec.Name)
	}
	if user == "" {
		user = "git" // token-only hosts accept any user name
	}
	return &githttp.BasicAuth{Username: user, Password: pass}, nil
}

// Signer reads the key a GitProvider's spec.signing names, from the
// GitProvider's own namespace, and a fingerprint that changes when it is
// rotated; nil without spec.signing. A key that is missing or unreadable is
// a problem that stops the mirror: nothing is pushed unsigned.
func (s *Secrets) Signer(ctx context.Context, gp *v1.GitProvider) (gitrepo.Signer, string, error) {
	if gp.Spec.Signing == nil {
		return nil, "", nil
	}
	ref, openPGP := gp.Spec.Signing.SSHKeySecretRef, gp.Spec.Signing.OpenPGPKeySecretRef != nil
	if openPGP {
		ref = gp.Spec.Signing.OpenPGPKeySecretRef
	}
	if ref == nil {
		return nil, "", reasonf("SigningKeyNotFound", "GitProvider %s's spec.signing names no key: set sshKeySecretRef or openPGPKeySecretRef", gp.Name)
	}
	if ref.Namespace != "" && ref.Namespace != gp.Namespace {
		return nil, "", reasonf("SigningKeyNamespaceNotAllowed", "GitProvider %s names signing key Secret %s/%s: it must be in the "+
			"GitProvider's namespace %s", gp.Name, ref.Namespace, ref.Name, gp.Namespace)
	}
	sec, err := s.Get(ctx, gp.Namespace, ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", reasonf("SigningKeyNotFound", "Secret %s/%s named by GitProvider %s's spec.signing does not exist: "+
			"create it, or remove spec.signing to push unsigned commits", gp.Namespace, ref.Name, gp.Name)
	case apierrors.IsForbidden(err):
		return nil, "", reasonf("SigningKeyForbidden", "reverser-controller may not list and watch Secret %s/%s: bind ClusterRole "+
			"reverser-controller-secrets to it in namespace %s", gp.Namespace, ref.Name, gp.Namespace)
	case err != nil:
		return nil, "", fmt.Errorf("reading Secret %s/%s: %w", gp.Namespace, ref.Name, err)
	}
	key, ok := sec.Data[ref.Key]
	if !ok {
		return nil, "", reasonf("SigningKeyNotFound", "Secret %s/%s named by GitProvider %s's spec.signing has no key %q",
			gp.Namespace, ref.Name, gp.Name, ref.Key)
	}
	fp := kubeprovider.Fingerprint(key, sec.Data["passphrase"])
	if openPGP {
		signer, err := gitrepo.NewOpenPGPSigner(key, sec.Data["passphrase"])
		if err != nil {
			return nil, "", reasonf("InvalidSigningKey", "Secret %s/%s key %q is not a usable OpenPGP private key (%v): "+
				"write one exported by gpg --export-secret-keys --armor, with its passphrase under key \"passphrase\" if it has one",
				gp.Namespace, ref.Name, ref.Key, err)
		}
		return signer, fp, nil
	}
	signer, err := gitrepo.NewSSHSigner(key, sec.Data["passphrase"])
	if err != nil {
		return nil, "", reasonf("InvalidSigningKey", "Secret %s/%s key %q is not a usable OpenSSH private key (%v): "+
			"write one made by ssh-keygen, with its passphrase under key \"passphrase\" if it has one", gp.Namespace, ref.Name, ref.Key, err)
	}
	return signer, fp, nil
}

// Authorized asks again whether the GitProvider's status.authorizedBy may
// get every Secret its spec names (feature T4): the controller reads them
// with its own rights, so a right withdrawn from their author stops their
// use within a resync. nil: allowed, or no Secret is named; a *Reason
// (SecretNotAuthorized) when refused; any other error when the question
// could not be answered.
func Authorized(ctx context.Context, authz authorizer.Authorizer, gp *v1.GitProvider, now time.Time, groupsMaxAge time.Duration) error {
	names := tenancy.GitProviderSecrets(gp)
	if len(names) == 0 {
		return nil
	}
	a := gp.Status.AuthorizedBy
	if a == nil {
		return reasonf("SecretNotAuthorized", "GitProvider %s names Secrets, but nobody is recorded as having authorised their use: "+
			"re-apply it as a user who may get them", gp.Name)
	}
	missing, err := tenancy.Missing(ctx, authz, tenancy.Subject(a, now, groupsMaxAge), tenancy.SecretAccess(gp.Namespace, names...))
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return reasonf("SecretNotAuthorized", "GitProvider %s: %s%s", gp.Name, tenancy.DeniedSecrets(a.Username, missing),
			tenancy.StaleHint(a, now, groupsMaxAge))
	}
	return nil
}

// writeWhole replaces file with data at once (a new file renamed over it):
// the mirror and the GitProvider controller build credentials at the same
// time, and a reader must never parse a file another is rewriting.
func writeWhole(file string, data []byte) error {
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone already once renamed
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
