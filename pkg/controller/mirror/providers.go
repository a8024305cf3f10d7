package mirror

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/controller/gitprovider"
	"reverser.dev/reverser/pkg/redact"
)

// problem is a condition-ready explanation: a reason and a message that says
// what to fix, which condition reports it, and whether it may pass by
// itself (an unreachable server) or is a fact that stops the mirror (a
// missing provider, a withdrawn loan or right).
type problem struct {
	reason, message string
	area            area
	transient       bool
}

// area is the condition a problem is reported in.
type area int

const (
	areaSource area = iota // SourceReachable
	areaGit                // GitReachable
	areaConfig             // Stalled
)

func (p *problem) Error() string { return p.reason + ": " + p.message }

// in moves a problem to another condition.
func (p *problem) in(a area) *problem {
	p.area = a
	return p
}

// problemf is a lasting problem: the mirror stops until it is fixed.
func problemf(reason, format string, args ...any) *problem {
	return &problem{reason: reason, message: fmt.Sprintf(format, args...)}
}

// asProblem keeps a problem an error wraps; any other error is transient,
// with the given reason.
func asProblem(err error, reason string) *problem {
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	// A lasting problem of another package: a KubeProvider's or a
	// GitProvider's Secret.
	var r interface {
		Condition() (reason, message string)
	}
	if errors.As(err, &r) {
		reason, message := r.Condition()
		return problemf(reason, "%s", message)
	}
	return &problem{reason: reason, message: redact.Text(err.Error()), transient: true}
}

// secretsAuthorized asks again whether the GitProvider's author may get
// every Secret it names (gitprovider.Authorized).
func (c *Controller) secretsAuthorized(ctx context.Context, gp *v1.GitProvider) *problem {
	if err := gitprovider.Authorized(ctx, c.cfg.Authorizer, gp, time.Now(), c.cfg.RecordedGroupsMaxAge); err != nil {
		return asProblem(err, "SecretCheckFailed").in(areaGit)
	}
	return nil
}

// branchAllowed applies a GitProvider's allowedBranches.
func branchAllowed(gp *v1.GitProvider, branch string) bool {
	for _, pattern := range gp.Spec.AllowedBranches {
		if ok, _ := path.Match(pattern, branch); ok || pattern == "*" {
			return true
		}
	}
	return false
}
