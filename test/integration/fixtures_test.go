package integration

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
)

const ns = "demo"

func objMeta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }

func gitProvider(name string) *v1.GitProvider {
	return &v1.GitProvider{ObjectMeta: objMeta(name), Spec: v1.GitProviderSpec{URL: "https://git.example.com/org/repo.git"}}
}

func kubeProvider(name string) *v1.KubeProvider {
	return &v1.KubeProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.KubeProviderSpec{InCluster: true}}
}

func gitTarget(name string) *v1.GitTarget {
	return &v1.GitTarget{ObjectMeta: objMeta(name), Spec: v1.GitTargetSpec{
		KubeProviderRef: v1.LocalObjectReference{Name: "local"},
		GitProviderRef:  v1.LocalObjectReference{Name: "repo"},
		Branch:          "main",
		Path:            "clusters/dev",
	}}
}

func watchRule(name string) *v1.WatchRule {
	return &v1.WatchRule{ObjectMeta: objMeta(name), Spec: v1.WatchRuleSpec{
		GitTargetRef: v1.LocalObjectReference{Name: "site"},
		Rules:        []v1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}},
	}}
}

func clusterWatchRule(name string) *v1.ClusterWatchRule {
	return &v1.ClusterWatchRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.ClusterWatchRuleSpec{
		GitTargetRef: v1.ObjectReference{Namespace: ns, Name: "site"},
		Rules:        []v1.ResourceRule{{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles"}}},
	}}
}

func commitRequest(name, target string) *v1.CommitRequest {
	return &v1.CommitRequest{ObjectMeta: objMeta(name), Spec: v1.CommitRequestSpec{
		GitTargetRef: v1.ObjectReference{Name: target},
		Message:      "Save " + name,
	}}
}

func fluxClaim(name string) *v1.FluxClaim {
	return &v1.FluxClaim{ObjectMeta: objMeta(name), Spec: v1.FluxClaimSpec{
		KubeProviderRef:  v1.LocalObjectReference{Name: "local"},
		KustomizationRef: v1.ObjectReference{Namespace: "flux-system", Name: "apps"},
	}}
}

func argoCDClaim(name string) *v1.ArgoCDClaim {
	return &v1.ArgoCDClaim{ObjectMeta: objMeta(name), Spec: v1.ArgoCDClaimSpec{
		KubeProviderRef: v1.LocalObjectReference{Name: "local"},
		ApplicationRef:  v1.ObjectReference{Namespace: "argocd", Name: "apps"},
	}}
}
