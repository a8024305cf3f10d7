// Package leasefence tells a replica, right before a write nobody can take
// back (a Git push), whether it still leads: it reads the leader election
// Lease live from the API server. client-go's elector learns it lost the
// Lease only when renewing fails, up to its renew deadline after it runs
// again; a leader paused past its Lease (SIGSTOP, a frozen VM, a long GC
// stall) would push for those seconds beside the new leader, from a view of
// the cluster that is seconds old.
//
// The fence narrows the gap; it cannot close it: a replica paused between
// the check and the send still sends. The remote then takes that push only
// if the branch did not move since the paused replica read it (a push is a
// compare-and-swap of the branch), and the new leader re-asserts the
// cluster's state on top of what it finds.
//
// A Checker holds no lock and keeps no state; Check blocks on one GET.
package leasefence

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Checker checks that Identity holds the Lease Namespace/Name.
type Checker struct {
	Leases          coordinationv1.LeasesGetter
	Namespace, Name string
	Identity        string
	// MaxAge is how long ago this replica may have renewed the Lease last:
	// the elector's renew deadline, after which it gives up leading.
	MaxAge time.Duration
	Clock  clock.PassiveClock
}

// Check returns nil when this replica holds the Lease and renewed it within
// MaxAge, measured once the Lease was read; else why not.
func (c *Checker) Check(ctx context.Context) error {
	l, err := c.Leases.Leases(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the leader election Lease %s/%s: %w", c.Namespace, c.Name, err)
	}
	if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != c.Identity {
		return fmt.Errorf("the leader election Lease %s/%s is held by %q, not by this replica (%s)", c.Namespace, c.Name, holder, c.Identity)
	}
	if l.Spec.RenewTime == nil {
		return fmt.Errorf("the leader election Lease %s/%s was never renewed", c.Namespace, c.Name)
	}
	// renewTime is this replica's own clock reading: the elector writes it.
	if age := c.Clock.Since(l.Spec.RenewTime.Time); age > c.MaxAge {
		return fmt.Errorf("this replica renewed the leader election Lease %s/%s %s ago, longer than its renew deadline (%s): "+
			"another replica may lead now", c.Namespace, c.Name, age.Round(time.Millisecond), c.MaxAge)
	}
	return nil
}
