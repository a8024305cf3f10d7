// Package faults proves the mirror invariant on the real control plane: with
// a steady burst of creates, updates and deletes by two authors going on,
// each fault is injected, and afterwards Git must equal the cluster for the
// mirrored folder, with no change committed twice and no change credited to
// the wrong person. `make faults` runs every fault with long bursts and
// prints a table; `make test` runs the short form.
package faults

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"reverser.dev/reverser/test/controlplane"
	"reverser.dev/reverser/test/ledger"
)

var (
	env *controlplane.Env
	// full is `make faults`: more objects, longer bursts, longer outages.
	full = os.Getenv("REVERSER_FAULTS") == "full"
)

func TestMain(m *testing.M) {
	controlplane.Main(m, "faults", "REVERSER_FAULTS_LOCAL_DIR", nil, func(e *controlplane.Env) { env = e },
		func(o *controlplane.Options) {
			o.ControllerBlackhole = true
			o.AuditRelay = true
			if os.Geteuid() == 0 { // mounting a tmpfs needs root; the full-disk fault says so without it
				o.ControllerDataTmpfs = "256m"
			}
		})
}

// result is one row of the table: the ledger's verdict per write.
type result struct {
	fault string
	// made counts the writes the API server took; commits, the commits
	// since the burst began; byWriter, the writes committed by their
	// writer.
	made, commits, byWriter                                int
	lost, duplicated, misattributed, unresolved, reordered []string
	// unresolvedWrites are the writes of unresolved; those answered
	// within authorsAway (when a fault sets it) may lose their writer's
	// name any number of times: no fact reached the leader meanwhile.
	unresolvedWrites []ledger.Write
	authorsAway      [2]time.Time
	// firstPush: whether the first push after the fault left the quiet
	// objects as the cluster holds them ("yes", or what it lacked).
	firstPush string
	// firstPushAfter is how long after the fault was over the mirror
	// pushed again; converged, how long after the burst ended Git equalled
	// the cluster.
	firstPushAfter, converged time.Duration
	// note says why a row's run stopped early, when it did.
	note string
}

var (
	resultsMu sync.Mutex
	results   []result
)

// TestFaults injects each fault during a burst and checks the invariant.
// A row whose run fails still prints, with why.
func TestFaults(t *testing.T) {
	for _, f := range faults() {
		t.Run(strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) {
			r := &result{fault: f.name}
			defer record(t, r)
			runFault(t, env, f, r)
			checkInvariant(t, r, f.fallback)
		})
	}
	printTable(t)
}

// record keeps r for the table, noting a run that stopped early.
func record(t *testing.T, r *result) {
	if t.Failed() && r.note == "" {
		r.note = "failed: see the test's log"
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, *r)
}

// checkInvariant fails t on what the mirror invariant forbids. fallback,
// when set, is why this fault may leave writes to the committer or the
// unresolved author (docs/faults.md); at most once per object, but for
// the writes answered within r.authorsAway.
func checkInvariant(t *testing.T, r *result, fallback string) {
	t.Helper()
	for _, c := range []struct {
		what string
		rows []string
	}{{"lost", r.lost}, {"committed twice", r.duplicated}, {"credited to the wrong person", r.misattributed},
		{"committed out of order", r.reordered}} {
		if len(c.rows) > 0 {
			t.Errorf("%d writes %s: %s", len(c.rows), c.what, strings.Join(c.rows, "; "))
		}
	}
	if r.byWriter == 0 {
		t.Errorf("no write is committed by its writer: the attribution check proves nothing")
	}
	if len(r.unresolved) > 0 && fallback == "" {
		t.Errorf("%d writes committed without their writer's name, which this fault gives no reason for: %s", len(r.unresolved),
			strings.Join(r.unresolved, "; "))
	}
	// The fallback happens once per object a fault catches mid-change,
	// except while the facts of every change went astray.
	objects := map[string]bool{}
	for i, u := range r.unresolved {
		if at := r.unresolvedWrites[i].At; !at.Before(r.authorsAway[0]) && !at.After(r.authorsAway[1]) {
			continue
		}
		object, _, _ := strings.Cut(u, ":")
		if objects[object] {
			t.Errorf("%s committed without its writer's name more than once: %s", object, strings.Join(r.unresolved, "; "))
		}
		objects[object] = true
	}
	if r.firstPush != "yes" {
		t.Errorf("the first push after the fault did not leave the folder as the cluster holds it: %s", r.firstPush)
	}
}

func printTable(t *testing.T) {
	resultsMu.Lock()
	rows := slices.Clone(results)
	resultsMu.Unlock()
	printRows(t, rows)
}

func printRows(t *testing.T, rows []result) {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FAULT\tWRITES\tCOMMITS\tBY WRITER\tLOST\tDUPLICATED\tMISATTRIBUTED\tUNRESOLVED-AUTHOR\tREORDERED\tFIRST-PUSH\t"+
		"PUSHED AFTER FAULT\tGIT = CLUSTER AFTER BURST\tNOTE")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1fs\t%.1fs\t%s\n", r.fault, r.made, r.commits, r.byWriter, len(r.lost),
			len(r.duplicated), len(r.misattributed), len(r.unresolved), len(r.reordered), r.firstPush, r.firstPushAfter.Seconds(),
			r.converged.Seconds(), r.note)
	}
	_ = w.Flush()
	t.Log("\n" + b.String())
	fmt.Print(b.String())
}

// client builds a clientset for one of the local control plane's users.
func client(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return kubernetes.NewForConfigOrDie(cfg)
}
