package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/document"
	"reverser.dev/reverser/pkg/metrics"
	"reverser.dev/reverser/pkg/resolve"
	"reverser.dev/reverser/pkg/stream"
	"reverser.dev/reverser/pkg/worker"
)

func condition(typ string, ok bool, reason, message string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message}
}

func fromProblem(typ string, p *problem, okReason, okMessage string) metav1.Condition {
	if p == nil {
		return condition(typ, true, okReason, okMessage)
	}
	return condition(typ, false, p.reason, p.message)
}

func firstProblem(ps ...*problem) *problem {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// lasting is the first of ps that will not pass by itself.
func lasting(ps ...*problem) *problem {
	for _, p := range ps {
		if p != nil && !p.transient {
			return p
		}
	}
	return nil
}

// reported is what the worker said of a target, as writeStatus reads it.
type reported struct {
	lastCommit, lastPush *v1.CommitRef
	gitErr               error
	refused              []string
	unapplied            string
}

// reported reads the worker's reports of a target under c.mu.
func (c *Controller) reported(key string) reported {
	r := reported{unapplied: "Reverser has not compared the folder with the cluster yet: it does once every stream delivered its initial state " +
		"and the applier's converge settled"}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rep := c.reports[key]; rep != nil {
		r.lastCommit, r.lastPush, r.gitErr, r.refused = rep.lastCommit, rep.lastPush, rep.gitErr, rep.refused
		if rep.judged {
			r.unapplied = rep.unapplied
		}
	}
	return r
}

// streamHealth counts a target's streams: running (delivered their initial
// state), failing, and refused by the controller's own rights.
type streamHealth struct {
	running            int32
	failing, forbidden []string
}

func healthOf(streams []*stream.Stream) streamHealth {
	var h streamHealth
	for _, s := range streams {
		switch err := s.Err(); {
		case apierrors.IsForbidden(err):
			// The controller's own rights: name the grant that fixes it.
			h.forbidden = append(h.forbidden, fmt.Sprintf("reverser-controller may not list and watch %s", s.Scope))
		case err != nil:
			h.failing = append(h.failing, fmt.Sprintf("%s: %v", s.Scope, err))
		case s.Synced():
			h.running++
		}
	}
	return h
}

// gitReachable is the GitReachable condition, and the error of the local
// clone when that is what failed (the remote is not to blame then).
func gitReachable(st *observed, r reported) (metav1.Condition, *worker.LocalError) {
	gitErr := r.gitErr
	var localErr *worker.LocalError
	if errors.As(gitErr, &localErr) {
		gitErr = nil
	}
	gitProblem := st.git
	if gitProblem == nil && gitErr != nil {
		gitProblem = problemf("GitUnreachable", "%v: check the GitProvider's URL and credentials", gitErr)
	}
	switch {
	case gitProblem != nil:
		return fromProblem(v1.ConditionGitReachable, gitProblem, "", ""), localErr
	case r.lastPush != nil:
		return condition(v1.ConditionGitReachable, true, "Pushed", "The last push succeeded."), localErr
	}
	return metav1.Condition{Type: v1.ConditionGitReachable, Status: metav1.ConditionUnknown,
		Reason: "NotYetPushed", Message: "Nothing has been pushed yet."}, localErr
}

// streamsRunning is the StreamsRunning condition; msg sums the streams up.
func streamsRunning(st *observed, h streamHealth, msg string) metav1.Condition {
	stopped := firstProblem(st.config, st.source, st.git)
	switch {
	case st.suspended:
		return condition(v1.ConditionStreamsRunning, false, v1.ReasonSuspended, "spec.suspend is true: no stream runs")
	case len(h.forbidden) > 0:
		return condition(v1.ConditionStreamsRunning, false, "Forbidden", strings.Join(h.forbidden, "; ")+
			": for Secrets, bind ClusterRole reverser-controller-secrets to it in that namespace; for another kind, add a ClusterRole "+
			"labelled reverser.dev/aggregate-to-controller: \"true\" that reads it (docs/install.md)")
	case len(h.failing) > 0:
		return condition(v1.ConditionStreamsRunning, false, "WatchFailed", strings.Join(h.failing, "; "))
	case len(st.streams) == 0 && stopped != nil:
		return condition(v1.ConditionStreamsRunning, false, "Stopped", "Not mirroring: "+stopped.message)
	case len(st.streams) == 0 && len(st.refused) > 0:
		return condition(v1.ConditionStreamsRunning, false, "RulesRefused", strings.Join(st.refused, "; "))
	case len(st.streams) == 0:
		return condition(v1.ConditionStreamsRunning, false, "NoRules", "No WatchRule or ClusterWatchRule selects anything for this GitTarget.")
	case int(h.running) < len(st.streams):
		return condition(v1.ConditionStreamsRunning, false, "Starting", msg)
	}
	return condition(v1.ConditionStreamsRunning, true, "Watching", msg)
}

// readiness sets Ready, and Stalled when a person must change something:
// the first False of the conditions Ready sums up, else what keeps a
// running mirror from being Ready.
func readiness(gt *v1.GitTarget, st *observed, r reported, localErr *worker.LocalError, status *v1.GitTargetStatus, msg string) {
	ready := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Mirroring", Message: msg}
	for _, t := range []string{v1.ConditionSourceReachable, v1.ConditionGitReachable, v1.ConditionStreamsRunning} {
		if c := meta.FindStatusCondition(status.Conditions, t); c != nil && c.Status == metav1.ConditionFalse {
			ready = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: c.Reason, Message: c.Message}
			break
		}
	}
	if st.suspended {
		// Asked for, so not a failure: kstatus tools (Flux's health
		// checks, kubectl wait) read it Current and do not wait on it.
		ready = condition(v1.ConditionReady, true, v1.ReasonSuspended, "spec.suspend is true: nothing is mirrored until it is false again (kubectl reverser resume)")
	}
	if r.unapplied != "" && gt.Spec.ApplierRef != nil && ready.Status == metav1.ConditionTrue {
		// Not Stalled: the applier's next converge may settle it.
		ready = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonNotApplied, Message: r.unapplied}
	}
	if localErr != nil && ready.Status == metav1.ConditionTrue {
		ready = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: "CommitFailed", Message: fmt.Sprintf(
			"%v: the controller cannot write its local clone under --data-dir (is the volume full?); "+
				"the changes wait in memory and are committed once it can", localErr)}
	}
	switch {
	case st.config != nil:
		ready = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: st.config.reason, Message: st.config.message}
		meta.SetStatusCondition(&status.Conditions, condition(v1.ConditionStalled, true, st.config.reason, st.config.message))
	case lasting(st.source, st.git) != nil:
		// Only a person restores it (a provider or Secret gone, a refused
		// credential): kstatus tools must read Failed, not Current.
		p := lasting(st.source, st.git)
		ready = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: p.reason, Message: p.message}
		meta.SetStatusCondition(&status.Conditions, condition(v1.ConditionStalled, true, p.reason, p.message))
	case len(r.refused) > 0:
		// The other changes go on; these wait for a change of the
		// repository or of the objects (docs/layout.md).
		msg := strings.Join(r.refused, "; ") + ": edit the repository by hand, or change the object so it can be written"
		ready = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonWriteRefused, Message: msg}
		meta.SetStatusCondition(&status.Conditions, condition(v1.ConditionStalled, true, v1.ReasonWriteRefused, msg))
	default:
		meta.RemoveStatusCondition(&status.Conditions, v1.ConditionStalled)
	}
	meta.SetStatusCondition(&status.Conditions, ready)
}

// writeStatus reports what a reconcile observed, when it differs from what
// the GitTarget says already.
func (c *Controller) writeStatus(ctx context.Context, gt *v1.GitTarget, st *observed) error {
	key := gt.Namespace + "/" + gt.Name
	r := c.reported(key)
	status := gt.Status.DeepCopy()
	status.ObservedGeneration = gt.Generation
	if st.handled != "" {
		status.LastHandledReconcileAt = st.handled
	}
	if r.lastCommit != nil {
		status.LastCommit = r.lastCommit
	}
	if r.lastPush != nil {
		status.LastPush = r.lastPush
	}
	h := healthOf(st.streams)
	status.Streams = v1.StreamCounts{Desired: int32(len(st.streams)), Running: h.running}
	starting := int(h.running) < len(st.streams)

	meta.SetStatusCondition(&status.Conditions, fromProblem(v1.ConditionSourceReachable, st.source, "Reachable", "The source cluster answers."))
	git, localErr := gitReachable(st, r)
	meta.SetStatusCondition(&status.Conditions, git)
	msg := fmt.Sprintf("%d of %d streams watching.", h.running, len(st.streams))
	if st.secrets {
		msg += " Secrets are not written, since they are never written in clear: set spec.encryption.sops.ageRecipients to write them encrypted."
	}
	if len(st.refused) > 0 {
		msg += " Refused: " + strings.Join(st.refused, "; ")
	}
	meta.SetStatusCondition(&status.Conditions, streamsRunning(st, h, msg))
	readiness(gt, st, r, localErr, status, msg)
	switch {
	case st.ending:
		meta.SetStatusCondition(&status.Conditions, condition(v1.ConditionReconciling, true, v1.ReasonSuspending,
			"Committing and pushing the changes received before spec.suspend; then nothing more."))
	case starting:
		meta.SetStatusCondition(&status.Conditions, condition(v1.ConditionReconciling, true, "Starting", msg))
	default:
		meta.RemoveStatusCondition(&status.Conditions, v1.ConditionReconciling)
	}

	readyNow := 0.0
	if meta.IsStatusConditionTrue(status.Conditions, v1.ConditionReady) {
		readyNow = 1
	}
	metrics.GitTargetReady.WithLabelValues(gt.Namespace, gt.Name).Set(readyNow)
	if apiequality.Semantic.DeepEqual(status, &gt.Status) {
		return nil
	}
	updated := gt.DeepCopy()
	updated.Status = *status
	_, err := c.cfg.Reverser.ReverserV1alpha1().GitTargets(gt.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Written from a stale copy: the change that made it stale brings
		// a reconcile; the status is written again from the newest.
		c.statusQueue.Add(key)
		return nil
	}
	if err == nil {
		c.cfg.Events.Changed(gt, gt.Status.Conditions, status.Conditions, v1.ConditionReady)
	}
	if err == nil && starting {
		c.statusQueue.AddAfter(key, 500*time.Millisecond) // report streams as they finish their initial state
	}
	return err
}

// writeRuleStatus writes a WatchRule's status; refused says it was refused
// by this write, for an Event on the GitTarget it names.
func (c *Controller) writeRuleStatus(ctx context.Context, wr *v1.WatchRule, res resolve.Result, denied *problem) (refused bool) {
	return c.writeRule(ctx, wr, &wr.Status, wr.Generation, res, denied, func(status v1.WatchRuleStatus) error {
		updated := wr.DeepCopy()
		updated.Status = status
		_, err := c.cfg.Reverser.ReverserV1alpha1().WatchRules(wr.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		return err
	})
}

func (c *Controller) writeClusterRuleStatus(ctx context.Context, cwr *v1.ClusterWatchRule, res resolve.Result, denied *problem) (refused bool) {
	return c.writeRule(ctx, cwr, &cwr.Status, cwr.Generation, res, denied, func(status v1.WatchRuleStatus) error {
		updated := cwr.DeepCopy()
		updated.Status = status
		_, err := c.cfg.Reverser.ReverserV1alpha1().ClusterWatchRules().UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		return err
	})
}

// writeRule writes a rule's resolution when it differs from what the rule
// says, and records the change of its Ready; a conflict is left to the
// next reconcile. refused says this write refused the rule.
func (c *Controller) writeRule(ctx context.Context, obj ruleObject, cur *v1.WatchRuleStatus, generation int64, res resolve.Result, denied *problem,
	update func(v1.WatchRuleStatus) error) (refused bool) {
	status := ruleStatus(*cur, generation, res, denied)
	if apiequality.Semantic.DeepEqual(status, *cur) {
		return false
	}
	if err := update(status); err != nil {
		if !apierrors.IsConflict(err) {
			klog.FromContext(ctx).Error(err, "Writing rule status", "rule", klog.KObj(obj))
		}
		return false
	}
	c.cfg.Events.Changed(obj, cur.Conditions, status.Conditions, v1.ConditionReady)
	was := meta.FindStatusCondition(cur.Conditions, v1.ConditionReady)
	return denied != nil && (was == nil || was.Reason != denied.reason)
}

// ruleObject is a WatchRule or a ClusterWatchRule.
type ruleObject interface {
	klog.KMetadata
	runtime.Object
}

// ruleStatus is a rule's status after a reconcile: denied, when set, says
// why the rule feeds nothing (not lent, authorised or accepted).
func ruleStatus(cur v1.WatchRuleStatus, generation int64, res resolve.Result, denied *problem) v1.WatchRuleStatus {
	s := *cur.DeepCopy()
	s.ObservedGeneration = generation
	s.Resolved = nil
	for _, gvr := range res.GVRs {
		s.Resolved = append(s.Resolved, document.GVRString(gvr))
	}
	slices.Sort(s.Resolved)
	s.Unresolved = res.Unresolved
	if denied != nil && !denied.transient {
		// Only a person restores it: a right, a loan, the GitTarget.
		meta.SetStatusCondition(&s.Conditions, condition(v1.ConditionStalled, true, denied.reason, denied.message))
	} else {
		meta.RemoveStatusCondition(&s.Conditions, v1.ConditionStalled)
	}
	switch {
	case denied != nil:
		meta.SetStatusCondition(&s.Conditions, condition(v1.ConditionReady, false, denied.reason, denied.message))
	case len(res.Unresolved) > 0:
		meta.SetStatusCondition(&s.Conditions, condition(v1.ConditionReady, false, "Unresolved",
			"Not served or not allowed: "+strings.Join(res.Unresolved, "; ")+". The rest is mirrored."))
	case len(res.GVRs) == 0:
		meta.SetStatusCondition(&s.Conditions, condition(v1.ConditionReady, false, "NothingSelected", "The rules select no resource the source serves."))
	default:
		meta.SetStatusCondition(&s.Conditions, condition(v1.ConditionReady, true, "Resolved", fmt.Sprintf("%d resources selected.", len(res.GVRs))))
	}
	return s
}
