// Package gittarget stores GitTargets.
package gittarget

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes GitTarget storage.
var Kind = &registry.Kind[*reverser.GitTarget]{
	Resource:   "gittargets",
	Singular:   "gittarget",
	ShortNames: []string{"gt"},
	Namespaced: true,
	New:        func() *reverser.GitTarget { return &reverser.GitTarget{} },
	NewList:    func() runtime.Object { return &reverser.GitTargetList{} },
	// The path is stored canonical (no trailing '/'); it cannot change later.
	PrepareForCreate: func(_ context.Context, o *reverser.GitTarget) {
		o.Spec.Path = validation.NormalizeRepoPath(o.Spec.Path)
	},
	// Re-applying the manifest that created the target, trailing '/' and
	// all, is not a change of the immutable path.
	PrepareForUpdate: func(_ context.Context, o, _ *reverser.GitTarget) {
		o.Spec.Path = validation.NormalizeRepoPath(o.Spec.Path)
	},
	Validate: func(o *reverser.GitTarget) field.ErrorList {
		return validation.ValidateGitTargetSpec(&o.Spec, field.NewPath("spec"))
	},
	ValidateUpdate: func(o, old *reverser.GitTarget) field.ErrorList {
		return validation.ValidateGitTargetUpdate(&o.Spec, &old.Spec, field.NewPath("spec"))
	},
	Table: registry.TableSpec[*reverser.GitTarget]{Columns: []registry.Column[*reverser.GitTarget]{
		{Name: "Provider", Type: "string", Description: "The GitProvider written to.", Value: func(o *reverser.GitTarget) any {
			return o.Spec.GitProviderRef.Name
		}},
		{Name: "Branch", Type: "string", Description: "The branch written to.", Value: func(o *reverser.GitTarget) any { return o.Spec.Branch }},
		{Name: "Path", Type: "string", Description: "The folder of the mirror.", Value: func(o *reverser.GitTarget) any { return o.Spec.Path }},
		registry.ReadyColumn[*reverser.GitTarget]("Whether the mirror runs."),
		{Name: "Last Commit", Type: "string", Description: "The newest commit written.", Value: func(o *reverser.GitTarget) any {
			if o.Status.LastCommit == nil {
				return ""
			}
			return registry.ShortSHA(o.Status.LastCommit.SHA)
		}},
		{Name: "Source", Type: "string", Priority: 1, Description: "The KubeProvider mirrored.", Value: func(o *reverser.GitTarget) any {
			return o.Spec.KubeProviderRef.Name
		}},
		{Name: "Streams", Type: "string", Priority: 1, Description: "Running/desired watch streams.", Value: func(o *reverser.GitTarget) any {
			return streams(o.Status.Streams)
		}},
		registry.ReasonColumn[*reverser.GitTarget](),
	}},
}

func streams(s reverser.StreamCounts) string {
	if s.Desired == 0 && s.Running == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Running, s.Desired)
}
