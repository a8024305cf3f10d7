package apiserver

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

// Standalone mode keeps its own small PKI: a CA that signs the serving
// certificate and client certificates. Files persist in the PKI directory, so
// a restarted server keeps its identity and old kubeconfigs keep working.
const (
	caCertFile      = "ca.crt"
	caKeyFile       = "ca.key"
	servingCertFile = "serving.crt"
	servingKeyFile  = "serving.key"
	adminCertFile   = "admin.crt"
	adminKeyFile    = "admin.key"

	// AdminUser is the user of the generated standalone credential.
	AdminUser = "reverser-admin"
	// MastersGroup is the group the standalone authorizer allows everything.
	MastersGroup = "system:masters"
)

// CA signs certificates for standalone mode.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// PKI is the material a standalone server needs.
type PKI struct {
	Dir string
	CA  *CA
}

// CAFile is the path of the CA certificate, used as client CA.
func (p *PKI) CAFile() string { return filepath.Join(p.Dir, caCertFile) }

// ServingFiles are the paths of the serving certificate and key.
func (p *PKI) ServingFiles() (cert, key string) {
	return filepath.Join(p.Dir, servingCertFile), filepath.Join(p.Dir, servingKeyFile)
}

// AdminFiles are the paths of the admin client certificate and key.
func (p *PKI) AdminFiles() (cert, key string) {
	return filepath.Join(p.Dir, adminCertFile), filepath.Join(p.Dir, adminKeyFile)
}

// EnsurePKI loads the PKI in dir, creating what is missing.
func EnsurePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating PKI directory: %w", err)
	}
	ca, err := loadCA(dir)
	if errors.Is(err, os.ErrNotExist) {
		ca, err = newCA(dir)
	}
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, CA: ca}
	cert, key := p.ServingFiles()
	if err := ensureSigned(ca, cert, key, func() ([]byte, []byte, error) {
		return ca.Issue(x509.ExtKeyUsageServerAuth, pkix.Name{CommonName: "reverser-apiserver"},
			[]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")})
	}); err != nil {
		return nil, err
	}
	cert, key = p.AdminFiles()
	if err := ensureSigned(ca, cert, key, func() ([]byte, []byte, error) {
		return ca.IssueClient(AdminUser, MastersGroup)
	}); err != nil {
		return nil, err
	}
	return p, nil
}

func ensureSigned(ca *CA, certPath, keyPath string, issue func() ([]byte, []byte, error)) error {
	if _, err := os.Stat(certPath); err == nil {
		return nil
	}
	certPEM, keyPEM, err := issue()
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", keyPath, err)
	}
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", certPath, err)
	}
	return nil
}

func newCA(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "reverser-standalone-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, caKeyFile), keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("writing CA key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, caCertFile), certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("writing CA certificate: %w", err)
	}
	return loadCA(dir)
}

func loadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("PKI in %s: CA certificate or key is not PEM", dir)
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

// IssueClient issues a client certificate for user in groups: the CN is the
// user name and each group an organization, as kube-apiserver reads them.
func (ca *CA) IssueClient(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	return ca.Issue(x509.ExtKeyUsageClientAuth, pkix.Name{CommonName: user, Organization: groups}, nil, nil)
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
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return n
}

// WriteKubeconfig writes a kubeconfig that reaches server as the user of the
// given client certificate.
func WriteKubeconfig(path, server string, caPEM, certPEM, keyPEM []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["reverser"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["reverser"] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts["reverser"] = &clientcmdapi.Context{Cluster: "reverser", AuthInfo: "reverser"}
	cfg.CurrentContext = "reverser"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating kubeconfig directory: %w", err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
