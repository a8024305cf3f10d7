package leasefence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestTheFenceLetsOnlyAFreshHolderThrough: the holder that renewed within
// the renew deadline passes; another holder, a renewal too old (a replica
// that was paused), a Lease never renewed, or one that cannot be read stop
// the push.
func TestTheFenceLetsOnlyAFreshHolderThrough(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	lease := func(holder string, renewed *time.Time) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "reverser-system", Name: "reverser-controller"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
		if renewed != nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: *renewed}
		}
		return l
	}
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		err   string
	}{
		{"held and renewed 2s ago", lease("a_1", ago(2*time.Second)), ""},
		{"held and renewed at the deadline", lease("a_1", ago(7*time.Second)), ""},
		{"held by another", lease("b_2", ago(time.Second)), `held by "b_2", not by this replica (a_1)`},
		{"renewed past the deadline", lease("a_1", ago(12*time.Second)), "renewed the leader election Lease reverser-system/reverser-controller 12s ago"},
		{"never renewed", lease("a_1", nil), "never renewed"},
		{"absent", nil, "reading the leader election Lease reverser-system/reverser-controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{}
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			c := &Checker{Leases: fake.NewClientset(objs...).CoordinationV1(), Namespace: "reverser-system", Name: "reverser-controller",
				Identity: "a_1", MaxAge: 7 * time.Second, Clock: clocktesting.NewFakePassiveClock(now)}
			err := c.Check(context.Background())
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

// TestTheFenceReadsTheLeaseLive: every check is a GET, never a cached copy.
func TestTheFenceReadsTheLeaseLive(t *testing.T) {
	now := time.Now()
	cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a_1"), RenewTime: &metav1.MicroTime{Time: now}}})
	gets := 0
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets > 1 {
			return true, nil, errors.New("the API server is gone")
		}
		return false, nil, nil
	})
	c := &Checker{Leases: cs.CoordinationV1(), Namespace: "ns", Name: "l", Identity: "a_1", MaxAge: time.Minute,
		Clock: clocktesting.NewFakePassiveClock(now)}
	require.NoError(t, c.Check(context.Background()))
	require.ErrorContains(t, c.Check(context.Background()), "the API server is gone")
	assert.Equal(t, 2, gets)
}
