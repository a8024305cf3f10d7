package mirror

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/attribution"
	"reverser.dev/reverser/pkg/controller/providerstatus"
)

// AuditRoute returns the audit route of a KubeProvider, for the ingress:
// only providers with audit enabled have one. It reads informer caches only,
// so the ingress authenticates without any API call.
func (c *Controller) AuditRoute(name string) (attribution.Route, bool) {
	kp, err := c.kps.Get(name)
	if err != nil || !kp.Spec.Audit.Enabled {
		return attribution.Route{}, false
	}
	route := attribution.Route{CommonNames: kp.Spec.Audit.ClientCertificateCommonNames}
	if ref := kp.Spec.Audit.BearerTokenSecretRef; ref != nil {
		token, err := c.providerSecret("KubeProvider "+kp.Name, ref)
		if err != nil {
			klog.V(2).InfoS("No audit token", "kubeProvider", name, "err", err)
		} else {
			route.Token = token
		}
	}
	return route, true
}

// reportProviders hands the KubeProvider status writer each provider's
// Ready (from the last discovery through it) and AuditFactsReceived
// conditions, and when its last audit fact arrived.
func (c *Controller) reportProviders(context.Context) {
	kps, err := c.kps.List(labels.Everything())
	if err != nil {
		return
	}
	c.pruneSources(kps)
	for _, kp := range kps {
		part := providerstatus.Part{Conditions: []metav1.Condition{c.providerReady(kp.Name)}}
		last, received := time.Time{}, false
		if c.cfg.Facts != nil {
			last, received = c.cfg.Facts.LastReceived(kp.Name)
		}
		switch {
		case !kp.Spec.Audit.Enabled:
			part.Conditions = append(part.Conditions, condition(v1.ConditionAuditFactsReceived, false, "Disabled",
				"spec.audit.enabled is false: changes are authored by each GitProvider's committer."))
		case received:
			part.Fields = func(s *v1.KubeProviderStatus) { s.LastAuditFactTime = &metav1.Time{Time: last.Truncate(time.Second)} }
			part.Conditions = append(part.Conditions, condition(v1.ConditionAuditFactsReceived, true, "Received",
				"Audit events arrive; changes are authored by the people who made them."))
		default:
			part.Conditions = append(part.Conditions, condition(v1.ConditionAuditFactsReceived, false, "NoAuditEvents",
				fmt.Sprintf("No audit event has arrived on POST %s%s: point kube-apiserver's --audit-webhook-config-file at it, "+
					"with a policy that logs writes at RequestResponse. Until then changes are authored %q.",
					attribution.RoutePrefix, kp.Name, attribution.UnresolvedName)))
		}
		c.cfg.ProviderStatus.Report(kp.Name, "mirror", part)
	}
}

// providerReady is a KubeProvider's Ready: whether the last discovery
// through it answered.
func (c *Controller) providerReady(name string) metav1.Condition {
	c.mu.Lock()
	src := c.sources[name]
	var used bool
	var discoveryErr error
	if src != nil {
		used, discoveryErr = !src.discoveredAt.IsZero(), src.discoveryErr
	}
	c.mu.Unlock()
	switch {
	case !used:
		return metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionUnknown,
			Reason: "NotUsed", Message: "No GitTarget mirrors this cluster yet."}
	case discoveryErr != nil:
		return condition(v1.ConditionReady, false, "Unreachable", discoveryErr.Error()+": check the cluster's address and the credential's permissions")
	}
	return condition(v1.ConditionReady, true, "Reachable", "The cluster answers discovery.")
}

// pruneSources forgets the clients of KubeProviders that no longer exist.
func (c *Controller) pruneSources(kps []*v1.KubeProvider) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.sources {
		if !slices.ContainsFunc(kps, func(kp *v1.KubeProvider) bool { return kp.Name == name }) {
			delete(c.sources, name)
		}
	}
}
