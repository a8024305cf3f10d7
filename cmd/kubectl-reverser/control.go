package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
)

// control is what suspend, resume and reconcile share: a patch of one
// GitTarget, then a wait until the controller has answered it.
type control struct {
	use, short string
	// patch is the merge patch; now is the request's time.
	patch func(now string) string
	// answered says the GitTarget's status answers the patch.
	answered func(gt *v1.GitTarget, now string) bool
	// done is printed once answered.
	done string
}

var controls = []control{
	{use: "suspend", short: "Stop mirroring a GitTarget once what it received is committed and pushed",
		patch: func(string) string { return `{"spec":{"suspend":true}}` },
		answered: func(gt *v1.GitTarget, _ string) bool {
			r := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionReady)
			return observed(gt) && r != nil && r.Reason == v1.ReasonSuspended &&
				!meta.IsStatusConditionTrue(gt.Status.Conditions, v1.ConditionReconciling)
		},
		done: "suspended: what it received before is committed and pushed"},
	{use: "resume", short: "Mirror a suspended GitTarget again; only what changed meanwhile is committed",
		patch: func(string) string { return `{"spec":{"suspend":null}}` },
		answered: func(gt *v1.GitTarget, _ string) bool {
			r := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionReady)
			return observed(gt) && r != nil && r.Reason != v1.ReasonSuspended &&
				!meta.IsStatusConditionTrue(gt.Status.Conditions, v1.ConditionReconciling)
		},
		done: "resumed"},
	{use: "reconcile", short: "Ask the controller to reconcile a GitTarget now, not at the next resync",
		patch: func(now string) string {
			return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.ReconcileRequestedAtAnnotation, now)
		},
		answered: func(gt *v1.GitTarget, now string) bool { return gt.Status.LastHandledReconcileAt == now },
		done:     "reconciled"},
}

func observed(gt *v1.GitTarget) bool { return gt.Status.ObservedGeneration == gt.Generation }

func controlCommand(g *globals, ctl control) *cobra.Command {
	var timeout time.Duration
	var noWait bool
	cmd := &cobra.Command{
		Use:               ctl.use + " <gittarget>",
		Short:             ctl.short,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeGitTargets,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return ctl.run(ctx, cmd.OutOrStdout(), c, ns, args[0], !noWait)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the controller's answer")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "patch the GitTarget and return without waiting")
	return cmd
}

func (ctl control) run(ctx context.Context, out io.Writer, c versioned.Interface, ns, name string, wantWait bool) error {
	now := time.Now().UTC().Format(time.RFC3339Nano)
	api := c.ReverserV1alpha1().GitTargets(ns)
	if _, err := api.Patch(ctx, name, types.MergePatchType, []byte(ctl.patch(now)), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("%s gittarget %s/%s: %w", ctl.use, ns, name, err)
	}
	if !wantWait {
		fmt.Fprintf(out, "gittarget %s/%s: %s asked\n", ns, name, ctl.use)
		return nil
	}
	var last *v1.GitTarget
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		gt, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = gt
		return ctl.answered(gt, now), nil
	})
	if err != nil {
		return fmt.Errorf("gittarget %s/%s: no answer to %s before --timeout: %s", ns, name, ctl.use, readyOf(last))
	}
	fmt.Fprintf(out, "gittarget %s/%s %s: %s\n", ns, name, ctl.done, readyOf(last))
	return nil
}

// readyOf sums up a GitTarget's Ready condition.
func readyOf(gt *v1.GitTarget) string {
	if gt == nil {
		return "not read"
	}
	r := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionReady)
	if r == nil {
		return "Ready unknown"
	}
	return fmt.Sprintf("Ready=%s %s: %s", r.Status, r.Reason, r.Message)
}

// completeGitTargets completes the GitTarget names of the namespace.
func (g *globals) completeGitTargets(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, ns, err := g.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	list, err := c.ReverserV1alpha1().GitTargets(ns).List(cmd.Context(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	names := make([]string, 0, len(list.Items))
	for _, gt := range list.Items {
		names = append(names, gt.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
