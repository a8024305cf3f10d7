package gitrepo

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// OpenPGPSigner signs commits with an OpenPGP key, as `git commit -S` does
// with gpg.format=openpgp: an armored detached signature, which `git
// verify-commit` checks with gpg.
type OpenPGPSigner struct {
	entity *openpgp.Entity
}

// NewOpenPGPSigner reads an armored OpenPGP private key (`gpg
// --export-secret-keys --armor`), decrypting it with passphrase when it is
// protected. The first key of the ring that can sign is used.
func NewOpenPGPSigner(armored, passphrase []byte) (*OpenPGPSigner, error) {
	ring, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(armored))
	if err != nil {
		return nil, fmt.Errorf("reading the OpenPGP signing key: %w", err)
	}
	for _, e := range ring {
		if e.PrivateKey == nil {
			continue
		}
		if len(passphrase) > 0 {
			if err := e.DecryptPrivateKeys(passphrase); err != nil {
				return nil, fmt.Errorf("decrypting the OpenPGP signing key: %w", err)
			}
		}
		k, ok := e.SigningKey(time.Now())
		if !ok || k.PrivateKey == nil {
			continue
		}
		if k.PrivateKey.Encrypted {
			return nil, errors.New("the OpenPGP signing key is protected by a passphrase, and none was given")
		}
		return &OpenPGPSigner{entity: e}, nil
	}
	return nil, errors.New("the OpenPGP key ring holds no private key that can sign")
}

// Sign implements Signer.
func (s *OpenPGPSigner) Sign(content []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&buf, s.entity, bytes.NewReader(content), nil); err != nil {
		return nil, fmt.Errorf("signing with the OpenPGP key: %w", err)
	}
	return buf.Bytes(), nil
}
