package mirror

import (
	"strings"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/seal"
	"reverser.dev/reverser/pkg/stream"
	"reverser.dev/reverser/pkg/worker"
)

// sealer is what seals the GitTarget's Secrets, with a fingerprint of its
// recipients; nil and "" without spec.encryption, when Secrets are not
// mirrored.
func (c *Controller) sealer(gt *v1.GitTarget) (worker.Sealer, string, error) {
	enc := gt.Spec.Encryption
	if enc == nil {
		return nil, "", nil
	}
	if len(c.cfg.DigestKey) == 0 {
		return nil, "", problemf("DigestKeyMissing", "the controller could not read or create the Secret holding its digest key for sealed Secrets "+
			"(--sops-digest-key-secret; its log says why): fix that and restart it")
	}
	s, err := seal.New(enc.SOPS.AgeRecipients, c.cfg.DigestKey, gt.Namespace+"/"+gt.Name)
	if err != nil {
		return nil, "", problemf("EncryptionInvalid", "spec.encryption.sops: %v: fix the recipients", err)
	}
	return s, "sops:" + strings.Join(s.Recipients(), ","), nil
}

// unencrypted refuses rules that encrypt fields for a GitTarget without
// spec.encryption: their objects would have to be written in clear.
func unencrypted(gt *v1.GitTarget, rules []v1.ResourceRule) *problem {
	if gt.Spec.Encryption != nil {
		return nil
	}
	for _, r := range rules {
		for _, f := range r.CredentialFields {
			if f.Action == v1.CredentialEncrypt {
				return problemf("EncryptionNotConfigured", "credential field %q is to be encrypted, and GitTarget %s/%s has no spec.encryption: "+
					"set spec.encryption.sops.ageRecipients on the GitTarget, or make the field's action Drop", f.Path, gt.Namespace, gt.Name)
			}
		}
	}
	return nil
}

// restreamCredentials returns the credential policy of each scope, and
// stops the target's streams whose policy changed, or that seal when what
// they seal to changed: before the worker learns the new policy, so that no
// stream hands on a document under the old one afterwards. The streams
// start again with the new policy, and read every object again.
func (c *Controller) restreamCredentials(key string, scopes []document.Scope, credentials map[document.Scope][]v1.CredentialField, sealing bool,
	sealFP string) map[document.Scope]document.Policy {
	secrets := document.SkipSecrets
	if sealing {
		secrets = document.SealSecrets
	}
	policies := map[document.Scope]document.Policy{}
	for _, scope := range scopes {
		policies[scope] = document.NewPolicy(secrets, credentials[scope])
	}
	var stale []*stream.Stream
	c.mu.Lock()
	if m := c.mirrors[key]; m != nil {
		resealed := m.sealFP != sealFP
		m.sealFP = sealFP
		for scope, s := range m.streams {
			p, kept := policies[scope]
			seals := scope.GVR.GroupResource() == document.SecretsResource || len(p.Encrypt) > 0
			if kept && (m.policies[scope] != p.String() || resealed && seals) {
				stale = append(stale, s)
				delete(m.streams, scope)
				delete(m.policies, scope)
			}
		}
	}
	c.mu.Unlock()
	for _, s := range stale {
		s.Stop()
	}
	return policies
}
