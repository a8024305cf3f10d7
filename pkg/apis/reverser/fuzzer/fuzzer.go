// Package fuzzer fills reverser.dev objects with random values that survive
// defaulting, for the conversion round-trip test.
package fuzzer

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"reverser.dev/reverser/pkg/apis/reverser"
)

// Funcs returns the fuzzer functions of reverser.dev. Each sets the fields
// that have defaults, since decoding would default them otherwise.
var Funcs = func(runtimeserializer.CodecFactory) []any {
	dur := func(d **metav1.Duration, c randfill.Continue) {
		if *d == nil {
			*d = &metav1.Duration{Duration: time.Duration(c.Int63n(int64(time.Hour)))}
		}
	}
	orStr := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	return []any{
		func(s *reverser.GitProviderSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.AllowedBranches == nil {
				s.AllowedBranches = []string{"*"}
			}
			orStr(&s.Committer.Name, "Reverser")
			orStr(&s.Committer.Email, "reverser@reverser.dev")
		},
		func(s *reverser.KubeProviderSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.ConsumerNamespaces == nil {
				s.ConsumerNamespaces = &reverser.NamespaceSelection{From: reverser.NamespacesFromAll}
			}
			if s.CommitRequests == "" {
				s.CommitRequests = reverser.CommitRequestsIgnore
			}
		},
		func(s *reverser.GitTargetSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.Prune == "" {
				s.Prune = reverser.PruneAlways
			}
			if s.AllowedCommitRequests == nil {
				s.AllowedCommitRequests = []reverser.CommitRequestGrant{}
			}
			dur(&s.Commit.Window.Silence, c)
			dur(&s.Commit.Window.MaxAge, c)
		},
		func(s *reverser.CommitRequestSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			orStr((*string)(&s.Attach), string(reverser.AttachCurrent))
			orStr((*string)(&s.WhenNothingToCommit), string(reverser.NothingToCommitSkip))
			orStr((*string)(&s.CatchUp), string(reverser.CatchUpAsDefinedOnClaim))
			dur(&s.Window.AttachTimeout, c)
		},
		func(s *reverser.FluxClaimSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			dur(&s.CatchUpAfter, c)
		},
		func(s *reverser.ArgoCDClaimSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			dur(&s.CatchUpAfter, c)
		},
	}
}
