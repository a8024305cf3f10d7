package metrics_test

// What a PromQL query selects, read with Prometheus' own parser: every metric
// it selects with the label names its matchers use, and the label names of its
// by, without, on, ignoring, group_left and group_right clauses with the
// selectors each must be found on. Grafana's interval variables are replaced
// by a duration first; its other variables stand in quoted matcher values,
// which the parser takes as they are.

import (
	"regexp"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// selector is one vector selector: a metric name and the label names its
// matchers use.
type selector struct {
	name   string
	labels []string
}

// grouping is one clause naming labels: by (a, b) and the like, with the
// selectors of the expression it groups or matches.
type grouping struct {
	keyword string
	labels  []string
	scope   []selector
}

type promQuery struct {
	expr      parser.Expr
	selectors []selector
	groupings []grouping
}

// grafanaDurations are the variables Grafana replaces with a duration.
var grafanaDurations = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)

var promParser = parser.NewParser(parser.Options{})

// parsePromQL reads expr: its selectors and grouping clauses.
func parsePromQL(expr string) (*promQuery, error) {
	e, err := promParser.ParseExpr(grafanaDurations.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	q := &promQuery{expr: e, selectors: selectorsIn(e)}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.AggregateExpr:
			keyword := "by"
			if n.Without {
				keyword = "without"
			}
			q.add(keyword, n.Grouping, selectorsIn(n.Expr))
		case *parser.BinaryExpr:
			m := n.VectorMatching
			if m == nil {
				return nil
			}
			scope := append(selectorsIn(n.LHS), selectorsIn(n.RHS)...)
			keyword := "ignoring"
			if m.On {
				keyword = "on"
			}
			q.add(keyword, m.MatchingLabels, scope)
			keyword = "group_left"
			if m.Card == parser.CardOneToMany {
				keyword = "group_right"
			}
			q.add(keyword, m.Include, scope)
		}
		return nil
	})
	return q, nil
}

func (q *promQuery) add(keyword string, labels []string, scope []selector) {
	if len(labels) > 0 {
		q.groupings = append(q.groupings, grouping{keyword: keyword, labels: labels, scope: scope})
	}
}

// selectorsIn is every vector selector under n, ranges and subqueries
// included.
func selectorsIn(n parser.Node) []selector {
	var out []selector
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		s := selector{name: vs.Name}
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				s.name = m.Value
				continue
			}
			s.labels = append(s.labels, m.Name)
		}
		out = append(out, s)
		return nil
	})
	return out
}
