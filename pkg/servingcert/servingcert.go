// Package servingcert gives a server running in a cluster a certificate its
// callers trust, without cert-manager or any other component:
//
//   - the CA lives in a Secret of the server's own namespace. The first
//     replica to start creates it; the others, and every restart, read it, so
//     all replicas chain to one CA and a restart does not change what callers
//     trust;
//   - each replica issues its own leaf for the Service's DNS names at start,
//     writes it where its TLS listener reads it, and issues it again before
//     it expires (the listener reloads changed files);
//   - a Bundle keeps the CA in the caBundle of the APIService that routes to
//     the server, so kube-apiserver's aggregator trusts it. It writes only
//     when the field differs, and again when someone overwrites it.
//
// The RBAC this needs: get and create on Secrets in the namespace (get only
// on the CA's name), get and patch on the one APIService.
//
// Only Files holds a lock (its loaded pair); Keep blocks until its context
// ends and is meant for its own goroutine.
package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"reverser.dev/reverser/pkg/pki"
)

// Keys of the CA Secret.
const (
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
)

// LoadOrCreateCA reads the CA from Secret name, creating it when absent.
// When two replicas race to create it, the loser reads the winner's.
func LoadOrCreateCA(ctx context.Context, secrets corev1client.SecretInterface, name string) (*pki.CA, error) {
	for range 3 {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			ca, err := pki.ParseCA(s.Data[CACertKey], s.Data[CAKeyKey])
			if err != nil {
				return nil, fmt.Errorf("CA Secret %s: %w (delete it to have a new CA created)", name, err)
			}
			return ca, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading CA Secret %s: %w", name, err)
		}
		certPEM, keyPEM, err := pki.NewCA(name)
		if err != nil {
			return nil, err
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "reverser"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{CACertKey: certPEM, CAKeyKey: keyPEM},
		}, metav1.CreateOptions{})
		if err == nil {
			klog.InfoS("Created serving CA", "secret", name)
			return pki.ParseCA(certPEM, keyPEM)
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating CA Secret %s: %w", name, err)
		}
	}
	return nil, fmt.Errorf("CA Secret %s: created and deleted again while reading it", name)
}

// ParseRef splits a flag's "namespace/name".
func ParseRef(ref string) (namespace, name string, err error) {
	ns, n, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", fmt.Errorf("%q is not namespace/name", ref)
	}
	return ns, n, nil
}

// ServiceNames are the DNS names a Service is reached by inside a cluster.
func ServiceNames(namespace, name string) []string {
	return []string{name, name + "." + namespace, name + "." + namespace + ".svc", name + "." + namespace + ".svc.cluster.local"}
}

// Leaf is a serving certificate kept in <Dir>/<Name>.crt and .key.
type Leaf struct {
	CA       *pki.CA
	Dir      string
	Name     string
	DNSNames []string
	// Renew is how long before expiry a new leaf is issued.
	Renew time.Duration
}

// Files are the paths the TLS listener reads.
func (l *Leaf) Files() (cert, key string) {
	return filepath.Join(l.Dir, l.Name+".crt"), filepath.Join(l.Dir, l.Name+".key")
}

// Ensure issues the leaf when it is absent, not from this CA, or due for
// renewal at now; it reports whether it wrote a new one.
func (l *Leaf) Ensure(now time.Time) (bool, error) {
	certFile, _ := l.Files()
	if cur, err := os.ReadFile(certFile); err == nil && l.current(cur, now) {
		return false, nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("reading serving certificate: %w", err)
	}
	certPEM, keyPEM, err := l.CA.IssueServing(l.DNSNames[0], l.DNSNames, nil)
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return false, fmt.Errorf("creating %s: %w", l.Dir, err)
	}
	if err := pki.WritePair(l.Dir, l.Name, certPEM, keyPEM); err != nil {
		return false, err
	}
	return true, nil
}

// current tells whether certPEM is signed by the CA, names every DNS name
// and is not due for renewal.
func (l *Leaf) current(certPEM []byte, now time.Time) bool {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil || c.CheckSignatureFrom(l.CA.Cert) != nil || now.Add(l.Renew).After(c.NotAfter) {
		return false
	}
	for _, n := range l.DNSNames {
		if c.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// Files serves the key pair in two files to a TLS listener, read again when
// the certificate file changes, so a renewed leaf is used without a
// restart. Its mutex guards the loaded pair; a handshake may wait on it for
// one file read.
type Files struct {
	Cert, Key string

	mu      sync.Mutex
	modTime time.Time
	pair    *tls.Certificate
}

// GetCertificate is for tls.Config.GetCertificate.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.Cert)
	if err != nil {
		if f.pair != nil {
			return f.pair, nil
		}
		return nil, err
	}
	if f.pair != nil && fi.ModTime().Equal(f.modTime) {
		return f.pair, nil
	}
	c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		if f.pair != nil {
			return f.pair, nil // keep serving the last good pair
		}
		return nil, err
	}
	f.pair, f.modTime = &c, fi.ModTime()
	return f.pair, nil
}

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// Bundle keeps an APIService's caBundle equal to a CA.
type Bundle struct {
	Client     dynamic.Interface
	APIService string
	CAPEM      []byte
}

// Sync writes the caBundle when it differs; it reports whether it wrote.
func (b *Bundle) Sync(ctx context.Context) (bool, error) {
	svc, err := b.Client.Resource(apiServices).Get(ctx, b.APIService, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("reading APIService %s: %w", b.APIService, err)
	}
	if cur, _, _ := unstructured.NestedString(svc.Object, "spec", "caBundle"); cur != "" {
		if raw, err := base64.StdEncoding.DecodeString(cur); err == nil && bytes.Equal(raw, b.CAPEM) {
			return false, nil
		}
	}
	patch := fmt.Appendf(nil, `{"spec":{"caBundle":%q}}`, base64.StdEncoding.EncodeToString(b.CAPEM))
	if _, err := b.Client.Resource(apiServices).Patch(ctx, b.APIService, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("writing the caBundle of APIService %s: %w", b.APIService, err)
	}
	klog.InfoS("Wrote the serving CA into the APIService", "apiservice", b.APIService)
	return true, nil
}

// Keep syncs the bundle and renews the leaf every interval until ctx ends.
// A failure (the APIService not created yet, say) is logged and tried again
// within retry; the server keeps serving meanwhile.
func Keep(ctx context.Context, b *Bundle, l *Leaf, every time.Duration) {
	const retry = 5 * time.Second
	for {
		failed := false
		if b != nil {
			if _, err := b.Sync(ctx); err != nil && ctx.Err() == nil {
				klog.ErrorS(err, "Keeping the APIService's caBundle")
				failed = true
			}
		}
		if l != nil {
			if renewed, err := l.Ensure(time.Now()); err != nil {
				klog.ErrorS(err, "Renewing the serving certificate")
				failed = true
			} else if renewed {
				klog.InfoS("Renewed the serving certificate", "dir", l.Dir)
			}
		}
		next := every
		if failed {
			next = min(every, retry)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
