package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/gitrepo"
	"reverser.dev/reverser/pkg/redact"
	"reverser.dev/reverser/pkg/tenancy"
)

// problem is a condition-ready explanation: a reason and a message that says
// what to fix, which condition reports it, and whether it may pass by
// itself (an unreachable server) or is a fact that stops the mirror (a
// missing provider, a withdrawn loan or right).
type problem struct {
	reason, message string
	area            area
	transient       bool
}

// area is the condition a problem is reported in.
type area int

const (
	areaSource area = iota // SourceReachable
	areaGit                // GitReachable
	areaConfig             // Stalled
)

func (p *problem) Error() string { return p.reason + ": " + p.message }

// in moves a problem to another condition.
func (p *problem) in(a area) *problem {
	p.area = a
	return p
}

// problemf is a lasting problem: the mirror stops until it is fixed.
func problemf(reason, format string, args ...any) *problem {
	return &problem{reason: reason, message: fmt.Sprintf(format, args...)}
}

// asProblem keeps a problem an error wraps; any other error is transient,
// with the given reason.
func asProblem(err error, reason string) *problem {
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	return &problem{reason: reason, message: redact.Text(err.Error()), transient: true}
}

// SourceConfig returns the REST config of a KubeProvider's cluster and a
// fingerprint that changes when its kubeconfig Secret is rotated, for the
// other controllers that reach source clusters. An error's message says what
// to fix.
func (c *Controller) SourceConfig(kp *v1.KubeProvider) (*rest.Config, string, error) {
	return c.sourceConfig(kp)
}

// sourceConfig returns the REST config of a KubeProvider's cluster and a
// fingerprint of where it came from: a rotated kubeconfig Secret changes it.
func (c *Controller) sourceConfig(kp *v1.KubeProvider) (*rest.Config, string, error) {
	if kp.Spec.InCluster {
		return rest.CopyConfig(c.cfg.Source), "in-cluster", nil
	}
	ref := kp.Spec.KubeConfigSecretRef
	if ref == nil {
		return nil, "", problemf("InvalidKubeProvider", "KubeProvider %s sets neither inCluster nor kubeConfigSecretRef", kp.Name)
	}
	data, err := c.providerSecret("KubeProvider "+kp.Name, ref)
	if err != nil {
		return nil, "", err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, "", problemf("InvalidKubeconfig", "Secret %s/%s key %q is not a usable kubeconfig: %v", ref.Namespace, ref.Name, ref.Key, err)
	}
	return cfg, fingerprint(data), nil
}

func fingerprint(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// providerSecret reads one key of a Secret a cluster-scoped KubeProvider
// names, from the informer cache of the controller's own namespace: a
// reference elsewhere is refused, so a KubeProvider cannot make the
// controller read Secrets its author could not.
func (c *Controller) providerSecret(owner string, ref *v1.SecretKeyReference) ([]byte, error) {
	if ref.Namespace != c.cfg.SecretNamespace {
		return nil, problemf("SecretNamespaceNotAllowed", "%s names Secret %s/%s: a KubeProvider's Secrets must be in namespace %s, "+
			"the controller's", owner, ref.Namespace, ref.Name, c.cfg.SecretNamespace)
	}
	s, err := c.secrets.Get(ref.Name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, problemf("SecretNotFound", "Secret %s/%s named by %s does not exist: create it or fix the reference", ref.Namespace, ref.Name, owner)
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return nil, problemf("SecretKeyMissing", "Secret %s/%s named by %s has no key %q", ref.Namespace, ref.Name, owner, ref.Key)
	}
	return v, nil
}

// secretsAuthorized asks again whether the GitProvider's status.authorizedBy
// may get every Secret its spec names (feature T4): the controller reads
// them with its own rights, so a right withdrawn from their author stops
// their use within a resync. nil: allowed, or no Secret is named.
func (c *Controller) secretsAuthorized(ctx context.Context, gp *v1.GitProvider) *problem {
	names := tenancy.GitProviderSecrets(gp)
	if len(names) == 0 {
		return nil
	}
	a := gp.Status.AuthorizedBy
	if a == nil {
		return problemf("SecretNotAuthorized", "GitProvider %s names Secrets, but nobody is recorded as having authorised their use: "+
			"re-apply it as a user who may get them", gp.Name).in(areaGit)
	}
	now := time.Now()
	missing, err := tenancy.Missing(ctx, c.cfg.Authorizer, tenancy.Subject(a, now, c.cfg.RecordedGroupsMaxAge),
		tenancy.SecretAccess(gp.Namespace, names...))
	if err != nil {
		return asProblem(err, "SecretCheckFailed")
	}
	if len(missing) > 0 {
		return problemf("SecretNotAuthorized", "GitProvider %s: %s%s", gp.Name, tenancy.DeniedSecrets(a.Username, missing),
			tenancy.StaleHint(a, now, c.cfg.RecordedGroupsMaxAge)).in(areaGit)
	}
	return nil
}

// gitAuth builds the credentials a GitProvider's Secret holds: username and
// password (or token) for HTTP(S), identity and known_hosts for SSH. The
// fingerprint changes when the Secret is rotated.
func (c *Controller) gitAuth(ctx context.Context, gp *v1.GitProvider) (transport.AuthMethod, string, error) {
	auth, s, err := c.gitAuthFrom(ctx, gp)
	if err != nil || s == nil {
		return auth, "", err
	}
	return auth, fingerprint(s.Data["username"], s.Data["password"], s.Data["identity"], s.Data["known_hosts"]), nil
}

func (c *Controller) gitAuthFrom(ctx context.Context, gp *v1.GitProvider) (transport.AuthMethod, *corev1.Secret, error) {
	if gp.Spec.SecretRef == nil {
		return nil, nil, nil
	}
	s, err := c.cfg.Kube.CoreV1().Secrets(gp.Namespace).Get(ctx, gp.Spec.SecretRef.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil, problemf("SecretNotFound", "Secret %s/%s named by GitProvider %s does not exist", gp.Namespace, gp.Spec.SecretRef.Name, gp.Name)
	case apierrors.IsForbidden(err):
		return nil, nil, problemf("SecretForbidden", "reverser-controller may not read Secret %s/%s: grant it get on secrets",
			gp.Namespace, gp.Spec.SecretRef.Name)
	case err != nil:
		return nil, nil, fmt.Errorf("reading Secret %s/%s: %w", gp.Namespace, gp.Spec.SecretRef.Name, err)
	}
	if id, ok := s.Data["identity"]; ok {
		keys, err := gitssh.NewPublicKeys("git", id, string(s.Data["password"]))
		if err != nil {
			return nil, nil, problemf("InvalidCredentials", "Secret %s/%s key identity is not a usable SSH private key: %v", gp.Namespace, s.Name, err)
		}
		hosts, ok := s.Data["known_hosts"]
		if !ok {
			return nil, nil, problemf("SecretKeyMissing", "Secret %s/%s has an SSH identity but no known_hosts key", gp.Namespace, s.Name)
		}
		file := filepath.Join(c.cfg.DataDir, "known_hosts", gp.Namespace+"_"+gp.Name)
		if err := os.MkdirAll(path.Dir(file), 0o700); err != nil {
			return nil, nil, err
		}
		if err := os.WriteFile(file, hosts, 0o600); err != nil {
			return nil, nil, err
		}
		if keys.HostKeyCallback, err = gitssh.NewKnownHostsCallback(file); err != nil {
			return nil, nil, problemf("InvalidCredentials", "Secret %s/%s key known_hosts cannot be read: %v", gp.Namespace, s.Name, err)
		}
		return keys, s, nil
	}
	user, pass := string(s.Data["username"]), string(s.Data["password"])
	if pass == "" {
		return nil, nil, problemf("SecretKeyMissing", "Secret %s/%s needs keys username and password (or identity and known_hosts for SSH)", gp.Namespace, s.Name)
	}
	if user == "" {
		user = "git" // token-only hosts accept any user name
	}
	return &githttp.BasicAuth{Username: user, Password: pass}, s, nil
}

// signer reads the key a GitProvider's spec.signing names, from the
// GitProvider's own namespace, and a fingerprint that changes when it is
// rotated; nil without spec.signing. A key that is missing or unreadable is
// a problem that stops the mirror: nothing is pushed unsigned.
func (c *Controller) signer(ctx context.Context, gp *v1.GitProvider) (gitrepo.Signer, string, error) {
	if gp.Spec.Signing == nil {
		return nil, "", nil
	}
	ref, openPGP := gp.Spec.Signing.SSHKeySecretRef, gp.Spec.Signing.OpenPGPKeySecretRef != nil
	if openPGP {
		ref = gp.Spec.Signing.OpenPGPKeySecretRef
	}
	if ref == nil {
		return nil, "", problemf("SigningKeyNotFound", "GitProvider %s's spec.signing names no key: set sshKeySecretRef or openPGPKeySecretRef", gp.Name)
	}
	if ref.Namespace != "" && ref.Namespace != gp.Namespace {
		return nil, "", problemf("SigningKeyNamespaceNotAllowed", "GitProvider %s names signing key Secret %s/%s: it must be in the "+
			"GitProvider's namespace %s", gp.Name, ref.Namespace, ref.Name, gp.Namespace)
	}
	s, err := c.cfg.Kube.CoreV1().Secrets(gp.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, "", problemf("SigningKeyNotFound", "Secret %s/%s named by GitProvider %s's spec.signing does not exist: "+
			"create it, or remove spec.signing to push unsigned commits", gp.Namespace, ref.Name, gp.Name)
	case apierrors.IsForbidden(err):
		return nil, "", problemf("SigningKeyForbidden", "reverser-controller may not read Secret %s/%s: grant it get on secrets",
			gp.Namespace, ref.Name)
	case err != nil:
		return nil, "", fmt.Errorf("reading Secret %s/%s: %w", gp.Namespace, ref.Name, err)
	}
	key, ok := s.Data[ref.Key]
	if !ok {
		return nil, "", problemf("SigningKeyNotFound", "Secret %s/%s named by GitProvider %s's spec.signing has no key %q",
			gp.Namespace, ref.Name, gp.Name, ref.Key)
	}
	if openPGP {
		signer, err := gitrepo.NewOpenPGPSigner(key, s.Data["passphrase"])
		if err != nil {
			return nil, "", problemf("InvalidSigningKey", "Secret %s/%s key %q is not a usable OpenPGP private key (%v): "+
				"write one exported by gpg --export-secret-keys --armor, with its passphrase under key \"passphrase\" if it has one",
				gp.Namespace, ref.Name, ref.Key, err)
		}
		return signer, fingerprint(key, s.Data["passphrase"]), nil
	}
	signer, err := gitrepo.NewSSHSigner(key, s.Data["passphrase"])
	if err != nil {
		return nil, "", problemf("InvalidSigningKey", "Secret %s/%s key %q is not a usable OpenSSH private key (%v): "+
			"write one made by ssh-keygen, with its passphrase under key \"passphrase\" if it has one", gp.Namespace, ref.Name, ref.Key, err)
	}
	return signer, fingerprint(key, s.Data["passphrase"]), nil
}

// branchAllowed applies a GitProvider's allowedBranches.
func branchAllowed(gp *v1.GitProvider, branch string) bool {
	for _, pattern := range gp.Spec.AllowedBranches {
		if ok, _ := path.Match(pattern, branch); ok || pattern == "*" {
			return true
		}
	}
	return false
}
