package event

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/reference"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

func TestChangedRecordsTransitionsOnly(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	r := New(rec)
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "site"}}
	ready := func(status metav1.ConditionStatus, reason, message string) []metav1.Condition {
		return []metav1.Condition{{Type: v1.ConditionReady, Status: status, Reason: reason, Message: message}}
	}

	r.Changed(gt, nil, ready(metav1.ConditionUnknown, "Starting", "waiting"), v1.ConditionReady)
	assert.Empty(t, Drain(rec), "Unknown says nothing yet")

	r.Changed(gt, nil, ready(metav1.ConditionTrue, "Mirroring", "1 of 1 streams watching."), v1.ConditionReady)
	assert.Equal(t, []string{"Normal Mirroring 1 of 1 streams watching."}, Drain(rec))

	r.Changed(gt, ready(metav1.ConditionTrue, "Mirroring", "1 of 1"), ready(metav1.ConditionTrue, "Mirroring", "2 of 2"), v1.ConditionReady)
	assert.Empty(t, Drain(rec), "a new message alone is no transition")

	r.Changed(gt, ready(metav1.ConditionTrue, "Mirroring", ""), ready(metav1.ConditionFalse, "WriteRefused", "cm a: edit by hand"),
		v1.ConditionReady, v1.ConditionStalled)
	assert.Equal(t, []string{"Warning WriteRefused cm a: edit by hand"}, Drain(rec), "a type absent after says nothing")

	r.Changed(gt, ready(metav1.ConditionFalse, "GitUnreachable", "x"), ready(metav1.ConditionFalse, "SecretNotFound", "y"), v1.ConditionReady)
	assert.Equal(t, []string{"Warning SecretNotFound y"}, Drain(rec), "a new reason is a transition")

	starting := append(ready(metav1.ConditionFalse, "Starting", "0 of 3 streams watching."),
		metav1.Condition{Type: v1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: "Starting"})
	r.Changed(gt, ready(metav1.ConditionTrue, "Mirroring", ""), starting, v1.ConditionReady)
	assert.Empty(t, Drain(rec), "not ready while work is under way is no warning")
}

func TestANilRecorderRecordsNothing(t *testing.T) {
	var r *Recorder
	gt := &v1.GitTarget{}
	r.Normal(gt, ReasonPushed, "x")
	r.Warning(gt, ReasonPushed, "x")
	r.Changed(gt, nil, []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionTrue}}, v1.ConditionReady)
}

// An object read from a lister has no TypeMeta: the scheme must name its
// kind, or the broadcaster drops the Event.
func TestTheSchemeNamesReverserKinds(t *testing.T) {
	for _, obj := range []runtime.Object{&v1.GitTarget{}, &v1.WatchRule{}, &v1.ClusterWatchRule{}, &v1.GitProvider{},
		&v1.KubeProvider{}, &v1.CommitRequest{}, &v1.FluxClaim{}, &v1.ArgoCDClaim{}} {
		ref, err := reference.GetReference(Scheme(), obj)
		require.NoError(t, err)
		assert.Equal(t, v1.SchemeGroupVersion.String(), ref.APIVersion)
		assert.NotEmpty(t, ref.Kind)
	}
}
