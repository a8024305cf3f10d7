package mirror

import (
	"strings"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/seal"
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
