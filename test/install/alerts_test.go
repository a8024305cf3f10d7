package install

// The alerts of artifacts/monitoring evaluated by Prometheus' own engine
// against what the installed servers really export (#29): a scrape of each
// server is loaded with the target labels Prometheus would add, and every
// alert expression of alerts.yaml is evaluated at the last scrape.

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"reverser.dev/reverser/pkg/servingcert"
)

// brokenInstall are the alerts that say the install itself does not work;
// none may fire on this one. The others may (the tenant test provokes
// refusals on purpose), but each must evaluate.
var brokenInstall = []string{"ReverserControllerDown", "ReverserControllerAbsent", "ReverserNoLeader",
	"ReverserAPIServerDown", "ReverserAPIServerAbsent", "ReverserGitTargetNotReady", "ReverserNoSuccessfulPush"}

// scraper scrapes both servers as Prometheus would, into series.
type scraper struct {
	controllerURL string
	apiserver     *http.Client
	apiserverURL  string
	// controllerJob and apiserverJob are the jobs the ServiceMonitors give
	// the servers.
	controllerJob, apiserverJob string
	series                      memSeries
}

// newScraper reads each server's job from its ServiceMonitor and the
// Service it selects in the cluster, and reaches the API server with the
// admin's client certificate, trusting the CA the APIService trusts.
func newScraper(t *testing.T, metricsAddr string, apiPort int) *scraper {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.KubeconfigAdmin)
	require.NoError(t, err)
	ca, err := base64.StdEncoding.DecodeString(kubectlOK(t, env.KubeconfigAdmin, "", "get", "apiservice", "v1alpha1.reverser.dev",
		"-o", "jsonpath={.spec.caBundle}"))
	require.NoError(t, err)
	cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.CAData = "", ca
	cfg.TLSClientConfig.ServerName = servingcert.ServiceNames(ns, "reverser-apiserver")[2]
	client, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	return &scraper{controllerURL: "http://" + metricsAddr + "/metrics", apiserver: client,
		apiserverURL: fmt.Sprintf("https://127.0.0.1:%d/metrics", apiPort), series: memSeries{},
		controllerJob: monitoredJob(t, "servicemonitor.yaml"), apiserverJob: monitoredJob(t, "apiserver.yaml")}
}

// monitoredJob is the job a ServiceMonitor of artifacts/monitoring gives the
// Service it selects in the installed cluster.
func monitoredJob(t *testing.T, file string) string {
	t.Helper()
	var sm struct {
		Spec struct {
			JobLabel string `json:"jobLabel"`
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(root, "artifacts", "monitoring", "servicemonitor", file))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &sm))
	var selector []string
	for k, v := range sm.Spec.Selector.MatchLabels {
		selector = append(selector, k+"="+v)
	}
	job := kubectlOK(t, env.KubeconfigAdmin, "", "get", "service", "-n", ns, "-l", strings.Join(selector, ","),
		"-o", fmt.Sprintf("jsonpath={.items[*].metadata.labels.%s}", strings.ReplaceAll(sm.Spec.JobLabel, ".", `\.`)))
	require.NotEmpty(t, job, "%s: the Service it selects has no label %s", file, sm.Spec.JobLabel)
	require.NotContains(t, job, " ", "%s selects more than one Service", file)
	return job
}

// scrape reads both servers once, at now.
func (s *scraper) scrape(t *testing.T) {
	t.Helper()
	s.load(t, http.DefaultClient, s.controllerURL, s.controllerJob)
	s.load(t, s.apiserver, s.apiserverURL, s.apiserverJob)
}

func (s *scraper) load(t *testing.T, client *http.Client, url, job string) {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, body)
	text := expfmt.NewTextParser(model.UTF8Validation)
	families, err := text.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err, "GET %s", url)
	var fams []*dto.MetricFamily
	for _, f := range families {
		fams = append(fams, f)
	}
	now := time.Now()
	samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.TimeFromUnixNano(now.UnixNano())}, fams...)
	require.NoError(t, err, "GET %s", url)
	target := map[string]string{"job": job, "instance": strings.Split(strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://"), "/")[0],
		"namespace": ns}
	s.series.add(withTarget(labels.FromStrings(model.MetricNameLabel, "up"), target), now, 1)
	for _, smp := range samples {
		b := labels.NewBuilder(labels.EmptyLabels())
		for k, v := range smp.Metric {
			b.Set(string(k), string(v))
		}
		s.series.add(withTarget(b.Labels(), target), now, float64(smp.Value))
	}
}

// withTarget adds the target's labels a series does not have itself (the
// ServiceMonitor honours the series' own labels).
func withTarget(l labels.Labels, target map[string]string) labels.Labels {
	b := labels.NewBuilder(l)
	for k, v := range target {
		if !l.Has(k) {
			b.Set(k, v)
		}
	}
	return b.Labels()
}

// evaluate evaluates every alert of alerts.yaml at the last scrape and
// returns those whose expression has a result, that is those that are
// pending or firing.
func (s *scraper) evaluate(t *testing.T, at time.Time) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "artifacts", "monitoring", "alerts.yaml"))
	require.NoError(t, err)
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.Parse(b, false, model.UTF8Validation, p, nil)
	require.Empty(t, errs, "alerts.yaml")
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute, Parser: p})
	var active []string
	evaluated := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			q, err := engine.NewInstantQuery(context.Background(), s.series, nil, r.Expr, at)
			require.NoError(t, err, "alert %s", r.Alert)
			res := q.Exec(context.Background())
			q.Close()
			if !assert.NoError(t, res.Err, "alert %s: %s", r.Alert, r.Expr) {
				continue
			}
			warnings, _ := res.Warnings.AsStrings(r.Expr, 0, 0)
			assert.Empty(t, warnings, "alert %s", r.Alert)
			evaluated++
			vec, err := res.Vector()
			require.NoError(t, err, "alert %s", r.Alert)
			if len(vec) > 0 {
				active = append(active, fmt.Sprintf("%s %v", r.Alert, vec))
			}
		}
	}
	require.NotZero(t, evaluated, "no alert evaluated")
	t.Logf("%d alert expressions evaluated over %d series", evaluated, len(s.series))
	return active
}

// alertsOnALiveScrape is the Done-when of #29: the alert expressions
// evaluate without error against a live scrape, and none of those that mean
// a broken install is active.
func alertsOnALiveScrape(t *testing.T, s *scraper) {
	s.scrape(t)
	at := time.Now()
	active := s.evaluate(t, at)
	t.Logf("active alerts: %v", active)
	for _, a := range active {
		name, _, _ := strings.Cut(a, " ")
		assert.NotContains(t, brokenInstall, name, "%s is active on a working install: %s", name, a)
	}
	// The engine must see the series the alerts select: the leader gauge of
	// the controller's job, and a request of the API server's.
	for _, expr := range []string{
		fmt.Sprintf(`sum by (namespace, job) (reverser_leader{job=%q}) == 1`, s.controllerJob),
		fmt.Sprintf(`sum(apiserver_request_total{job=%q, group="reverser.dev"}) > 0`, s.apiserverJob),
	} {
		q, err := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute}).NewInstantQuery(context.Background(), s.series, nil, expr, at)
		require.NoError(t, err)
		vec, err := q.Exec(context.Background()).Vector()
		require.NoError(t, err)
		assert.NotEmpty(t, vec, "%s: no result, so the alerts would not see the servers", expr)
	}
}

// memSeries is a storage.Queryable over float samples: what the engine
// needs, without a TSDB.
type memSeries map[string]*floatSeries

type floatSeries struct {
	lset    labels.Labels
	samples []chunks.Sample
}

func (m memSeries) add(l labels.Labels, at time.Time, v float64) {
	key := l.String()
	s, ok := m[key]
	if !ok {
		s = &floatSeries{lset: l}
		m[key] = s
	}
	s.samples = append(s.samples, floatSample{t: at.UnixMilli(), f: v})
}

func (m memSeries) Querier(mint, maxt int64) (storage.Querier, error) {
	return &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		var out []storage.Series
		for _, s := range m {
			if slices.ContainsFunc(ms, func(matcher *labels.Matcher) bool { return !matcher.Matches(s.lset.Get(matcher.Name)) }) {
				continue
			}
			out = append(out, storage.NewListSeries(s.lset, s.samples))
		}
		slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
		return &seriesList{series: out, at: -1}
	}}, nil
}

type seriesList struct {
	series []storage.Series
	at     int
}

func (l *seriesList) Next() bool                        { l.at++; return l.at < len(l.series) }
func (l *seriesList) At() storage.Series                { return l.series[l.at] }
func (l *seriesList) Err() error                        { return nil }
func (l *seriesList) Warnings() annotations.Annotations { return nil }

type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }
