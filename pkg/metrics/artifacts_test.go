package metrics_test

// Checks artifacts/monitoring against the metrics the servers really export:
// every metric a dashboard panel or an alert selects, every label its
// matchers and grouping clauses name.

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apimetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	_ "k8s.io/apiserver/pkg/server" // registers what the generic server registers at init
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	etcd3metrics "k8s.io/apiserver/pkg/storage/etcd3/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"sigs.k8s.io/yaml"

	"reverser.dev/reverser/pkg/metrics"
)

const monitoringDir = "../../artifacts/monitoring"

// targetLabels are added by Prometheus to every series it scrapes (job,
// instance) or by the usual Kubernetes service discovery relabelling
// (prometheus-operator's ServiceMonitors, the kubernetes-pods job): they are
// on no Desc, and queries may match and group by them.
var targetLabels = set("job", "instance", "namespace", "pod", "service", "endpoint", "container", "node")

// prometheusSeries are series Prometheus makes itself, not the servers.
var prometheusSeries = map[string][]string{
	"up": nil, // 1 when the last scrape of a target succeeded
}

// exportedSeries maps each series name the servers can expose (a counter's
// name, a histogram's _bucket, _sum and _count) to its label names.
type exportedSeries map[string]map[string]bool

// descRE reads a Desc, whose name and labels client_golang only prints.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: "(?:[^"\\]|\\.)*", unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

func describe(t *testing.T, c prometheus.Collector) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	out := map[string][]string{}
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		name, err := strconv.Unquote(m[1])
		if err != nil {
			t.Fatalf("cannot read %s: %v", d, err)
		}
		var labels []string
		for _, lp := range strings.Split(m[2], ",") {
			if k, _, ok := strings.Cut(lp, "="); ok {
				labels = append(labels, k)
			}
		}
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		out[name] = labels
	}
	return out
}

// gatheredTypes are the types (COUNTER, GAUGE, HISTOGRAM...) of the
// families g has samples of.
func gatheredTypes(t *testing.T, g prometheus.Gatherer) map[string]string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	types := map[string]string{}
	for _, mf := range mfs {
		types[mf.GetName()] = mf.GetType().String()
	}
	return types
}

// sourceTypes reads this package's sources for the type of each metric
// created with prometheus.New*: a vector without children is not gathered.
func sourceTypes(t *testing.T) map[string]string {
	t.Helper()
	kinds := map[string]string{
		"NewCounter": "COUNTER", "NewCounterVec": "COUNTER", "NewCounterFunc": "COUNTER",
		"NewGauge": "GAUGE", "NewGaugeVec": "GAUGE", "NewGaugeFunc": "GAUGE",
		"NewHistogram": "HISTOGRAM", "NewHistogramVec": "HISTOGRAM",
		"NewSummary": "SUMMARY", "NewSummaryVec": "SUMMARY",
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
				return true
			}
			kind, ok := kinds[sel.Sel.Name]
			if !ok {
				return true
			}
			lit, ok := call.Args[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			var ns, sub, name string
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, _ := kv.Key.(*ast.Ident)
				val, _ := kv.Value.(*ast.BasicLit)
				if key == nil || val == nil || val.Kind != token.STRING {
					continue
				}
				s, _ := strconv.Unquote(val.Value)
				switch key.Name {
				case "Namespace":
					ns = s
				case "Subsystem":
					sub = s
				case "Name":
					name = s
				}
			}
			if name != "" {
				types[prometheus.BuildFQName(ns, sub, name)] = kind
			}
			return true
		})
	}
	return types
}

// addSeries records the series a metric of type typ exposes.
func (e exportedSeries) addSeries(name string, labels []string, typ string, known bool) {
	with := func(extra ...string) map[string]bool {
		m := set(extra...)
		for _, l := range labels {
			m[l] = true
		}
		return m
	}
	switch {
	case known && (typ == "HISTOGRAM" || typ == "GAUGE_HISTOGRAM"):
		e[name+"_bucket"] = with("le")
		e[name+"_sum"] = with()
		e[name+"_count"] = with()
		e[name] = with() // a native histogram
	case known && typ == "SUMMARY":
		e[name] = with("quantile")
		e[name+"_sum"] = with()
		e[name+"_count"] = with()
	default:
		e[name] = with()
	}
}

// exportedByServers is every series reverser-controller (metrics.Registry)
// and reverser-apiserver (k8s.io/apiserver's legacyregistry, filled the way
// the generic server fills it) can expose, plus Prometheus' own up.
func exportedByServers(t *testing.T) exportedSeries {
	t.Helper()
	exported := exportedSeries{}

	// reverser-controller: names and labels from the descriptors, which
	// cover vectors without children; types from a gather and from the
	// sources.
	types := sourceTypes(t)
	for name, typ := range gatheredTypes(t, metrics.Registry) {
		if st, ok := types[name]; ok && st != typ {
			t.Fatalf("%s: the sources say %v, a gather %v", name, st, typ)
		}
		types[name] = typ
	}
	for name, labels := range describe(t, metrics.Registry) {
		typ, known := types[name]
		if strings.HasPrefix(name, "reverser_") && !known {
			t.Fatalf("%s: type unknown", name)
		}
		exported.addSeries(name, labels, typ, known)
	}

	// reverser-apiserver: the generic server installs its /metrics with
	// routes.DefaultMetrics (or MetricsWithReset), which registers the
	// endpoint, storage, etcd3 and flow-control metrics; importing
	// k8s.io/apiserver/pkg/server registers those of its packages' init.
	// Touching the request and etcd metrics gathers their types.
	routes.DefaultMetrics{}.Install(mux.NewPathRecorderMux("artifacts-test"))
	req := httptest.NewRequest("GET", "/apis/reverser.dev/v1alpha1/gittargets", nil)
	apimetrics.MonitorRequest(req, "LIST", "reverser.dev", "v1alpha1", "gittargets", "", "cluster", "apiserver",
		false, "", 200, 100, time.Millisecond)
	etcd3metrics.RecordEtcdRequest("get", schema.GroupResource{Group: "reverser.dev", Resource: "gittargets"}, nil, time.Now())
	legacy, ok := legacyregistry.Registerer().(prometheus.Collector)
	if !ok {
		t.Fatalf("legacyregistry's registerer is a %T, not a prometheus.Collector", legacyregistry.Registerer())
	}
	apiTypes := gatheredTypes(t, legacyregistry.DefaultGatherer)
	for name, labels := range describe(t, legacy) {
		if _, ok := exported[name]; ok {
			continue // go_* and process_*, served by both
		}
		typ, known := apiTypes[name]
		exported.addSeries(name, labels, typ, known)
	}

	for name, labels := range prometheusSeries {
		exported.addSeries(name, labels, "GAUGE", true)
	}
	return exported
}

// checkExpr returns what is wrong with expr: metrics the servers do not
// export, labels the metrics do not have, unknown functions.
func checkExpr(e exportedSeries, expr string) []string {
	q, err := parsePromQL(expr)
	if err != nil {
		return []string{fmt.Sprintf("cannot read: %v", err)}
	}
	var problems []string
	for _, s := range q.selectors {
		labels, ok := e[s.name]
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not exported by reverser-controller or reverser-apiserver", s.name))
			continue
		}
		for _, l := range s.labels {
			if !labels[l] && !targetLabels[l] {
				problems = append(problems, fmt.Sprintf("metric %s has no label %q (it has %s)", s.name, l, keys(labels)))
			}
		}
	}
	for _, g := range q.groupings {
		scope := g.scope
		for _, l := range g.labels {
			if targetLabels[l] {
				continue
			}
			found, known := false, false
			var names []string
			for _, s := range scope {
				labels, ok := e[s.name]
				known = known || ok
				found = found || labels[l]
				names = append(names, s.name)
			}
			if known && !found {
				problems = append(problems, fmt.Sprintf("%s (%s): label %q is on none of %s", g.keyword, strings.Join(g.labels, ", "), l, strings.Join(names, ", ")))
			} else if len(scope) == 0 {
				problems = append(problems, fmt.Sprintf("%s (%s): no metric to take label %q from", g.keyword, strings.Join(g.labels, ", "), l))
			}
		}
	}
	return problems
}

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return "{" + strings.Join(out, ", ") + "}"
}

// The dashboard.

type panel struct {
	ID         int             `json:"id"`
	Title      string          `json:"title"`
	Type       string          `json:"type"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// allPanels flattens rows: a collapsed row holds its panels.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// variableRE finds the Grafana variables an expression uses.
var variableRE = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)`)

// labelValuesRE reads a Grafana label_values(selector, label) query.
var labelValuesRE = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// variableQueries are the PromQL expressions of the dashboard's query
// variables: label_values(selector, label) becomes sum by (label) (selector).
func variableQueries(t *testing.T, d dashboard) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: query is neither a string nor {query}: %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		if m := labelValuesRE.FindStringSubmatch(q); m != nil {
			q = fmt.Sprintf("sum by (%s) (%s)", m[2], m[1])
		}
		out["variable "+v.Name] = q
	}
	return out
}

func TestDashboard(t *testing.T) {
	e := exportedByServers(t)
	d := readDashboard(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard needs a title and a uid")
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 or later", d.SchemaVersion)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "datasource" && v.Name == "datasource" {
			var q string
			if err := json.Unmarshal(v.Query, &q); err != nil || q != "prometheus" {
				t.Errorf("variable datasource: query %s, want \"prometheus\"", v.Query)
			}
		}
	}
	if !vars["datasource"] {
		t.Errorf("no datasource variable")
	}

	ids := map[int]string{}
	exprs := 0
	panels := allPanels(d.Panels)
	if len(panels) == 0 {
		t.Fatal("no panels")
	}
	for _, p := range panels {
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if p.ID == 0 {
			t.Errorf("panel %q has no id", p.Title)
		} else if other, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos missing or outside the 24 columns", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no targets", p.Title)
		}
		if !strings.Contains(string(p.Datasource), "${datasource}") {
			t.Errorf("panel %q: datasource %s, want uid ${datasource}", p.Title, p.Datasource)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] {
				t.Errorf("panel %q: refId %q twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: target %s has no expr", p.Title, tg.RefID)
				continue
			}
			exprs++
			for _, problem := range checkExpr(e, tg.Expr) {
				t.Errorf("panel %q, target %s: %s\n\t%s", p.Title, tg.RefID, problem, tg.Expr)
			}
			for _, v := range variableRE.FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[v[1]] && !strings.HasPrefix(v[1], "__") {
					t.Errorf("panel %q, target %s: no variable $%s", p.Title, tg.RefID, v[1])
				}
			}
		}
	}
	for name, q := range variableQueries(t, d) {
		for _, problem := range checkExpr(e, q) {
			t.Errorf("%s: %s\n\t%s", name, problem, q)
		}
	}
	t.Logf("%d panels, %d expressions checked", len(panels), exprs)
}

// The alerts.

// RunbookBase is where docs/metrics.md is published; every runbook_url is
// a heading of it.
const runbookBase = "https://reverser.dev/docs/metrics.md#"

var labelRefRE = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)

// readRules reads alerts.yaml as Prometheus does (rulefmt validates every
// expression, template, name and label).
func readRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(b, false, model.UTF8Validation, promParser, nil)
	for _, err := range errs {
		t.Errorf("alerts.yaml: %v", err)
	}
	if rgs == nil {
		t.FailNow()
	}
	return rgs
}

// docAnchors are the GitHub anchors of docs/metrics.md's headings.
func docAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		anchors[strings.ReplaceAll(drop.ReplaceAllString(h, ""), " ", "-")] = true
	}
	return anchors
}

func TestAlerts(t *testing.T) {
	e := exportedByServers(t)
	anchors := docAnchors(t)
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert (record %q)", g.Name, r.Record)
				continue
			}
			alerts++
			if r.For <= 0 {
				t.Errorf("alert %s: no for: one bad scrape must not page", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if u := r.Annotations["runbook_url"]; u != "" {
				anchor, ok := strings.CutPrefix(u, runbookBase)
				if !ok || !anchors[anchor] {
					t.Errorf("alert %s: runbook_url %q is not %s<a heading of docs/metrics.md>", r.Alert, u, runbookBase)
				}
			}
			problems := checkExpr(e, r.Expr)
			for _, p := range problems {
				t.Errorf("alert %s: %s\n\t%s", r.Alert, p, r.Expr)
			}
			if len(problems) > 0 {
				continue
			}
			// $labels.x in annotations: x must survive the expression.
			q, _ := parsePromQL(r.Expr)
			have := map[string]bool{}
			for _, gr := range q.groupings {
				for _, l := range gr.labels {
					have[l] = true
				}
			}
			for _, s := range q.selectors {
				for l := range e[s.name] {
					have[l] = true
				}
			}
			for k, v := range r.Annotations {
				for _, m := range labelRefRE.FindAllStringSubmatch(v, -1) {
					if !have[m[1]] && !targetLabels[m[1]] {
						t.Errorf("alert %s: annotation %s uses $labels.%s, which the expression does not have", r.Alert, k, m[1])
					}
				}
			}
		}
	}
	if alerts == 0 {
		t.Fatal("no alerts")
	}
	t.Logf("%d alerts checked", alerts)
}

func TestKustomization(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoringDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Namespace          string `json:"namespace"`
		ConfigMapGenerator []struct {
			Name    string `json:"name"`
			Files   []string
			Options struct {
				Labels map[string]string `json:"labels"`
			} `json:"options"`
		} `json:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	files := map[string]string{}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			_, src, ok := strings.Cut(f, "=")
			if !ok {
				src = f
			}
			files[g.Name] = src
			if _, err := os.Stat(filepath.Join(monitoringDir, src)); err != nil {
				t.Errorf("ConfigMap %s: %v", g.Name, err)
			}
		}
		if g.Name == "reverser-grafana-dashboard" && g.Options.Labels["grafana_dashboard"] != "1" {
			t.Errorf("ConfigMap %s: no label grafana_dashboard: \"1\"", g.Name)
		}
	}
	if files["reverser-grafana-dashboard"] != "dashboard.json" || files["reverser-prometheus-rules"] != "alerts.yaml" {
		t.Errorf("ConfigMaps %v: want reverser-grafana-dashboard from dashboard.json, reverser-prometheus-rules from alerts.yaml", files)
	}
	if k.Namespace != "reverser-system" {
		t.Errorf("namespace %q, want reverser-system", k.Namespace)
	}
}

// The checker must catch what it exists to catch.
func TestCheckExprCatchesMistakes(t *testing.T) {
	e := exportedByServers(t)
	for _, tc := range []struct {
		expr string
		want string // in a problem; empty: no problem
	}{
		{`rate(reverser_does_not_exist_total[5m])`, "reverser_does_not_exist_total is not exported"},
		{`sum by (job) (rate(reverser_does_not_exist_total{job="x"}[5m])) > 0`, "reverser_does_not_exist_total is not exported"},
		{`{__name__="reverser_does_not_exist_total"}`, "reverser_does_not_exist_total is not exported"},
		{`reverser_pushes_total{reslt="ok"}`, `no label "reslt"`},
		{`sum by (outcme) (rate(reverser_watch_events_total[5m]))`, `label "outcme" is on none of reverser_watch_events_total`},
		{`sum(rate(reverser_watch_events_total[5m])) by (outcme)`, `label "outcme"`},
		{`sum by (outcome) (rate(reverser_pushes_total[5m]))`, `label "outcome" is on none of reverser_pushes_total`},
		{`rate(reverser_commits_total_bucket[5m])`, "reverser_commits_total_bucket is not exported"},
		{`histogram_quantile(0.9, sum by (le) (rate(reverser_pushes_total[5m])))`, `label "le" is on none`},
		{`rate(reverser_commit_total[5m])`, "reverser_commit_total is not exported"},
		{`ratе(reverser_commits_total[5m])`, "cannot read"}, // a Cyrillic е
		{`rates(reverser_commits_total[5m])`, `unknown function with name "rates"`},
		{`apiserver_request_totals{group="reverser.dev"}`, "apiserver_request_totals is not exported"},
		{`sum(rate(reverser_commits_total[5m])`, "cannot read"},
		{`reverser_pushes_total{result=ok}`, "cannot read"},

		{`rate(reverser_commits_total[5m])`, ""},
		{`reverser_pushes_total{result="reverser_not_a_metric_total"}`, ""},
		{`histogram_quantile(0.99, sum by (le) (rate(reverser_push_duration_seconds_bucket{namespace=~"$namespace", job=~"$job"}[$__rate_interval])))`, ""},
		{`sum without (instance) (rate(reverser_converges_total{outcome=~"failed|error"}[5m])) by (reason)`, "cannot read"},
		{`sum by (reason, outcome) (increase(reverser_converges_total[1h] offset 1d))`, ""},
		{`sum(rate(reverser_attribution_total{outcome="unresolved"}[30m])) / on (job) group_left sum(rate(reverser_attribution_total[30m])) > 0.1`, ""},
		{`max_over_time(reverser_worker_queue_depth[1h:5m]) > 1e3`, ""},
		{`up{job="reverser-controller"} == 0 or absent(up{job="reverser-controller"})`, ""},
		{`sum by (code, verb) (rate(apiserver_request_total{group="reverser.dev", code=~"5.."}[5m]))`, ""},
		{`histogram_quantile(0.99, sum by (verb, le) (rate(apiserver_request_duration_seconds_bucket{group="reverser.dev"}[5m])))`, ""},
		{`sum by (colour) (rate(apiserver_request_total[5m]))`, `label "colour"`},
		{`rate(go_gc_duration_seconds_count[5m]) + process_resident_memory_bytes # a comment`, ""},
	} {
		problems := checkExpr(e, tc.expr)
		joined := strings.Join(problems, "; ")
		switch {
		case tc.want == "" && len(problems) > 0:
			t.Errorf("%s: unexpected problems: %s", tc.expr, joined)
		case tc.want != "" && !strings.Contains(joined, tc.want):
			t.Errorf("%s: problems %q, want one with %q", tc.expr, joined, tc.want)
		}
	}
}

// parsePromQL must find what a query selects, not what it quotes or names,
// and the selectors each clause's labels must be found on.
func TestParsePromQL(t *testing.T) {
	q, err := parsePromQL(`sum by (job, le) (rate(a_bucket{x="b_total", y!~"c|d"}[$__rate_interval:30s] offset 1h)) / ignoring (z) group_left (w) ` +
		`sum(b{"weird"="1"}) by (v) and {__name__="c", q="1"} unless topk(3, d) > bool 0.5 * -Inf`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range q.selectors {
		names = append(names, s.name+"{"+strings.Join(s.labels, ",")+"}")
	}
	if want := []string{"a_bucket{x,y}", "b{weird}", "c{q}", "d{}"}; !slices.Equal(names, want) {
		t.Errorf("selectors %v, want %v", names, want)
	}
	var groups []string
	for _, g := range q.groupings {
		var in []string
		for _, s := range g.scope {
			in = append(in, s.name)
		}
		groups = append(groups, fmt.Sprintf("%s(%s)@%s", g.keyword, strings.Join(g.labels, ","), strings.Join(in, ",")))
	}
	if want := []string{"ignoring(z)@a_bucket,b", "group_left(w)@a_bucket,b", "by(job,le)@a_bucket", "by(v)@b"}; !slices.Equal(groups, want) {
		t.Errorf("groupings %v, want %v", groups, want)
	}
}

type servicePort struct {
	Name string `json:"name"`
}

// TestTheServiceMonitorsJobIsTheAlerts (#29): the job each ServiceMonitor
// gives its server's Service is the job alerts.yaml selects, and its port is
// one the Service has; ReverserControllerAbsent fired on a healthy install
// when the job was the Service's name, and nothing scraped the API server.
func TestTheServiceMonitorsJobIsTheAlerts(t *testing.T) {
	alerts, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	require.NoError(t, err)
	for monitor, manifest := range map[string]string{"servicemonitor.yaml": "controller.yaml", "apiserver.yaml": "apiserver.yaml"} {
		var sm struct {
			Spec struct {
				JobLabel string `json:"jobLabel"`
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Endpoints []struct {
					Port string `json:"port"`
				} `json:"endpoints"`
			} `json:"spec"`
		}
		b, err := os.ReadFile(filepath.Join(monitoringDir, "servicemonitor", monitor))
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(b, &sm), monitor)

		type service struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Ports []servicePort `json:"ports"`
			} `json:"spec"`
		}
		b, err = os.ReadFile("../../artifacts/deploy/base/" + manifest)
		require.NoError(t, err)
		var selected []service
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var s service
			require.NoError(t, yaml.Unmarshal([]byte(doc), &s))
			if s.Kind == "Service" && labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(s.Metadata.Labels)) {
				selected = append(selected, s)
			}
		}
		require.Len(t, selected, 1, "%s selects one Service of %s", monitor, manifest)
		job := selected[0].Metadata.Labels[sm.Spec.JobLabel]
		require.NotEmpty(t, job, "Service %s has no label %q: the job would be its name", selected[0].Metadata.Name, sm.Spec.JobLabel)
		assert.Contains(t, string(alerts), `up{job="`+job+`"}`, "the alerts select the job %s makes", monitor)
		for _, e := range sm.Spec.Endpoints {
			assert.True(t, slices.ContainsFunc(selected[0].Spec.Ports, func(p servicePort) bool { return p.Name == e.Port }),
				"%s: port %q is not the Service's", monitor, e.Port)
		}
	}
}

// The PrometheusRule is alerts.yaml's groups, as hack/prometheusrule writes
// it: a hand edit of either shows here before make verify.
func TestPrometheusRuleIsTheAlerts(t *testing.T) {
	var rule struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			Groups any `json:"groups"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(monitoringDir, "prometheusrule", "prometheusrule.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &rule, yaml.DisallowUnknownFields))
	assert.Equal(t, "monitoring.coreos.com/v1", rule.APIVersion)
	assert.Equal(t, "PrometheusRule", rule.Kind)
	assert.Equal(t, "reverser-system", rule.Metadata.Namespace)
	var file struct {
		Groups any `json:"groups"`
	}
	b, err = os.ReadFile(filepath.Join(monitoringDir, "alerts.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &file))
	require.NotNil(t, file.Groups)
	assert.Equal(t, file.Groups, rule.Spec.Groups, "the PrometheusRule's groups are alerts.yaml's: run make codegen")
}

// A fresh controller exports at 0 the series of fixed label values that
// alerts take increase() or rate() of: else the first push is no increase,
// and ReverserNoSuccessfulPush fired on a controller that pushed once.
func TestCountersAlertsIncreaseStartAtZero(t *testing.T) {
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	have := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				have[f.GetName()+"{"+l.GetName()+"="+l.GetValue()+"}"] = true
			}
		}
	}
	for _, want := range []string{
		"reverser_pushes_total{result=ok}", "reverser_pushes_total{result=error}", "reverser_pushes_total{result=rejected}",
		"reverser_save_failures_total{stage=commit}", "reverser_save_failures_total{stage=push}",
		"reverser_attribution_total{outcome=resolved}", "reverser_attribution_total{outcome=unresolved}",
		"reverser_apply_window_barriers_total{outcome=timed_out}", "reverser_apply_window_barriers_total{outcome=failed}",
	} {
		assert.True(t, have[want], "%s is not exported before its first increment", want)
	}
}
