// Package metrics holds reverser-controller's Prometheus metrics. Every name
// starts with reverser_ and every label takes a bounded set of values.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"reverser.dev/reverser/pkg/version"
)

// Registry is what the controller serves on /metrics.
var Registry = prometheus.NewRegistry()

var (
	// WatchEvents counts watch events by what became of them.
	WatchEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_watch_events_total",
		Help: "Watch events received, by outcome: mirrored, unchanged, cluster_generated, secret_skipped, invalid, deleted.",
	}, []string{"outcome"})
	// Seals counts documents with credentials a branch worker sealed.
	Seals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_seals_total",
		Help: "Documents holding credentials a branch worker sealed, by outcome: encrypted (afresh), kept (the document Git holds already " +
			"held the same values), failed (not written).",
	}, []string{"outcome"})
	// WatchErrors counts failed watches, which the informers retry.
	WatchErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_watch_errors_total",
		Help: "Watches that failed and were retried, by reason: expired (410: the informer lists again), forbidden, unreachable, other.",
	}, []string{"reason"})
	// Informers is how many informers run: one per source and resource that
	// some stream reads, whatever the number of GitTargets reading it.
	Informers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "reverser_informers",
		Help: "Informers running: one per source and resource some GitTarget reads (one per namespace where the source may not list the resource in all).",
	})
	// QueueDepth is how many changes wait for branch workers.
	QueueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "reverser_worker_queue_depth",
		Help: "Changes queued for branch workers and not yet handled.",
	})
	// Leader is 1 on the replica that leads and mirrors, 0 on a standby.
	Leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "reverser_leader",
		Help: "1 while this controller replica holds the leader election Lease and mirrors; 0 while it stands by.",
	})
	// Windows counts closed commit windows by why they closed.
	Windows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_windows_closed_total",
		Help: "Commit windows closed, by reason: silence, max_age, snapshot, save, suspend, conflict, or empty (nothing changed after all).",
	}, []string{"reason"})
	// Commits counts commits written.
	Commits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reverser_commits_total",
		Help: "Commits written by branch workers, replays included.",
	})
	// Pushes counts pushes by result.
	Pushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_pushes_total",
		Help: "Pushes, by result: ok, rejected (the remote moved; replayed), error, fenced (not sent: this replica may not lead).",
	}, []string{"result"})
	// CommitSeconds times building and writing one commit.
	CommitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "reverser_commit_duration_seconds",
		Help:    "Time to build and write one commit.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	// PushSeconds times one push.
	PushSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "reverser_push_duration_seconds",
		Help:    "Time of one push to the remote.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	})
	// Recoveries counts a branch worker's pushes that succeeded after
	// failures, by the first failure of the outage.
	Recoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_worker_recoveries_total",
		Help: "Pushes that succeeded after failures, by the outage's first failure: fetch, commit, push, rejected (a foreign commit, replayed).",
	}, []string{"after"})
	// EditToPush times an edit from its watch event to the push carrying it.
	EditToPush = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "reverser_edit_to_push_seconds",
		Help:    "Time from a change's watch event to the push that carries it, window time included.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
)

// Attribution metrics.
var (
	// AuditRequests counts requests to the audit ingress.
	AuditRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_audit_requests_total",
		Help: "Requests to the audit ingress, by route (a KubeProvider name, or \"unknown\") and HTTP status code.",
	}, []string{"route", "code"})
	// AuditFacts is how many facts the index holds.
	AuditFacts = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "reverser_audit_facts",
		Help: "Attribution facts held in the index.",
	})
	// AuditFactsEvicted counts facts dropped because the index was full.
	AuditFactsEvicted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reverser_audit_facts_evicted_total",
		Help: "Facts dropped from the full index before their TTL (raise --audit-max-facts if this grows).",
	})
	// Attributions counts how changes were attributed.
	Attributions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_attribution_total",
		Help: "Changes attributed, by outcome: resolved (a fact named the user), unresolved (none within the grace), disabled (the provider sends no audit), snapshot (a stream's initial state, authored by the committer).",
	}, []string{"outcome"})
	// AttributionWait times how long changes waited for their fact.
	AttributionWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "reverser_attribution_wait_seconds",
		Help:    "How long a change waited for its audit fact (0 when it had arrived already).",
		Buckets: []float64{0, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5},
	})
)

// CommitRequest metrics.
var (
	// CommitRequests counts finished CommitRequests by outcome.
	CommitRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_commit_requests_total",
		Help: "CommitRequests finished, by outcome: committed, no_window, nothing_to_commit, save_in_progress, save_failed, git_target_not_found, not_allowed, author_unresolved.",
	}, []string{"outcome"})
	// SaveFailures counts saves that gave up, by the stage that held them.
	SaveFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_save_failures_total",
		Help: "Saves that were not on the remote by their deadline, by stage: commit (not committed), push (committed, not pushed).",
	}, []string{"stage"})
	// SaveSeconds times a CommitRequest from its creation to its outcome.
	SaveSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "reverser_commit_request_duration_seconds",
		Help:    "Time from a CommitRequest's creation to its outcome.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
)

// Applier metrics.
var (
	// Converges counts the converges sent to claimed appliers, by reason
	// (Startup, ForeignCommit, Repair, CatchUp) and outcome (applied,
	// fell_short, abandoned, failed, error).
	Converges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_converges_total",
		Help: "Converges asked of claimed appliers, by reason and outcome: applied, fell_short (an older revision was applied), abandoned (yielded to a live edit), failed (the applier reported a failure), error (it could not be asked or followed).",
	}, []string{"reason", "outcome"})
	// ApplyWindowBarriers counts apply-window barriers by outcome.
	ApplyWindowBarriers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverser_apply_window_barriers_total",
		Help: "Apply-window barriers, by outcome: met (every stream handled the newest resourceVersion of its collection), timed_out (not within two minutes), failed (a collection could not be listed, or its resourceVersions are not numbers).",
	}, []string{"outcome"})
	// ApplyWindowEchoes counts the applier's writes kept out of Git.
	ApplyWindowEchoes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reverser_apply_window_echoes_total",
		Help: "Writes an applier made during an apply window, judged echoes of Git and not mirrored.",
	})
	// BuildInfo is 1, labelled with what was built.
	BuildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reverser_build_info",
		Help: "Always 1, labelled with the controller's version, commit and Go version.",
	}, []string{"version", "commit", "goversion"})
	// GitTargetReady says, per GitTarget, whether it is Ready: one series a
	// GitTarget, removed with it, so bounded by the GitTargets that exist.
	GitTargetReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reverser_gittarget_ready",
		Help: "1 while the GitTarget's Ready condition is True, 0 while it is not; one series per GitTarget (namespace, name).",
	}, []string{"namespace", "name"})
	// ApplyWindowCollisions counts echoes that reverted what Git holds.
	ApplyWindowCollisions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "reverser_apply_window_collisions_total",
		Help: "Applier writes during an apply window that differ from what Git holds (an edit the apply reverted): Git keeps the edit and a Repair converge puts it back.",
	})
)

func init() {
	Registry.MustRegister(Converges, ApplyWindowBarriers, ApplyWindowEchoes, ApplyWindowCollisions)
	Registry.MustRegister(CommitRequests, SaveSeconds, SaveFailures)
	Registry.MustRegister(AuditRequests, AuditFacts, AuditFactsEvicted, Attributions, AttributionWait)
	Registry.MustRegister(Seals, BuildInfo, GitTargetReady)
	v := version.Get()
	BuildInfo.WithLabelValues(v.Version, v.Commit, v.GoVersion).Set(1)
	Registry.MustRegister(Leader, WatchEvents, WatchErrors, Informers, QueueDepth, Windows, Commits, Pushes, Recoveries, CommitSeconds, PushSeconds, EditToPush,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	initialise()
}

// initialise exports at 0 the series of a fixed label value that alerts take
// increase() or rate() of: a series first scraped after its first increment
// has no earlier sample, so the engine sees no increase. A fresh controller
// that pushed once and went quiet fired ReverserNoSuccessfulPush that way.
func initialise() {
	for _, result := range []string{"ok", "rejected", "error"} {
		Pushes.WithLabelValues(result)
	}
	for _, stage := range []string{"commit", "push"} {
		SaveFailures.WithLabelValues(stage)
	}
	for _, outcome := range []string{"resolved", "unresolved", "disabled", "snapshot"} {
		Attributions.WithLabelValues(outcome)
	}
	for _, outcome := range []string{"met", "timed_out", "failed"} {
		ApplyWindowBarriers.WithLabelValues(outcome)
	}
}
