// Package event records Kubernetes Events on the Reverser objects users
// look at (`kubectl describe`, `kubectl events`): a push, a rejected push
// replayed, a write or rule refused, a claim held or released, a save's
// outcome (#29).
//
// Events go through client-go's record broadcaster: its correlator
// deduplicates identical Events into a count and rate-limits each object's
// stream, and recording never blocks the caller (a full queue drops the
// Event). A nil *Recorder records nothing, for units and for objects whose
// cluster Reverser does not record into (source clusters' CommitRequests).
//
// Messages come from status conditions and commit hashes only: no Secret
// value, token or credential-bearing URL belongs in one (the e2e plaintext
// grep reads every Event).
package event

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	reverserscheme "reverser.dev/reverser/pkg/generated/clientset/versioned/scheme"
)

// Reasons of the Events that are not a condition's change.
const (
	// ReasonPushed: a commit reached the remote branch.
	ReasonPushed = "Pushed"
	// ReasonReplayed: the remote branch had moved; Reverser fetched it and
	// replayed its open commits on top.
	ReasonReplayed = "Replayed"
	// ReasonRuleRefused: a rule of the GitTarget feeds it nothing.
	ReasonRuleRefused = "RuleRefused"
	// ReasonSaved and ReasonSaveFailed: a CommitRequest of the GitTarget
	// ended.
	ReasonSaved      = "Saved"
	ReasonSaveFailed = "SaveFailed"
	// ReasonHeld and ReasonReleased: a claim began or ended holding its
	// applier's schedule.
	ReasonHeld     = "Held"
	ReasonReleased = "Released"
)

// Recorder records Events on Reverser's objects and the built-in ones.
type Recorder struct {
	rec record.EventRecorder
}

// New wraps rec; tests pass a record.FakeRecorder.
func New(rec record.EventRecorder) *Recorder {
	return &Recorder{rec: rec}
}

// Scheme knows Reverser's kinds, so that an object read from a lister (no
// TypeMeta) is referred to by its kind.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(reverserscheme.AddToScheme(s))
	return s
}

// Broadcast records into kube's Events as component until ctx ends.
func Broadcast(ctx context.Context, kube kubernetes.Interface, component string) *Recorder {
	b := record.NewBroadcaster(record.WithContext(ctx)) // shut down when ctx ends
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return New(b.NewRecorder(Scheme(), corev1.EventSource{Component: component}))
}

// Normal records a Normal Event on obj.
func (r *Recorder) Normal(obj runtime.Object, reason, format string, args ...any) {
	if r != nil {
		r.rec.Event(obj, corev1.EventTypeNormal, reason, fmt.Sprintf(format, args...))
	}
}

// Warning records a Warning Event on obj.
func (r *Recorder) Warning(obj runtime.Object, reason, format string, args ...any) {
	if r != nil {
		r.rec.Event(obj, corev1.EventTypeWarning, reason, fmt.Sprintf(format, args...))
	}
}

// Changed records, for each condition type of types, an Event when its
// status or reason differs from before to after: Normal when it became
// True, Warning when False, none while Unknown (nothing is known yet) or
// while Reconciling is True (work under way, not a problem yet). Call
// it once after is written, so that a retried write records nothing twice.
func (r *Recorder) Changed(obj runtime.Object, before, after []metav1.Condition, types ...string) {
	if r == nil {
		return
	}
	for _, t := range types {
		now := meta.FindStatusCondition(after, t)
		if now == nil || now.Status == metav1.ConditionUnknown {
			continue
		}
		if was := meta.FindStatusCondition(before, t); was != nil && was.Status == now.Status && was.Reason == now.Reason {
			continue
		}
		switch {
		case now.Status == metav1.ConditionTrue:
			r.Normal(obj, now.Reason, "%s", now.Message)
		case meta.IsStatusConditionTrue(after, v1.ConditionReconciling):
			// Not ready because work is under way (kstatus InProgress):
			// the Event comes when it ends, either way.
		default:
			r.Warning(obj, now.Reason, "%s", now.Message)
		}
	}
}

// Drain returns the Events rec holds, in order, emptying it: for tests,
// whose FakeRecorder writes "<type> <reason> <message>" strings.
func Drain(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
