// Package leaderendpoint points a selector-less Service at the leading
// replica only. kube-apiserver's audit webhook sends each batch to one
// address; the facts in it are useful only to the replica that runs the
// mirror, since attribution is an in-memory index. So the audit Service has
// no selector, and the leader writes its one EndpointSlice with its own
// address; a new leader overwrites it.
//
// A Publisher holds no lock; Keep blocks until its context ends.
package leaderendpoint

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ManagedBy is the EndpointSlice's endpointslice.kubernetes.io/managed-by,
// which keeps Kubernetes' own EndpointSlice controller away from it.
const ManagedBy = "controller.reverser.dev"

// Publisher writes the EndpointSlice of Service in Namespace.
type Publisher struct {
	Client    discoveryclient.EndpointSlicesGetter
	Namespace string
	Service   string
	// Address is this replica's: an IP (the Pod's, in a cluster) or a host
	// name, which makes an FQDN slice.
	Address  string
	Port     int32
	PortName string
	// Identity is the leader election identity, recorded for humans.
	Identity string
}

// CheckAddress says why kube-apiserver would refuse addr in an
// EndpointSlice: an IP must not be loopback, link-local or unspecified; a
// host name must have two labels at least.
func CheckAddress(addr string) error {
	if ip := net.ParseIP(addr); ip != nil {
		if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
			return fmt.Errorf("%s is not a valid endpoint: not a loopback, link-local or unspecified address (use the Pod IP)", addr)
		}
		return nil
	}
	if errs := validation.IsFullyQualifiedDomainName(field.NewPath("address"), addr); len(errs) > 0 {
		return fmt.Errorf("%s is not a valid endpoint: %s", addr, errs.ToAggregate())
	}
	return nil
}

// Name is the EndpointSlice's name: one per Service, whoever leads.
func (p *Publisher) Name() string { return p.Service + "-leader" }

func (p *Publisher) slice() *discoveryv1.EndpointSlice {
	t := discoveryv1.AddressTypeFQDN
	if ip := net.ParseIP(p.Address); ip != nil {
		t = discoveryv1.AddressTypeIPv6
		if ip.To4() != nil {
			t = discoveryv1.AddressTypeIPv4
		}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name(), Namespace: p.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: p.Service,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			Annotations: map[string]string{"reverser.dev/leader": p.Identity},
		},
		AddressType: t,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{p.Address},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(p.PortName), Port: ptr.To(p.Port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// Publish makes the EndpointSlice name this replica.
func (p *Publisher) Publish(ctx context.Context) error {
	want := p.slice()
	c := p.Client.EndpointSlices(p.Namespace)
	cur, err := c.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
	case err == nil:
		if cur.AddressType != want.AddressType {
			// The address type cannot change: replace the slice.
			if err = c.Delete(ctx, want.Name, metav1.DeleteOptions{}); err == nil {
				_, err = c.Create(ctx, want, metav1.CreateOptions{})
			}
			break
		}
		if apiequality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) && apiequality.Semantic.DeepEqual(cur.Ports, want.Ports) &&
			apiequality.Semantic.DeepEqual(cur.Labels, want.Labels) && cur.Annotations["reverser.dev/leader"] == p.Identity {
			return nil
		}
		want.ResourceVersion = cur.ResourceVersion
		_, err = c.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("pointing EndpointSlice %s/%s at %s: %w", p.Namespace, want.Name, p.Address, err)
	}
	return nil
}

// Keep publishes now and every interval until ctx ends, so a slice someone
// deleted or edited comes back.
func (p *Publisher) Keep(ctx context.Context, every time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := p.Publish(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Publishing the leader's audit endpoint")
		}
	}, every)
}
