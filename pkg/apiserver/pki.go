package apiserver

import (
	"fmt"
	"net"
	"path/filepath"

	"reverser.dev/reverser/pkg/pki"
)

// Standalone mode keeps its own small PKI in --cert-dir: a CA that signs the
// serving certificate and client certificates. The files persist, so a
// restarted server keeps its identity and old kubeconfigs keep working.
const (
	caName      = "ca"
	servingName = "serving"
	adminName   = "admin"

	// AdminUser is the user of the generated standalone credential.
	AdminUser = "reverser-admin"
	// MastersGroup is the group the standalone authorizer allows everything.
	MastersGroup = "system:masters"
)

// PKI is the material a standalone server needs.
type PKI struct {
	Dir string
	CA  *pki.CA
}

// CAFile is the path of the CA certificate, used as client CA.
func (p *PKI) CAFile() string { return filepath.Join(p.Dir, caName+".crt") }

// ServingFiles are the paths of the serving certificate and key.
func (p *PKI) ServingFiles() (cert, key string) { return p.pair(servingName) }

// AdminFiles are the paths of the admin client certificate and key.
func (p *PKI) AdminFiles() (cert, key string) { return p.pair(adminName) }

func (p *PKI) pair(name string) (cert, key string) {
	return filepath.Join(p.Dir, name+".crt"), filepath.Join(p.Dir, name+".key")
}

// EnsurePKI loads the standalone PKI in dir, creating what is missing.
func EnsurePKI(dir string) (*PKI, error) {
	ca, err := pki.LoadOrCreateCA(dir, caName)
	if err != nil {
		return nil, fmt.Errorf("standalone CA: %w", err)
	}
	if err := pki.EnsurePair(dir, servingName, func() ([]byte, []byte, error) {
		return ca.IssueServing("reverser-apiserver", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")})
	}); err != nil {
		return nil, err
	}
	if err := pki.EnsurePair(dir, adminName, func() ([]byte, []byte, error) {
		return ca.IssueClient(AdminUser, MastersGroup)
	}); err != nil {
		return nil, err
	}
	return &PKI{Dir: dir, CA: ca}, nil
}
