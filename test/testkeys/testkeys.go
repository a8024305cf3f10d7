// Package testkeys makes the SSH keys tests sign commits and reach Git
// hosts with.
package testkeys

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"testing"

	"golang.org/x/crypto/ssh"
)

// SSH is a fresh ed25519 key: the private key in OpenSSH form, as
// ssh-keygen writes it, and its public half.
func SSH(t testing.TB) (private []byte, public ssh.PublicKey) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	public, err = ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), public
}
