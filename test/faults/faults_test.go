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
			if os.Geteuid() == 0 { // mounting a tmpfs needs root; the full-disk fault says so without it
				o.ControllerDataTmpfs = "256m"
			}
		})
}

// result is one row of the table.
type result struct {
	fault                           string
	made, commits, byPeople         int
	lost, duplicates, misattributed int
	// firstPush is how long after the fault was over the mirror pushed
	// again; converged, how long after the burst ended Git equalled the
	// cluster.
	firstPush, converged               time.Duration
	lostPaths, duplicateCommits, wrong []string
}

var (
	resultsMu sync.Mutex
	results   []result
)

// TestFaults injects each fault during a burst and checks the invariant.
func TestFaults(t *testing.T) {
	for _, f := range faults() {
		t.Run(strings.ReplaceAll(f.name, " ", "_"), func(t *testing.T) {
			checkInvariant(t, runFault(t, env, f))
		})
	}
	printTable(t)
}

// checkInvariant records r for the table and fails t on what the mirror
// invariant forbids.
func checkInvariant(t *testing.T, r result) {
	t.Helper()
	resultsMu.Lock()
	results = append(results, r)
	resultsMu.Unlock()
	if r.lost > 0 {
		t.Errorf("%d documents differ from the cluster: %s", r.lost, strings.Join(r.lostPaths, ", "))
	}
	if r.duplicates > 0 {
		t.Errorf("%d changes committed twice: %s", r.duplicates, strings.Join(r.duplicateCommits, ", "))
	}
	if r.byPeople == 0 {
		t.Errorf("no commit is authored by alice or bob: the attribution check proves nothing")
	}
	if r.misattributed > 0 {
		t.Errorf("%d changes credited to the wrong person: %s", r.misattributed, strings.Join(r.wrong, "; "))
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
	fmt.Fprintln(w, "FAULT\tCHANGES MADE\tCOMMITS\tBY PEOPLE\tLOST\tDUPLICATED\tMISATTRIBUTED\tFIRST PUSH AFTER FAULT\tGIT = CLUSTER AFTER BURST")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1fs\t%.1fs\n", r.fault, r.made, r.commits, r.byPeople, r.lost, r.duplicates,
			r.misattributed, r.firstPush.Seconds(), r.converged.Seconds())
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
