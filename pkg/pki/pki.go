// Package pki issues the certificates Reverser needs when nobody else does:
// the standalone API server's CA and credentials, and the local control
// plane's CAs, serving and client certificates. Keys are ECDSA P-256.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// CA signs certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// LoadOrCreateCA loads <dir>/<name>.crt and .key, creating them when absent,
// so a restarted server keeps its identity.
func LoadOrCreateCA(dir, name string) (*CA, error) {
	ca, err := LoadCA(dir, name)
	if errors.Is(err, os.ErrNotExist) {
		return createCA(dir, name)
	}
	return ca, err
}

// LoadCA loads <dir>/<name>.crt and .key.
func LoadCA(dir, name string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, name+".crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, name+".key"))
	if err != nil {
		return nil, err
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA %s in %s: %w", name, dir, err)
	}
	return ca, nil
}

// ParseCA reads a CA from its PEM certificate and PKCS#8 PEM key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA key is a %T, not a signer", key)
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: signer}, nil
}

func createCA(dir, name string) (*CA, error) {
	certPEM, keyPEM, err := NewCA(name)
	if err != nil {
		return nil, err
	}
	if err := WritePair(dir, name, certPEM, keyPEM); err != nil {
		return nil, err
	}
	return LoadCA(dir, name)
}

// NewCA creates a self-signed CA valid for ten years, as PEM.
func NewCA(name string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CA %s: %w", name, err)
	}
	if keyPEM, err = EncodeKey(key); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// IssueClient issues a client certificate for user in groups: the CN is the
// user name and each group an organization, as kube-apiserver reads them.
func (ca *CA) IssueClient(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(x509.ExtKeyUsageClientAuth, pkix.Name{CommonName: user, Organization: groups}, nil, nil)
}

// IssueServing issues a serving certificate for the given names and addresses.
func (ca *CA) IssueServing(cn string, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(x509.ExtKeyUsageServerAuth, pkix.Name{CommonName: cn}, dnsNames, ips)
}

// Issue signs a new leaf certificate with a fresh key.
func (ca *CA) Issue(usage x509.ExtKeyUsage, subject pkix.Name, dnsNames []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(2, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing certificate for %q: %w", subject.CommonName, err)
	}
	keyPEM, err = EncodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// EnsurePair writes <dir>/<name>.crt and .key from issue unless the
// certificate exists already.
func EnsurePair(dir, name string, issue func() (certPEM, keyPEM []byte, err error)) error {
	if _, err := os.Stat(filepath.Join(dir, name+".crt")); err == nil {
		return nil
	}
	certPEM, keyPEM, err := issue()
	if err != nil {
		return err
	}
	return WritePair(dir, name, certPEM, keyPEM)
}

// WritePair writes <dir>/<name>.crt and <dir>/<name>.key; the key is private
// to the owner. The key is written first, so a present certificate implies
// its key.
func WritePair(dir, name string, certPEM, keyPEM []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s key: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM, 0o644); err != nil {
		return fmt.Errorf("writing %s certificate: %w", name, err)
	}
	return nil
}

// EncodeKey encodes a private key as PKCS#8 PEM.
func EncodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// Credentials are how a kubeconfig user authenticates: a client certificate
// or a bearer token.
type Credentials struct {
	CertPEM, KeyPEM []byte
	Token           string
}

// WriteKubeconfig writes a kubeconfig that reaches server, trusting caPEM.
func WriteKubeconfig(path, server string, caPEM []byte, creds Credentials) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["default"] = &clientcmdapi.AuthInfo{ClientCertificateData: creds.CertPEM, ClientKeyData: creds.KeyPEM, Token: creds.Token}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "default"}
	cfg.CurrentContext = "default"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating kubeconfig directory: %w", err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
