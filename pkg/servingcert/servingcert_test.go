package servingcert

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"reverser.dev/reverser/pkg/pki"
)

func TestTheCAIsCreatedOnceAndReadBack(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	secrets := kube.CoreV1().Secrets("reverser-system")
	first, err := LoadOrCreateCA(ctx, secrets, "reverser-apiserver-ca")
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateCA(ctx, secrets, "reverser-apiserver-ca")
	if err != nil {
		t.Fatal(err)
	}
	if string(first.CertPEM) != string(again.CertPEM) {
		t.Fatal("a restart made a new CA: callers would stop trusting the server")
	}
	if !first.Cert.IsCA {
		t.Fatal("the certificate in the Secret is not a CA")
	}
}

func TestTheReplicaThatLosesTheRaceUsesTheWinnersCA(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	winnerPEM, winnerKey, err := pki.NewCA("winner")
	if err != nil {
		t.Fatal(err)
	}
	// Another replica creates the Secret between this one's get and create.
	raced := false
	kube.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: "ns"},
			Data: map[string][]byte{CACertKey: winnerPEM, CAKeyKey: winnerKey}}
		if err := kube.Tracker().Add(s); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), "ca")
	})
	ca, err := LoadOrCreateCA(ctx, kube.CoreV1().Secrets("ns"), "ca")
	if err != nil {
		t.Fatal(err)
	}
	if string(ca.CertPEM) != string(winnerPEM) {
		t.Fatal("the losing replica kept its own CA: replicas would chain to different CAs")
	}
}

func TestABrokenCASecretNamesTheFix(t *testing.T) {
	kube := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: "ns"},
		Data: map[string][]byte{CACertKey: []byte("not pem")}})
	_, err := LoadOrCreateCA(context.Background(), kube.CoreV1().Secrets("ns"), "ca")
	if err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("want an error that says to delete the Secret, got %v", err)
	}
}

func newCA(t *testing.T) *pki.CA {
	t.Helper()
	c, k, err := pki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.ParseCA(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func readLeaf(t *testing.T, l *Leaf) *x509.Certificate {
	t.Helper()
	f, _ := l.Files()
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(raw)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTheLeafNamesTheServiceAndIsRenewedBeforeItExpires(t *testing.T) {
	l := &Leaf{CA: newCA(t), Dir: t.TempDir(), Name: "serving", DNSNames: ServiceNames("reverser-system", "reverser-apiserver"),
		Renew: 90 * 24 * time.Hour}
	now := time.Now()
	if wrote, err := l.Ensure(now); err != nil || !wrote {
		t.Fatalf("first Ensure: wrote=%v err=%v", wrote, err)
	}
	c := readLeaf(t, l)
	roots := x509.NewCertPool()
	roots.AddCert(l.CA.Cert)
	// kube-apiserver's aggregator dials the Service by this name.
	if _, err := c.Verify(x509.VerifyOptions{DNSName: "reverser-apiserver.reverser-system.svc", Roots: roots}); err != nil {
		t.Fatalf("the aggregator would refuse the leaf: %v", err)
	}
	if wrote, err := l.Ensure(now.Add(time.Hour)); err != nil || wrote {
		t.Fatalf("a current leaf was issued again: wrote=%v err=%v", wrote, err)
	}
	due := c.NotAfter.Add(-l.Renew).Add(time.Minute)
	if wrote, err := l.Ensure(due); err != nil || !wrote {
		t.Fatalf("a leaf due for renewal was kept: wrote=%v err=%v", wrote, err)
	}
	if readLeaf(t, l).SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Fatal("the renewed leaf is the old one")
	}
}

func TestALeafFromAnotherCAIsReplaced(t *testing.T) {
	dir := t.TempDir()
	old := &Leaf{CA: newCA(t), Dir: dir, Name: "serving", DNSNames: []string{"a"}, Renew: time.Hour}
	if _, err := old.Ensure(time.Now()); err != nil {
		t.Fatal(err)
	}
	l := &Leaf{CA: newCA(t), Dir: dir, Name: "serving", DNSNames: []string{"a"}, Renew: time.Hour}
	if wrote, err := l.Ensure(time.Now()); err != nil || !wrote {
		t.Fatalf("a leaf of the old CA was kept after the CA Secret changed: wrote=%v err=%v", wrote, err)
	}
	if err := readLeaf(t, l).CheckSignatureFrom(l.CA.Cert); err != nil {
		t.Fatal(err)
	}
}

func TestTheBundleIsWrittenOnlyWhenItDiffers(t *testing.T) {
	ctx := context.Background()
	svc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1alpha1.reverser.dev"},
		"spec":     map[string]any{"group": "reverser.dev", "version": "v1alpha1"},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{apiServices: "APIServiceList"}, svc)
	ca := newCA(t)
	b := &Bundle{Client: dyn, APIService: "v1alpha1.reverser.dev", CAPEM: ca.CertPEM}
	bundle := func() string {
		got, err := dyn.Resource(apiServices).Get(ctx, b.APIService, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := unstructured.NestedString(got.Object, "spec", "caBundle")
		return s
	}
	if wrote, err := b.Sync(ctx); err != nil || !wrote {
		t.Fatalf("first sync: wrote=%v err=%v", wrote, err)
	}
	if bundle() != base64.StdEncoding.EncodeToString(ca.CertPEM) {
		t.Fatalf("caBundle is %q", bundle())
	}
	if wrote, err := b.Sync(ctx); err != nil || wrote {
		t.Fatalf("an equal caBundle was written again: wrote=%v err=%v", wrote, err)
	}
	// Someone re-applies the manifest, which has no caBundle.
	if _, err := dyn.Resource(apiServices).Patch(ctx, b.APIService, "application/merge-patch+json",
		[]byte(`{"spec":{"caBundle":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if wrote, err := b.Sync(ctx); err != nil || !wrote || bundle() == "" {
		t.Fatalf("an overwritten caBundle was not healed: wrote=%v err=%v", wrote, err)
	}
}

func TestARenewedLeafIsServedWithoutARestart(t *testing.T) {
	l := &Leaf{CA: newCA(t), Dir: t.TempDir(), Name: "serving", DNSNames: []string{"audit.ns.svc"}, Renew: time.Hour}
	if _, err := l.Ensure(time.Now()); err != nil {
		t.Fatal(err)
	}
	cert, key := l.Files()
	f := &Files{Cert: cert, Key: key}
	first, err := f.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Renewal writes new files; make the change visible to a coarse clock.
	if _, err := l.Ensure(readLeaf(t, l).NotAfter); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(cert, later, later); err != nil {
		t.Fatal(err)
	}
	second, err := f.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(first.Certificate[0]) == string(second.Certificate[0]) {
		t.Fatal("the listener kept the old leaf after renewal")
	}
	if err := os.Remove(cert); err != nil {
		t.Fatal(err)
	}
	if third, err := f.GetCertificate(nil); err != nil || third != second {
		t.Fatalf("a missing file broke the listener: %v", err)
	}
}
