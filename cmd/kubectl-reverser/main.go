// Command kubectl-reverser is the kubectl plugin of Reverser:
//
//	kubectl reverser save <gittarget> -m "message" [--next] [--empty] [--catch-up] [--wait-applied] [--timeout 2m]
//	kubectl reverser status [gittarget]
//	kubectl reverser get [-A]
//	kubectl reverser suspend|resume|reconcile <gittarget> [--no-wait]
//	kubectl reverser completion bash|zsh|fish|powershell
//
// save creates a CommitRequest and waits for its outcome; status summarises
// GitTargets, their last commits and recent saves; get lists every Reverser
// object with its Ready condition; suspend, resume and reconcile patch a
// GitTarget and wait for the controller's answer.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"

	v1 "reverser.dev/reverser/pkg/apis/reverser/v1alpha1"
	"reverser.dev/reverser/pkg/applier"
	"reverser.dev/reverser/pkg/generated/clientset/versioned"
	"reverser.dev/reverser/pkg/version"
)

type globals struct {
	loading   *clientcmd.ClientConfigLoadingRules
	overrides *clientcmd.ConfigOverrides
}

func (g *globals) client() (versioned.Interface, string, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(g.loading, g.overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := versioned.NewForConfig(cfg)
	return c, ns, err
}

// clientIn is client, in every namespace with all (-A).
func (g *globals) clientIn(all bool) (versioned.Interface, string, error) {
	c, ns, err := g.client()
	if all {
		ns = metav1.NamespaceAll
	}
	return c, ns, err
}

func main() {
	g := &globals{loading: clientcmd.NewDefaultClientConfigLoadingRules(), overrides: &clientcmd.ConfigOverrides{}}
	root := &cobra.Command{
		Use:           "kubectl-reverser",
		Short:         "Save and inspect Reverser mirrors",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
	}
	root.PersistentFlags().StringVar(&g.loading.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file")
	root.PersistentFlags().StringVarP(&g.overrides.Context.Namespace, "namespace", "n", "", "namespace of the CommitRequest (and, by default, of the GitTarget)")
	root.PersistentFlags().StringVar(&g.overrides.CurrentContext, "context", "", "kubeconfig context to use")
	root.AddCommand(saveCommand(g), statusCommand(g), getCommand(g))
	for _, ctl := range controls {
		root.AddCommand(controlCommand(g, ctl))
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		code := 1
		if e := (*exitError)(nil); errors.As(err, &e) {
			code = e.code
		}
		os.Exit(code)
	}
}

// saveOptions are save's flags.
type saveOptions struct {
	message, targetNS, catchUp string
	next, empty, waitApplied   bool
	timeout                    time.Duration
}

// Exit codes of save, so that scripts tell a refused save from a saved one
// its applier failed to apply.
const (
	exitNotSaved   = 1
	exitNotApplied = 2
)

// exitError ends the command with code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func saveCommand(g *globals) *cobra.Command {
	o := &saveOptions{}
	cmd := &cobra.Command{
		Use:   "save <gittarget> -m <message>",
		Short: "Commit your open changes on a GitTarget with a message, authored by you",
		Long: "save creates a CommitRequest for the GitTarget and waits until it is Committed, or says why not.\n" +
			"With --wait-applied it waits, too, until the GitTarget's applier applied the commit (Applied).\n" +
			"Exit codes: 1 not saved (or no outcome before --timeout), 2 saved but not applied.\n" +
			"On the control cluster it needs verb \"save\" on the GitTarget (resource gittargets, group reverser.dev).\n" +
			"On a source cluster (the CRD of artifacts/source, or a kcp workspace bound to the APIExport) it needs create on\n" +
			"commitrequests there, a GitTarget grant of the namespace (sourceNamespaces), and --target-namespace: the\n" +
			"GitTarget's namespace on the control cluster.",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeGitTargets,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(o.message) == "" {
				return errors.New("a message is required: -m \"what and why\"")
			}
			switch v1.CatchUpMode(o.catchUp) {
			case "", v1.CatchUpAsDefinedOnClaim, v1.CatchUpAfterPush:
			default:
				return fmt.Errorf("--catch-up %q: want %s or %s", o.catchUp, v1.CatchUpAsDefinedOnClaim, v1.CatchUpAfterPush)
			}
			c, ns, err := g.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			return o.run(ctx, cmd.OutOrStdout(), c, ns, args[0])
		},
	}
	cmd.Flags().StringVarP(&o.message, "message", "m", "", "the commit message (required)")
	cmd.Flags().StringVar(&o.targetNS, "target-namespace", "", "namespace of the GitTarget, when it is not the request's (on a source cluster: its control-cluster namespace)")
	cmd.Flags().BoolVar(&o.next, "next", false, "save your next window instead of the open one")
	cmd.Flags().BoolVar(&o.empty, "empty", false, "commit an empty commit with the message when nothing changed")
	cmd.Flags().StringVar(&o.catchUp, "catch-up", "", "AfterPush: ask the applier to apply right after the push; AsDefinedOnClaim (the default): the claim's catchUpAfter")
	cmd.Flags().BoolVar(&o.waitApplied, "wait-applied", false, "wait, after Committed, until the applier applied the commit (exit code 2 when it did not)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the outcome")
	return cmd
}

func (o *saveOptions) run(ctx context.Context, out io.Writer, c versioned.Interface, ns, target string) error {
	if o.targetNS == "" {
		o.targetNS = ns
	}
	cr := &v1.CommitRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: target + "-save-", Namespace: ns},
		Spec: v1.CommitRequestSpec{
			GitTargetRef: v1.ObjectReference{Name: target, Namespace: o.targetNS},
			Message:      o.message,
			CatchUp:      v1.CatchUpMode(o.catchUp),
		},
	}
	if o.next {
		cr.Spec.Attach = v1.AttachNext
	}
	if o.empty {
		cr.Spec.WhenNothingToCommit = v1.NothingToCommitCommitEmpty
	}
	created, err := c.ReverserV1alpha1().CommitRequests(ns).Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the CommitRequest: %w", err)
	}
	fmt.Fprintf(out, "commitrequest %s/%s created, waiting for the save...\n", ns, created.Name)
	background := fmt.Sprintf("it goes on in the background: kubectl get commitrequest -n %s %s", ns, created.Name)
	done, err := waitFor(ctx, c, created, decided(v1.ConditionReady))
	if err != nil {
		return &exitError{exitNotSaved, fmt.Errorf("commitrequest %s/%s: %w (%s)", ns, created.Name, err, background)}
	}
	if err := report(out, done); err != nil {
		return &exitError{exitNotSaved, err}
	}
	if !o.waitApplied {
		return nil
	}
	fmt.Fprintln(out, "waiting for the applier...")
	done, err = waitFor(ctx, c, done, decided(v1.ConditionApplied))
	if err != nil {
		return &exitError{exitNotApplied, fmt.Errorf("commitrequest %s/%s saved, not known to be applied: %w (%s)", ns, created.Name, err, background)}
	}
	a := meta.FindStatusCondition(done.Status.Conditions, v1.ConditionApplied)
	fmt.Fprintf(out, "Applied %s: %s\n", a.Reason, a.Message)
	if a.Status != metav1.ConditionTrue {
		return &exitError{exitNotApplied, fmt.Errorf("saved, not applied: %s", a.Reason)}
	}
	return nil
}

// decided says whether the request's condition typ is True or False.
func decided(typ string) func(*v1.CommitRequest) bool {
	return func(cr *v1.CommitRequest) bool {
		r := meta.FindStatusCondition(cr.Status.Conditions, typ)
		return r != nil && r.Status != metav1.ConditionUnknown
	}
}

// waitFor watches the request until done says it is.
func waitFor(ctx context.Context, c versioned.Interface, cr *v1.CommitRequest, done func(*v1.CommitRequest) bool) (*v1.CommitRequest, error) {
	if done(cr) {
		return cr, nil
	}
	w, err := c.ReverserV1alpha1().CommitRequests(cr.Namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", cr.Name).String(), ResourceVersion: cr.ResourceVersion,
	})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, errors.New("no outcome before --timeout")
		case ev, ok := <-w.ResultChan():
			if !ok {
				latest, err := c.ReverserV1alpha1().CommitRequests(cr.Namespace).Get(ctx, cr.Name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				return waitFor(ctx, c, latest, done)
			}
			if ev.Type == watch.Deleted {
				return nil, errors.New("deleted before its outcome")
			}
			if got, ok := ev.Object.(*v1.CommitRequest); ok && done(got) {
				return got, nil
			}
		}
	}
}

func report(out io.Writer, cr *v1.CommitRequest) error {
	r := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady)
	fmt.Fprintf(out, "%s: %s\n", r.Reason, r.Message)
	if cr.Status.Commit != "" {
		author := "nobody named (the cluster sends no audit events)"
		if cr.Status.Author != nil {
			author = cr.Status.Author.Username
		}
		fmt.Fprintf(out, "commit %s on branch %s, author %s\n", cr.Status.Commit, cr.Status.Branch, author)
	}
	if r.Status != metav1.ConditionTrue {
		return fmt.Errorf("not saved: %s", r.Reason)
	}
	return nil
}

func statusCommand(g *globals) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "status [gittarget]",
		Short: "Summarise GitTargets: readiness, last commit and push, streams, recent saves",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := g.clientIn(all)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var targets []v1.GitTarget
			if len(args) == 1 {
				gt, err := c.ReverserV1alpha1().GitTargets(ns).Get(ctx, args[0], metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("GitTarget %s/%s does not exist", ns, args[0])
				}
				if err != nil {
					return err
				}
				targets = []v1.GitTarget{*gt}
			} else {
				list, err := c.ReverserV1alpha1().GitTargets(ns).List(ctx, metav1.ListOptions{})
				if err != nil {
					return err
				}
				targets = list.Items
			}
			crs, err := c.ReverserV1alpha1().CommitRequests(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			fcs, err := c.ReverserV1alpha1().FluxClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			acs, err := c.ReverserV1alpha1().ArgoCDClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			var claims []claimRow
			for _, fc := range fcs.Items {
				ks := fc.Spec.KustomizationRef
				claims = append(claims, claimRow{kind: v1.ApplierKindFluxClaim, namespace: fc.Namespace, name: fc.Name,
					applier: "Kustomization " + ks.Namespace + "/" + ks.Name, status: fc.Status})
			}
			for _, ac := range acs.Items {
				app := ac.Spec.ApplicationRef
				claims = append(claims, claimRow{kind: v1.ApplierKindArgoCDClaim, namespace: ac.Namespace, name: ac.Name,
					applier: "Application " + app.Namespace + "/" + app.Name, status: ac.Status})
			}
			return printStatus(cmd.OutOrStdout(), targets, crs.Items, claims)
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "every namespace")
	return cmd
}

// claimRow is a FluxClaim or ArgoCDClaim as status shows it.
type claimRow struct {
	kind            v1.ApplierKind
	namespace, name string
	applier         string
	status          v1.ApplierClaimStatus
}

func printStatus(out io.Writer, targets []v1.GitTarget, crs []v1.CommitRequest, claims []claimRow) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GITTARGET\tBRANCH\tREADY\tSTREAMS\tLAST COMMIT\tLAST PUSH\tMESSAGE")
	short := func(ref *v1.CommitRef) string {
		if ref == nil || ref.Time == nil {
			return "-"
		}
		return fmt.Sprintf("%.7s %s ago", ref.SHA, time.Since(ref.Time.Time).Round(time.Second))
	}
	for _, gt := range targets {
		ready, msg := "-", ""
		if r := meta.FindStatusCondition(gt.Status.Conditions, v1.ConditionReady); r != nil {
			ready, msg = string(r.Status), r.Message
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", gt.Namespace, gt.Name, gt.Spec.Branch, ready,
			gt.Status.Streams.Running, gt.Status.Streams.Desired, short(gt.Status.LastCommit), short(gt.Status.LastPush), msg)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printClaims(out, targets, claims); err != nil {
		return err
	}
	sort.Slice(crs, func(i, j int) bool { return crs[i].CreationTimestamp.After(crs[j].CreationTimestamp.Time) })
	if len(crs) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nRECENT SAVES")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMITREQUEST\tTARGET\tAUTHOR\tOUTCOME\tCOMMIT\tAPPLIED")
	for i, cr := range crs {
		if i == 10 {
			break
		}
		outcome, author := "Saving", ""
		if r := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionReady); r != nil {
			outcome = r.Reason
		}
		if cr.Status.Author != nil {
			author = cr.Status.Author.Username
		}
		applied := "-"
		if a := meta.FindStatusCondition(cr.Status.Conditions, v1.ConditionApplied); a != nil {
			applied = a.Reason
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%.7s\t%s\n", cr.Namespace, cr.Name, cr.Spec.GitTargetRef.Name, author, outcome, cr.Status.Commit,
			applied)
	}
	return tw.Flush()
}

// printClaims lists the claims: the applier object, whether it is held,
// the revision it applied, whether that is behind the last push of the
// GitTarget naming the claim, and the last converge with its reason.
func printClaims(out io.Writer, targets []v1.GitTarget, claims []claimRow) error {
	if len(claims) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nAPPLIER CLAIMS")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLAIM\tAPPLIER\tHELD\tAPPLIED\tBEHIND\tLAST OPERATION\tMESSAGE")
	for _, fc := range claims {
		held, msg := "False", ""
		if c := meta.FindStatusCondition(fc.status.Conditions, "Held"); c != nil {
			held = string(c.Status)
		}
		if r := meta.FindStatusCondition(fc.status.Conditions, v1.ConditionReady); r != nil {
			msg = r.Reason + ": " + r.Message
		}
		applied := applier.CommitOf(fc.status.LastAppliedRevision)
		behind := "-"
		for _, gt := range targets {
			ref := gt.Spec.ApplierRef
			if gt.Namespace != fc.namespace || ref == nil || ref.Kind != fc.kind || ref.Name != fc.name || gt.Status.LastPush == nil {
				continue
			}
			behind = "no"
			if push := gt.Status.LastPush; !strings.HasPrefix(push.SHA, applied) || applied == "" {
				behind = fmt.Sprintf("yes: tip %.7s", push.SHA)
				if push.Time != nil {
					behind += fmt.Sprintf(" pushed %s ago", time.Since(push.Time.Time).Round(time.Second))
				}
			}
		}
		op := "-"
		if o := fc.status.Operation; o != nil {
			switch {
			case o.FinishedAt != nil:
				op = fmt.Sprintf("%s, done %s ago", o.Reason, time.Since(o.FinishedAt.Time).Round(time.Second))
			case o.StartedAt != nil:
				op = fmt.Sprintf("%s, running for %s", o.Reason, time.Since(o.StartedAt.Time).Round(time.Second))
			}
		}
		fmt.Fprintf(tw, "%s %s/%s\t%s\t%s\t%.7s\t%s\t%s\t%s\n", fc.kind, fc.namespace, fc.name, fc.applier, held, orDash(applied), behind, op, msg)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
