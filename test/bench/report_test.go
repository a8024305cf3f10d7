//go:build bench

package bench

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// row is one line of the table TestBench prints last: what was measured,
// its floor from the same run, their ratio and the goal it is held to.
type row struct {
	name, measured, floor string
	ratio                 float64
	goal                  string
}

var (
	tableMu sync.Mutex
	table   []row
)

func record(r row) {
	tableMu.Lock()
	defer tableMu.Unlock()
	table = append(table, r)
}

// printTable prints every row recorded, in the order measured.
// controllerFlags are the flags the bench's controller runs with, less
// its files and ports: TestBench reads them from /proc.
var controllerFlags = "?"

func printTable() {
	tableMu.Lock()
	defer tableMu.Unlock()
	fmt.Println("\nReverser benchmarks (each against a floor measured in the same run)")
	fmt.Println("reverser-controller ran with these flags besides its files and ports (every other one at its default): " +
		controllerFlags)
	fmt.Printf("%-44s %-26s %-26s %7s  %s\n", "row", "measured", "floor", "ratio", "goal")
	for _, r := range table {
		ratio := fmt.Sprintf("%6.1fx", r.ratio)
		if r.ratio == 0 {
			ratio = "      -" // a figure with no floor to compare with
		}
		fmt.Printf("%-44s %-26s %-26s %s  %s\n", r.name, r.measured, r.floor, ratio, r.goal)
	}
}

// quantile is the q-quantile of d (q=1: the largest).
func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// tail names and gives the tail of d: its p99 from 100 samples or more,
// else its max, since fewer samples cannot tell a p99.
func tail(d []time.Duration) (string, time.Duration) {
	if len(d) >= 100 {
		return "p99", quantile(d, 0.99)
	}
	return "max", quantile(d, 1)
}

// summary is "p50 X p99|max Y" of d.
func summary(d []time.Duration) string {
	name, v := tail(d)
	return fmt.Sprintf("p50 %v %s %v", quantile(d, 0.5).Round(time.Millisecond), name, v.Round(time.Millisecond))
}

// serverHead is the commit the Git server's main holds, as git reads it
// (loose or packed refs); "" before the first push.
func serverHead(bare string) string {
	out, err := exec.Command("git", "-C", bare, "rev-parse", "--verify", "--quiet", "main").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// waitPushed waits, until timeout, for the server's main to move past before
// with doc holding want (or, want empty, doc existing): the change measured
// is on the server, not just some push.
func waitPushed(ctx context.Context, bare, before, doc, want string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if h := serverHead(bare); h == "" || h == before {
			return false, nil
		}
		out, err := exec.Command("git", "-C", bare, "show", "main:"+doc).Output()
		return err == nil && strings.Contains(string(out), want), nil
	})
}
