package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/commitrequest"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	versionedfake "reverser.dev/reverser/pkg/generated/clientset/versioned/fake"
	informers "reverser.dev/reverser/pkg/generated/informers/externalversions"
	"reverser.dev/reverser/pkg/identity"
	"reverser.dev/reverser/pkg/worker"
)

// The tests of this file run the source-cluster front end of the
// CommitRequest core (D4) on a fake clock: GitTargets and KubeProviders
// live in the in-process API server (the control cluster), the requests in
// a fake clientset standing in for the source cluster, and a real
// attribution index holds that cluster's audit facts. The two-cluster e2e
// (test/e2e/source_test.go) runs the same path against a second
// kube-apiserver and its CRD.

const (
	remote = "remote"
	grace  = 2 * time.Second
)

// committer is the GitProvider's committer: what a cluster sending no audit
// authors.
var committer = identity.Signature{Name: "Reverser", Email: "reverser@reverser.dev"}

type sourceHarness struct {
	*saveHarness
	source *versionedfake.Clientset
	facts  *attribution.Index
	rv     int
	// forged is the status.author requests are created with, as a user
	// allowed to write it on the source cluster could.
	forged *v1.Author
	// control is the front end's view of GitTargets and KubeProviders.
	control informers.SharedInformerFactory
	// handled are the resourceVersions the front end handled, by key.
	handledMu sync.Mutex
	handled   map[string][]string
}

// startSourceSaves runs the front end of KubeProvider "remote" over the
// source cluster's CommitRequests in namespace demo, for GitTarget
// demo/site, which admits requests made there.
func startSourceSaves(t *testing.T, mode v1.CommitRequestsMode, auditEnabled bool, ttl time.Duration) *sourceHarness {
	s := startServer(t, serverSetup{dir: t.TempDir(), authz: newTestAuthz()})
	h := &sourceHarness{saveHarness: &saveHarness{server: s, admin: s.adminClient(), saver: &recordingSaver{},
		clock: clocktesting.NewFakeClock(time.Now())}, source: newFakeSource(), facts: attribution.NewIndex(100, time.Hour),
		handled: map[string][]string{}}
	ctx := ctxT(t)
	_, err := h.admin.KubeProviders().Create(ctx, remoteProvider(mode, auditEnabled), metav1.CreateOptions{})
	require.NoError(t, err)
	gt := gitTarget("site")
	gt.Spec.KubeProviderRef.Name = remote
	gt.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{{SourceNamespaces: []string{ns}}}
	_, err = h.admin.GitTargets(ns).Create(ctx, gt, metav1.CreateOptions{})
	require.NoError(t, err)

	client := versioned.NewForConfigOrDie(s.admin)
	control := informers.NewSharedInformerFactory(client, 0)
	h.control = control
	sourceNS := informers.NewSharedInformerFactoryWithOptions(h.source, 0, informers.WithNamespace(ns))
	c := commitrequest.New(commitrequest.SourceCluster(commitrequest.Config{
		Kube: kubefake.NewClientset(), Control: control, TTL: ttl, Clock: h.clock,
		Savers: func(string) (commitrequest.SaveTarget, bool) {
			return commitrequest.SaveTarget{Saver: h.saver, Domain: "example.com", Unnamed: committer}, true
		},
		Handled: func(key, rv string) {
			h.handledMu.Lock()
			defer h.handledMu.Unlock()
			h.handled[key] = append(h.handled[key], rv)
		},
	}, commitrequest.Source{Provider: remote, Mode: mode, Requests: h.source, Factory: sourceNS, Facts: h.facts, Grace: grace}))
	runCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	control.Start(runCtx.Done())
	sourceNS.Start(runCtx.Done())
	go func() { _ = c.Run(runCtx, 2) }()
	return h
}

func remoteProvider(mode v1.CommitRequestsMode, auditEnabled bool) *v1.KubeProvider {
	kp := &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: remote}, Spec: v1.KubeProviderSpec{
		KubeConfigSecretRef: &v1.SecretKeyReference{Namespace: "reverser-system", Name: "remote", Key: "value"},
		CommitRequests:      mode,
		LendSameNamespaces:  true,
	}}
	if auditEnabled {
		kp.Spec.Audit = v1.AuditSpec{Enabled: true, ClientCertificateCommonNames: []string{"kube-apiserver"}}
	}
	return kp
}

// sourceRequest creates a request for GitTarget demo/site on the source
// cluster, naming the GitTarget's namespace as a request there must.
func (h *sourceHarness) sourceRequest(t *testing.T, name string) *v1.CommitRequest {
	return h.create(t, name, ns, "site")
}

// create makes a request in namespace demo of the source cluster for
// GitTarget targetNamespace/target, as the source cluster would store it:
// a resourceVersion, a creation time and a uid.
func (h *sourceHarness) create(t *testing.T, name, targetNamespace, target string) *v1.CommitRequest {
	h.rv++
	cr := commitRequest(name, target)
	cr.Spec.GitTargetRef.Namespace = targetNamespace
	cr.ResourceVersion, cr.UID = fmt.Sprint(h.rv), types.UID("uid-"+name)
	cr.CreationTimestamp = metav1.NewTime(h.clock.Now())
	if h.forged != nil {
		// What a user who may write the status there could do: an author,
		// and a claim, for a GitTarget uid they cannot know.
		cr.Status.Author = h.forged
		cr.Status.GitTargetUID = "forged"
		cr.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionUnknown, Reason: v1.ReasonSaving,
			Message: "forged", LastTransitionTime: metav1.Now()}}
	}
	created, err := h.source.ReverserV1alpha1().CommitRequests(ns).Create(ctxT(t), cr, metav1.CreateOptions{})
	require.NoError(t, err)
	return created
}

// touch writes request name again (an annotation) at a new
// resourceVersion and waits until the front end has handled that version:
// whatever the handling would write is there by then, so a check that
// nothing was written can follow at once.
func (h *sourceHarness) touch(t *testing.T, name string) {
	t.Helper()
	cr := h.request(t, name)
	h.rv++
	metav1.SetMetaDataAnnotation(&cr.ObjectMeta, "test/touched", fmt.Sprint(h.rv))
	cr.ResourceVersion = fmt.Sprint(h.rv)
	_, err := h.source.ReverserV1alpha1().CommitRequests(ns).Update(ctxT(t), cr, metav1.UpdateOptions{})
	require.NoError(t, err)
	h.waitHandled(t, name, cr.ResourceVersion)
}

// waitHandled waits until the front end has handled request name at
// resourceVersion rv.
func (h *sourceHarness) waitHandled(t *testing.T, name, rv string) {
	t.Helper()
	h.poll(t, name+" handled at resourceVersion "+rv, func() bool {
		h.handledMu.Lock()
		defer h.handledMu.Unlock()
		return slices.Contains(h.handled[ns+"/"+name], rv)
	})
}

// ready is the Ready condition of a source request.
func (h *sourceHarness) ready(t *testing.T, name string) *metav1.Condition {
	cr, err := h.source.ReverserV1alpha1().CommitRequests(ns).Get(ctxT(t), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
}

// audit records the source cluster's audit event of a create by user.
func (h *sourceHarness) audit(t *testing.T, cr *v1.CommitRequest, user string) {
	raw := fmt.Sprintf(`{"kind":"CommitRequest","metadata":{"name":%q,"namespace":%q,"resourceVersion":%q}}`, cr.Name, cr.Namespace,
		cr.ResourceVersion)
	kept := h.facts.Add(remote, []auditv1.Event{{
		Stage: auditv1.StageResponseComplete, Verb: "create", User: authnv1.UserInfo{Username: user, UID: "uid-" + user},
		ObjectRef:      &auditv1.ObjectReference{APIGroup: v1.GroupName, Resource: "commitrequests", Namespace: cr.Namespace, Name: cr.Name},
		ResponseStatus: &metav1.Status{Code: 201}, ResponseObject: &runtime.Unknown{Raw: []byte(raw)},
	}})
	require.Equal(t, 1, kept)
}

// committing makes every save commit, with no applier to follow: the
// request is settled at once, so retention is what comes next.
func (h *sourceHarness) committing() {
	h.saver.onSave = func(req worker.SaveRequest) {
		req.Done(worker.SaveResult{Outcome: worker.SaveCommitted, Commit: "0123456789abcdef0123456789abcdef01234567"})
		req.Applied(worker.ApplyResult{Reason: v1.ReasonNoApplierClaim, Message: "no applier claims the GitTarget", Settled: true})
	}
}

func (h *sourceHarness) request(t *testing.T, name string) *v1.CommitRequest {
	cr, err := h.source.ReverserV1alpha1().CommitRequests(ns).Get(ctxT(t), name, metav1.GetOptions{})
	require.NoError(t, err)
	return cr
}

// TestASourceRequestIsAuthoredByItsAuditFact (D4, tenancy attack): the
// author is whom the source cluster's audit event of the create names, not
// the status.author and claim a user there wrote into the request; the
// claim records it, and with Reconcile the finished request stays.
func TestASourceRequestIsAuthoredByItsAuditFact(t *testing.T) {
	h := startSourceSaves(t, v1.CommitRequestsReconcile, true, time.Minute)
	h.committing()
	h.forged = &v1.Author{Username: "mallory", UID: "uid-mallory"}
	cr := h.sourceRequest(t, "carols")
	require.Equal(t, "mallory", cr.Status.Author.Username, "the source cluster stored the forged author")
	h.audit(t, cr, "carol")
	h.poll(t, "Committed", func() bool {
		c := h.ready(t, "carols")
		return c != nil && c.Reason == v1.ReasonCommitted
	})
	require.Equal(t, 1, h.saver.count())
	assert.Equal(t, identity.For("carol", "example.com"), h.saver.saves[0].Author)
	got := h.request(t, "carols")
	assert.Equal(t, "carol", got.Status.Author.Username, "the claim recorded the audit fact's user")
	assert.Equal(t, "uid-carol", got.Status.Author.UID)

	h.clock.Step(2 * time.Minute) // past the TTL
	h.touch(t, "carols")
	assert.Empty(t, h.request(t, "carols").Annotations[v1.DeleteAfterAnnotation], "Reconcile neither stamps nor deletes finished requests")
}

// TestReconcileAndDeleteFinishedDeletesAfterTheTTL (D6): with
// ReconcileAndDeleteFinished a finished source request is stamped and
// deleted once the clock passes the stamp.
func TestReconcileAndDeleteFinishedDeletesAfterTheTTL(t *testing.T) {
	h := startSourceSaves(t, v1.CommitRequestsReconcileAndDeleteFinished, false, 10*time.Minute)
	h.saver.onSave = func(req worker.SaveRequest) {
		req.Done(worker.SaveResult{Outcome: worker.SaveNoWindow, Message: "nobody has open changes on this GitTarget"})
	}
	h.sourceRequest(t, "short-lived")
	h.poll(t, "stamped for deletion", func() bool {
		cr, err := h.source.ReverserV1alpha1().CommitRequests(ns).Get(ctxT(t), "short-lived", metav1.GetOptions{})
		return err == nil && cr.Annotations[v1.DeleteAfterAnnotation] != ""
	})
	h.clock.Step(10*time.Minute + time.Second)
	h.poll(t, "deleted", func() bool {
		_, err := h.source.ReverserV1alpha1().CommitRequests(ns).Get(ctxT(t), "short-lived", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// TestASourceRequestNoFactNamesIsUnresolved (D4): on a cluster that sends
// audit events, a request whose own event never comes waits the grace on
// the clock, then ends AuthorUnresolved without saving.
func TestASourceRequestNoFactNamesIsUnresolved(t *testing.T) {
	h := startSourceSaves(t, v1.CommitRequestsReconcile, true, time.Minute)
	h.committing()
	other := h.sourceRequest(t, "someone-elses")
	h.audit(t, other, "dave") // the cluster sends audit
	h.poll(t, "the named one Committed", func() bool {
		c := h.ready(t, "someone-elses")
		return c != nil && c.Reason == v1.ReasonCommitted
	})
	nameless := h.sourceRequest(t, "nameless")
	h.waitHandled(t, "nameless", nameless.ResourceVersion)
	assert.Nil(t, h.ready(t, "nameless"), "within the grace the request waits for its fact, unclaimed")
	h.clock.Step(grace + time.Second)
	h.poll(t, "AuthorUnresolved after the grace", func() bool {
		c := h.ready(t, "nameless")
		return c != nil && c.Reason == v1.ReasonAuthorUnresolved
	})
	assert.Contains(t, h.ready(t, "nameless").Message, "no audit event of KubeProvider remote names who created this request")
	assert.Equal(t, 1, h.saver.count(), "nothing saved for the unresolved request")
	assert.Nil(t, h.request(t, "nameless").Status.Author, "nobody recorded")
}

// TestASourceRequestOnAClusterWithoutAuditSavesTheUnnamedWindow (D4): a
// provider that sends no audit names nobody, so the save takes the window
// its changes are in: the committer's.
func TestASourceRequestOnAClusterWithoutAuditSavesTheUnnamedWindow(t *testing.T) {
	h := startSourceSaves(t, v1.CommitRequestsReconcile, false, time.Minute)
	h.committing()
	h.sourceRequest(t, "unnamed")
	h.poll(t, "Committed", func() bool {
		c := h.ready(t, "unnamed")
		return c != nil && c.Reason == v1.ReasonCommitted
	})
	assert.Equal(t, committer, h.saver.saves[0].Author)
	assert.Nil(t, h.request(t, "unnamed").Status.Author, "nobody is recorded")
}

// TestSourceGrantsAndLoans (D4, tenancy): only a sourceNamespaces grant
// admits a source request, and only for a namespace its provider lends the
// GitTarget's namespace: a tenant cannot open a GitTarget to saves from a
// source namespace its WatchRules could not read either.
func TestSourceGrantsAndLoans(t *testing.T) {
	h := startSourceSaves(t, v1.CommitRequestsReconcile, false, time.Minute)
	h.committing()
	ctx := ctxT(t)

	plain := gitTarget("plain")
	plain.Spec.KubeProviderRef.Name = remote
	plain.Spec.Path = "clusters/plain"
	_, err := h.admin.GitTargets(ns).Create(ctx, plain, metav1.CreateOptions{})
	require.NoError(t, err)
	h.create(t, "ungranted", ns, "plain")
	h.poll(t, "NotAllowed without a sourceNamespaces grant", func() bool {
		c := h.ready(t, "ungranted")
		return c != nil && c.Reason == v1.ReasonNotAllowed
	})
	assert.Contains(t, h.ready(t, "ungranted").Message, `add {sourceNamespaces: [demo]}`)

	// GitTarget team/site grants namespace demo, which the provider lends
	// only to control-cluster namespace demo.
	team := gitTarget("site")
	team.Namespace = "team"
	team.Spec.KubeProviderRef.Name = remote
	team.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{{SourceNamespaces: []string{ns}}}
	_, err = h.admin.GitTargets("team").Create(ctx, team, metav1.CreateOptions{})
	require.NoError(t, err)
	h.create(t, "not-lent", "team", "site")
	h.poll(t, "NotAllowed: the grant names a namespace the provider does not lend", func() bool {
		c := h.ready(t, "not-lent")
		return c != nil && c.Reason == v1.ReasonNotAllowed
	})
	assert.Contains(t, h.ready(t, "not-lent").Message, `KubeProvider remote does not lend source namespace "demo" to namespace "team"`)
	assert.Equal(t, 0, h.saver.count())

	kp, err := h.admin.KubeProviders().Get(ctx, remote, metav1.GetOptions{})
	require.NoError(t, err)
	kp.Spec.Lend = []v1.NamespaceLoan{{SourceNamespaces: []string{ns}, To: v1.NamespaceSelection{From: v1.NamespacesFromNames, Names: []string{"team"}}}}
	_, err = h.admin.KubeProviders().Update(ctx, kp, metav1.UpdateOptions{})
	require.NoError(t, err)
	h.poll(t, "the front end sees the loan", func() bool {
		kp, err := h.control.Reverser().V1alpha1().KubeProviders().Lister().Get(remote)
		return err == nil && len(kp.Spec.Lend) == 1
	})
	h.create(t, "lent", "team", "site")
	h.poll(t, "Committed once lent", func() bool {
		c := h.ready(t, "lent")
		return c != nil && c.Reason == v1.ReasonCommitted
	})
	assert.Equal(t, "team/site", h.saver.saves[0].Target)
}

// TestASourceRequestIsServedOnlyByItsOwner (D4): a front end leaves alone a
// request for another provider's GitTarget, and one that does not name its
// GitTarget's namespace, writing nothing.
func TestASourceRequestIsServedOnlyByItsOwner(t *testing.T) {
	h := startSourceSaves(t, v1.CommitRequestsReconcile, false, time.Minute)
	h.committing()
	ctx := ctxT(t)
	elsewhere := remoteProvider(v1.CommitRequestsReconcile, false)
	elsewhere.Name = "elsewhere"
	_, err := h.admin.KubeProviders().Create(ctx, elsewhere, metav1.CreateOptions{})
	require.NoError(t, err)
	theirs := gitTarget("theirs")
	theirs.Spec.KubeProviderRef.Name = "elsewhere"
	theirs.Spec.Path = "clusters/theirs"
	theirs.Spec.AllowedCommitRequests = []v1.CommitRequestGrant{{SourceNamespaces: []string{ns}}}
	_, err = h.admin.GitTargets(ns).Create(ctx, theirs, metav1.CreateOptions{})
	require.NoError(t, err)
	h.create(t, "for-elsewhere", ns, "theirs")
	h.create(t, "no-target-namespace", "", "site")

	h.sourceRequest(t, "mine")
	h.poll(t, "the front end serves its own", func() bool {
		c := h.ready(t, "mine")
		return c != nil && c.Reason == v1.ReasonCommitted
	})
	h.clock.Step(time.Minute) // past every attach timeout
	for _, name := range []string{"for-elsewhere", "no-target-namespace"} {
		h.touch(t, name)
		assert.Nil(t, h.ready(t, name), "a non-owner writes nothing on "+name)
	}
	assert.Equal(t, 1, h.saver.count())
}

// newFakeSource is the source cluster's CommitRequests. NewClientset would
// need our OpenAPI models for server-side apply, which nothing here uses.
func newFakeSource() *versionedfake.Clientset {
	return versionedfake.NewSimpleClientset()
}

// TestAControlClusterRequestForAnotherClustersGitTargetIsRefused (D4): our
// API server refuses it at create, saying where to save; one created before
// its GitTarget existed ends NotAllowed with the same advice.
func TestAControlClusterRequestForAnotherClustersGitTargetIsRefused(t *testing.T) {
	h := startSaves(t, time.Hour)
	ctx := ctxT(t)
	_, err := h.admin.KubeProviders().Create(ctx, remoteProvider(v1.CommitRequestsReconcile, false), metav1.CreateOptions{})
	require.NoError(t, err)
	far := gitTarget("far")
	far.Spec.KubeProviderRef.Name = remote
	far.Spec.Path = "clusters/far"

	// Before the GitTarget exists the create is taken: it may come next.
	cr := commitRequest("early", "far")
	cr.Spec.Window.AttachTimeout = &metav1.Duration{Duration: 10 * time.Minute} // the fake clock does not move
	_, err = h.admin.CommitRequests(ns).Create(ctx, cr, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = h.admin.GitTargets(ns).Create(ctx, far, metav1.CreateOptions{})
	require.NoError(t, err)
	h.poll(t, "the early request NotAllowed", func() bool {
		c := h.ready(t, "early")
		return c != nil && c.Reason == v1.ReasonNotAllowed
	})
	assert.Contains(t, h.ready(t, "early").Message, `mirrors another cluster through KubeProvider remote: save on that cluster`)

	_, err = h.admin.CommitRequests(ns).Create(ctx, commitRequest("late", "far"), metav1.CreateOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
	assert.Contains(t, err.Error(), `GitTarget demo/far mirrors another cluster through KubeProvider remote: save on that cluster, `+
		`with a CommitRequest whose spec.gitTargetRef names namespace "demo"`)
	assert.Equal(t, 0, h.saver.count())
}
