package gitrepo

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Signer signs commits.
type Signer interface {
	// Sign returns the armored signature of a commit's content (the commit
	// object without its signature header), which Git stores in the
	// commit's gpgsig header.
	Sign(content []byte) ([]byte, error)
}

// SSHSigner signs commits with an SSH key, as `git commit -S` does with
// gpg.format=ssh: an OpenSSH signature (PROTOCOL.sshsig) in namespace
// "git", which `git verify-commit` checks against gpg.ssh.allowedSignersFile.
type SSHSigner struct {
	signer ssh.Signer
}

// NewSSHSigner reads an OpenSSH (or PEM) private key, with passphrase when
// it is encrypted.
func NewSSHSigner(privateKey, passphrase []byte) (*SSHSigner, error) {
	var s ssh.Signer
	var err error
	if len(passphrase) > 0 {
		s, err = ssh.ParsePrivateKeyWithPassphrase(privateKey, passphrase)
	} else {
		s, err = ssh.ParsePrivateKey(privateKey)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the SSH signing key: %w", err)
	}
	return &SSHSigner{signer: s}, nil
}

// PublicKey is the signing key's public half in authorized_keys form, for
// allowed-signers files.
func (s *SSHSigner) PublicKey() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.signer.PublicKey())))
}

const (
	sshsigMagic     = "SSHSIG"
	sshsigNamespace = "git"
	sshsigHash      = "sha512"
)

// Sign implements Signer.
func (s *SSHSigner) Sign(content []byte) ([]byte, error) {
	digest := sha512.Sum512(content)
	// What is signed: the magic, namespace, reserved, hash algorithm and
	// the message's hash.
	var signed bytes.Buffer
	signed.WriteString(sshsigMagic)
	writeString(&signed, []byte(sshsigNamespace))
	writeString(&signed, nil)
	writeString(&signed, []byte(sshsigHash))
	writeString(&signed, digest[:])

	var sig *ssh.Signature
	var err error
	if as, ok := s.signer.(ssh.AlgorithmSigner); ok && s.signer.PublicKey().Type() == ssh.KeyAlgoRSA {
		// SHA-1 RSA signatures are refused by OpenSSH's verifier.
		sig, err = as.SignWithAlgorithm(rand.Reader, signed.Bytes(), ssh.KeyAlgoRSASHA512)
	} else {
		sig, err = s.signer.Sign(rand.Reader, signed.Bytes())
	}
	if err != nil {
		return nil, fmt.Errorf("signing the commit: %w", err)
	}

	var blob bytes.Buffer
	blob.WriteString(sshsigMagic)
	_ = binary.Write(&blob, binary.BigEndian, uint32(1))
	writeString(&blob, s.signer.PublicKey().Marshal())
	writeString(&blob, []byte(sshsigNamespace))
	writeString(&blob, nil)
	writeString(&blob, []byte(sshsigHash))
	writeString(&blob, ssh.Marshal(sig))

	encoded := base64.StdEncoding.EncodeToString(blob.Bytes())
	var armored bytes.Buffer
	armored.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(encoded) > 70 {
		armored.WriteString(encoded[:70] + "\n")
		encoded = encoded[70:]
	}
	armored.WriteString(encoded + "\n-----END SSH SIGNATURE-----\n")
	return armored.Bytes(), nil
}

// writeString writes an SSH wire-format string: its length, then it.
func writeString(w io.Writer, b []byte) {
	_ = binary.Write(w, binary.BigEndian, uint32(len(b)))
	_, _ = w.Write(b)
}
