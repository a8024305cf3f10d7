package providerstatus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
)

// TestPartsOfTwoControllersAreMerged (#28): the mirror and the
// source-cluster front ends each report their part of a KubeProvider's
// status; the one writer keeps both, removes what a part takes away, and
// after a conflict merges again rather than overwriting.
func TestPartsOfTwoControllersAreMerged(t *testing.T) {
	kp := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "remote", Generation: 3}}
	kp.Status.Conditions = []metav1.Condition{{Type: v1.ConditionCommitRequestsServed, Status: metav1.ConditionTrue, Reason: "Watching"}}
	client := fake.NewSimpleClientset(kp)
	conflicts := 1
	client.PrependReactor("update", "kubeproviders", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: v1.GroupName, Resource: "kubeproviders"}, "remote", nil)
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	w := New(client, factory)
	factory.Start(t.Context().Done())
	factory.WaitForCacheSync(t.Context().Done())

	fact := metav1.NewTime(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	w.Report("remote", "mirror", Part{Conditions: []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Reachable"}},
		Fields: func(s *v1.KubeProviderStatus) { s.LastAuditFactTime = &fact }})
	w.Report("remote", "commitrequests", Part{Remove: []string{v1.ConditionCommitRequestsServed},
		Fields: func(s *v1.KubeProviderStatus) { s.CommitRequests = nil }})

	again, err := w.write(t.Context(), "remote")
	require.NoError(t, err)
	assert.Positive(t, again, "a conflict asks to merge again")
	again, err = w.write(t.Context(), "remote")
	require.NoError(t, err)
	assert.Zero(t, again)

	got, err := client.ReverserV1alpha1().KubeProviders().Get(t.Context(), "remote", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, meta.IsStatusConditionTrue(got.Status.Conditions, v1.ConditionReady), "the mirror's part")
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, v1.ConditionCommitRequestsServed), "removed by the front ends' part")
	assert.Equal(t, &fact, got.Status.LastAuditFactTime)
	assert.Equal(t, int64(3), got.Status.ObservedGeneration)
}
