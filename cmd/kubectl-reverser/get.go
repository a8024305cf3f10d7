package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
)

// row is one Reverser object as get shows it.
type row struct {
	kind, namespace, name string
	generation            int64
	observed              int64
	conditions            []metav1.Condition
	suspended             bool
}

func getCommand(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Every Reverser object of the namespace (or -A, all) with its Ready condition, in one table",
		Long: "get lists GitProviders, GitTargets, WatchRules, FluxClaims, ArgoCDClaims and CommitRequests of the namespace,\n" +
			"and the cluster's KubeProviders and ClusterWatchRules, each with Ready, its reason and message. Kinds you may\n" +
			"not list are left out and named at the end. The exit code is 1 when any object is not Ready.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := g.clientIn(all)
			if err != nil {
				return err
			}
			rows, refused := listAll(cmd.Context(), c, ns)
			notReady, err := printRows(cmd.OutOrStdout(), rows)
			if err != nil {
				return err
			}
			for _, r := range refused {
				fmt.Fprintln(cmd.ErrOrStderr(), "not listed:", r)
			}
			if notReady > 0 {
				return fmt.Errorf("%d of %d objects are not Ready", notReady, len(rows))
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	return cmd
}

// listAll lists every kind; a list that fails is named in refused.
func listAll(ctx context.Context, c versioned.Interface, ns string) (rows []row, refused []string) {
	api := c.ReverserV1alpha1()
	opts := metav1.ListOptions{}
	add := func(kind string, err error, items func() []row) {
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s: %v", kind, err))
			return
		}
		for _, r := range items() {
			r.kind = kind
			rows = append(rows, r)
		}
	}
	kps, err := api.KubeProviders().List(ctx, opts)
	add("KubeProvider", err, func() []row {
		return rowsOf(kps.Items, func(o v1.KubeProvider) row {
			return rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions)
		})
	})
	gps, err := api.GitProviders(ns).List(ctx, opts)
	add("GitProvider", err, func() []row {
		return rowsOf(gps.Items, func(o v1.GitProvider) row {
			return rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions)
		})
	})
	gts, err := api.GitTargets(ns).List(ctx, opts)
	add("GitTarget", err, func() []row {
		return rowsOf(gts.Items, func(o v1.GitTarget) row {
			r := rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions)
			r.suspended = o.Spec.Suspend
			return r
		})
	})
	wrs, err := api.WatchRules(ns).List(ctx, opts)
	add("WatchRule", err, func() []row {
		return rowsOf(wrs.Items, func(o v1.WatchRule) row { return rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions) })
	})
	cwrs, err := api.ClusterWatchRules().List(ctx, opts)
	add("ClusterWatchRule", err, func() []row {
		return rowsOf(cwrs.Items, func(o v1.ClusterWatchRule) row {
			return rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions)
		})
	})
	fcs, err := api.FluxClaims(ns).List(ctx, opts)
	add("FluxClaim", err, func() []row {
		return rowsOf(fcs.Items, func(o v1.FluxClaim) row { return rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions) })
	})
	acs, err := api.ArgoCDClaims(ns).List(ctx, opts)
	add("ArgoCDClaim", err, func() []row {
		return rowsOf(acs.Items, func(o v1.ArgoCDClaim) row {
			return rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions)
		})
	})
	crs, err := api.CommitRequests(ns).List(ctx, opts)
	add("CommitRequest", err, func() []row {
		return rowsOf(crs.Items, func(o v1.CommitRequest) row {
			return rowOf(o.ObjectMeta, o.Status.ObservedGeneration, o.Status.Conditions)
		})
	})
	return rows, refused
}

func rowOf(m metav1.ObjectMeta, observed int64, conditions []metav1.Condition) row {
	return row{namespace: m.Namespace, name: m.Name, generation: m.Generation, observed: observed, conditions: conditions}
}

func rowsOf[T any](items []T, f func(T) row) []row {
	out := make([]row, 0, len(items))
	for _, o := range items {
		out = append(out, f(o))
	}
	return out
}

// printRows prints the table and counts the objects not Ready.
func printRows(out io.Writer, rows []row) (notReady int, err error) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tREADY\tREASON\tMESSAGE")
	for _, r := range rows {
		ready, reason, msg := "Unknown", "-", ""
		switch c := meta.FindStatusCondition(r.conditions, v1.ConditionReady); {
		case r.observed < r.generation:
			reason, msg = "Progressing", fmt.Sprintf("generation %d not yet observed (status describes %d)", r.generation, r.observed)
		case c != nil:
			ready, reason, msg = string(c.Status), c.Reason, c.Message
		}
		if r.suspended {
			ready += " (suspended)"
		}
		if ready != string(metav1.ConditionTrue) && !r.suspended {
			notReady++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.kind, orDash(r.namespace), r.name, ready, reason, msg)
	}
	return notReady, tw.Flush()
}
