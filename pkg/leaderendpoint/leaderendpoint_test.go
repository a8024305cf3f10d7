package leaderendpoint

import (
	"context"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
)

func TestANewLeaderTakesTheEndpointOver(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	first := &Publisher{Client: kube.DiscoveryV1(), Namespace: "reverser-system", Service: "reverser-audit",
		Address: "10.0.0.1", Port: 9444, PortName: "https", Identity: "a"}
	if err := first.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	second := *first
	second.Address, second.Identity = "10.0.0.2", "b"
	if err := second.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := kube.DiscoveryV1().EndpointSlices("reverser-system").Get(ctx, "reverser-audit-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != "10.0.0.2" {
		t.Fatalf("audit events would still go to the old leader: %+v", s.Endpoints)
	}
	if s.Labels[discoveryv1.LabelServiceName] != "reverser-audit" || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
		t.Fatalf("the slice would not be the Service's, or Kubernetes would manage it: %v", s.Labels)
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 || *s.Ports[0].Port != 9444 {
		t.Fatalf("slice: %+v", s)
	}
}

func TestAHostNameMakesAnFQDNSliceAndReplacesAnIPOne(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	p := &Publisher{Client: kube.DiscoveryV1(), Namespace: "ns", Service: "audit", Address: "10.0.0.1", Port: 1, PortName: "https"}
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	p.Address = "reverser-controller.localhost"
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := kube.DiscoveryV1().EndpointSlices("ns").Get(ctx, "audit-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.AddressType != discoveryv1.AddressTypeFQDN || s.Endpoints[0].Addresses[0] != "reverser-controller.localhost" {
		t.Fatalf("slice: %+v", s)
	}
}

func TestAnUnchangedSliceIsNotWritten(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	p := &Publisher{Client: kube.DiscoveryV1(), Namespace: "ns", Service: "audit", Address: "10.0.0.1", Port: 1, PortName: "https"}
	for range 3 {
		if err := p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	writes := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "update" {
			writes++
		}
	}
	if writes != 1 {
		t.Fatalf("%d writes for one unchanged slice", writes)
	}
}

// kube-apiserver refuses these; the controller refuses them at start, with
// the fix, rather than failing to publish every resync.
func TestAddressesKubernetesRefusesAreRefused(t *testing.T) {
	for _, bad := range []string{"127.0.0.1", "::1", "0.0.0.0", "169.254.1.1", "localhost", "-bad-.example"} {
		if CheckAddress(bad) == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	for _, good := range []string{"10.0.0.7", "fd00::7", "reverser-controller.localhost"} {
		if err := CheckAddress(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	if errs := validation.IsValidLabelValue(ManagedBy); len(errs) > 0 {
		t.Errorf("managed-by label %q: %v", ManagedBy, errs)
	}
}
