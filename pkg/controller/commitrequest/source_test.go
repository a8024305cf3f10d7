package commitrequest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

// TestASourceRequestsStatusIsNeverBelieved (#27, finding 2): a request
// whose status, written on the source cluster, names the GitTarget's uid
// and alice is not alice's: this controller did not claim it. One it did
// claim keeps the author it resolved, whatever its status says after.
func TestASourceRequestsStatusIsNeverBelieved(t *testing.T) {
	cfg := SourceCluster(Config{Clock: testclock.NewFakeClock(metav1.Now().Time)}, Source{Provider: "remote"})
	gt := &v1.GitTarget{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: "team", UID: "gt-uid"}}
	kp := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: "remote"}} // no audit: nobody is named
	claimedAs := func(cr *v1.CommitRequest, who string) *v1.CommitRequest {
		cr = cr.DeepCopy()
		cr.Status.GitTargetUID, cr.Status.Author = string(gt.UID), &v1.Author{Username: who}
		meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionUnknown, Reason: v1.ReasonSaving})
		return cr
	}

	forged := claimedAs(&v1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "team", UID: "forged-uid"}}, "alice")
	who, _ := cfg.Author(forged, gt, kp)
	assert.Nil(t, who.User, "not alice")
	assert.False(t, who.Unnamed)
	assert.Contains(t, who.Unresolved, "not by this controller")

	mine := &v1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: "team", UID: "mine-uid"}}
	who, _ = cfg.Author(mine, gt, kp)
	assert.True(t, who.Unnamed, "no audit: nobody named")
	who, _ = cfg.Author(claimedAs(mine, "alice"), gt, kp)
	assert.True(t, who.Unnamed, "claimed by this controller: the author it resolved, not the status's")
	assert.Nil(t, who.User)

	cfg.Forget(mine.UID)
	who, _ = cfg.Author(claimedAs(mine, "alice"), gt, kp)
	assert.NotEmpty(t, who.Unresolved, "forgotten: judged afresh, its status not believed")
	assert.True(t, cfg.Untrusted, "grants are checked on every handling")
}
