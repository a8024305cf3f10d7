// Package testkeys makes the SSH and OpenPGP keys tests sign commits and
// reach Git hosts with.
package testkeys

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
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

// OpenPGP is a fresh OpenPGP key of the committer's identity, armored as
// `gpg --export-secret-keys --armor` and `gpg --export --armor` write
// them; protected by passphrase when it is not empty.
func OpenPGP(t testing.TB, passphrase string) (private, public []byte) {
	t.Helper()
	e, err := openpgp.NewEntity("Reverser", "", "reverser@reverser.dev", nil)
	if err != nil {
		t.Fatal(err)
	}
	armored := func(kind string, write func(io.Writer) error) []byte {
		var buf bytes.Buffer
		w, err := armor.Encode(&buf, kind, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(w); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	public = armored(openpgp.PublicKeyType, func(w io.Writer) error { return e.Serialize(w) })
	if passphrase != "" {
		if err := e.EncryptPrivateKeys([]byte(passphrase), nil); err != nil {
			t.Fatal(err)
		}
	}
	private = armored(openpgp.PrivateKeyType, func(w io.Writer) error { return e.SerializePrivateWithoutSigning(w, nil) })
	return private, public
}

// GnuPG is the environment of a git or gpg command whose own gpg keyring
// (a fresh GNUPGHOME, and HOME beside it) trusts the armored public keys,
// for `git verify-commit` of OpenPGP signatures.
func GnuPG(t testing.TB, public ...[]byte) []string {
	t.Helper()
	home := t.TempDir()
	gnupg := filepath.Join(home, "gnupg")
	if err := os.Mkdir(gnupg, 0o700); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+home, "GNUPGHOME="+gnupg)
	for _, key := range public {
		imp := exec.Command("gpg", "--batch", "--import")
		imp.Stdin, imp.Env = bytes.NewReader(key), env
		if out, err := imp.CombinedOutput(); err != nil {
			t.Fatalf("gpg --import: %v: %s", err, out)
		}
	}
	return env
}
