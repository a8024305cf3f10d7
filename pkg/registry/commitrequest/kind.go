// Package commitrequest stores CommitRequests. The author of a request is
// whoever the API server authenticated for its create; nothing a client sends
// can set or change it.
package commitrequest

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"reverser.dev/reverser/pkg/apis/reverser"
	"reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/apis/reverser/validation"
	"reverser.dev/reverser/pkg/registry"
)

// Kind describes CommitRequest storage.
var Kind = &registry.Kind[*reverser.CommitRequest]{
	Resource:         "commitrequests",
	Singular:         "commitrequest",
	ShortNames:       []string{"creq"},
	Namespaced:       true,
	New:              func() *reverser.CommitRequest { return &reverser.CommitRequest{} },
	NewList:          func() runtime.Object { return &reverser.CommitRequestList{} },
	PrepareForCreate: prepareForCreate,
	PrepareStatusUpdate: func(o, old *reverser.CommitRequest) {
		o.Status.Author = old.Status.Author
	},
	Validate: func(o *reverser.CommitRequest) field.ErrorList {
		errs := validation.ValidateCommitRequestSpec(&o.Spec, field.NewPath("spec"))
		if o.Status.Author == nil {
			// Only reachable when authentication is switched off: refuse
			// rather than store a request nobody can be credited with.
			errs = append(errs, field.InternalError(field.NewPath("status", "author"), errNoUser))
		}
		return errs
	},
	ValidateUpdate: func(o, old *reverser.CommitRequest) field.ErrorList {
		return validation.ValidateCommitRequestUpdate(&o.Spec, &old.Spec, field.NewPath("spec"))
	},
	ExtraFields: func(o *reverser.CommitRequest) fields.Set {
		return fields.Set{v1alpha1.CommitRequestGitTargetNameField: o.Spec.GitTargetRef.Name}
	},
	Table: registry.TableSpec[*reverser.CommitRequest]{Columns: []registry.Column[*reverser.CommitRequest]{
		{Name: "Target", Type: "string", Description: "The GitTarget saved.", Value: func(o *reverser.CommitRequest) any {
			if o.Spec.GitTargetRef.Namespace != "" && o.Spec.GitTargetRef.Namespace != o.Namespace {
				return o.Spec.GitTargetRef.Namespace + "/" + o.Spec.GitTargetRef.Name
			}
			return o.Spec.GitTargetRef.Name
		}},
		{Name: "Author", Type: "string", Description: "Who asked for the save.", Value: func(o *reverser.CommitRequest) any {
			if o.Status.Author == nil {
				return ""
			}
			return o.Status.Author.Username
		}},
		registry.ReadyColumn[*reverser.CommitRequest]("Status of the Ready condition."),
		{Name: "Reason", Type: "string", Description: "Outcome of the save.", Value: func(o *reverser.CommitRequest) any {
			return registry.ConditionReason(o.Status.Conditions, v1alpha1.ConditionReady)
		}},
		{Name: "Commit", Type: "string", Description: "The commit written.", Value: func(o *reverser.CommitRequest) any {
			return registry.ShortSHA(o.Status.Commit)
		}},
		{Name: "Message", Type: "string", Priority: 1, Description: "First line of the message.", Value: func(o *reverser.CommitRequest) any {
			return firstLine(o.Spec.Message)
		}},
	}},
}

var errNoUser = errors.New("the request carries no authenticated user")

func prepareForCreate(ctx context.Context, o *reverser.CommitRequest) {
	if o.Spec.GitTargetRef.Namespace == "" {
		o.Spec.GitTargetRef.Namespace = o.Namespace
	}
	o.Status.Author = registry.RequestAuthor(ctx)
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' || r == '\r' {
			return s[:i]
		}
	}
	return s
}
