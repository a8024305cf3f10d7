package metrics_test

// A small PromQL reader for artifacts_test.go. The Prometheus parser
// (github.com/prometheus/prometheus/promql/parser) is not a dependency of this
// module and is too heavy to add for a test, so this reads just enough of the
// language to find every metric a query selects, the label names its matchers
// use, and the label names of its by, without, on, ignoring, group_left and
// group_right clauses. It skips string literals, numbers, durations, range
// and subquery brackets, Grafana variables ($x, ${x}) and comments, and it
// knows PromQL's functions, aggregations and keywords, so an identifier it
// does not recognize as any of those is a metric name.

import (
	"fmt"
	"strings"
)

type tokKind int

const (
	tokIdent  tokKind = iota // a metric, label, function or keyword name
	tokString                // a quoted string, quotes removed
	tokNumber                // a number or a duration
	tokVar                   // a Grafana variable: $x or ${x}
	tokPunct                 // brackets, commas and operators
)

type promToken struct {
	kind tokKind
	text string
}

func (t promToken) is(punct string) bool { return t.kind == tokPunct && t.text == punct }

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

// lexPromQL splits expr into tokens.
func lexPromQL(expr string) ([]promToken, error) {
	var toks []promToken
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment, to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			toks = append(toks, promToken{tokString, expr[i+1 : j]})
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				k := strings.IndexByte(expr[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated ${ at offset %d", i)
				}
				j += k + 1
			} else {
				for j < len(expr) && isIdentChar(expr[j]) && expr[j] != ':' {
					j++
				}
			}
			if j == i+1 {
				return nil, fmt.Errorf("lone $ at offset %d", i)
			}
			toks = append(toks, promToken{tokVar, expr[i:j]})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(expr) && isDigit(expr[i+1])):
			// 1, 0.5, 1e-3, 0x1f, 5m, 1h30m.
			j := i + 1
			for j < len(expr) {
				d := expr[j]
				if isDigit(d) || d == '.' || d == '_' || (d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z') {
					j++
					continue
				}
				if (d == '+' || d == '-') && (expr[j-1] == 'e' || expr[j-1] == 'E') && !strings.HasPrefix(expr[i:], "0x") {
					j++
					continue
				}
				break
			}
			toks = append(toks, promToken{tokNumber, expr[i:j]})
			i = j
		case isIdentStart(c):
			j := i + 1
			for j < len(expr) && isIdentChar(expr[j]) {
				j++
			}
			toks = append(toks, promToken{tokIdent, expr[i:j]})
			i = j
		default:
			if i+1 < len(expr) {
				switch two := expr[i : i+2]; two {
				case "==", "!=", "=~", "!~", "<=", ">=":
					toks = append(toks, promToken{tokPunct, two})
					i += 2
					continue
				}
			}
			if !strings.ContainsRune("(){}[],=<>+-*/%^@", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
			}
			toks = append(toks, promToken{tokPunct, string(c)})
			i++
		}
	}
	return toks, nil
}

// promqlFunctions are PromQL's functions (Prometheus 3), start and end
// included (the @ modifier's).
var promqlFunctions = set(
	"abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
	"avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
	"count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
	"delta", "deriv", "double_exponential_smoothing", "exp", "floor", "histogram_avg",
	"histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
	"histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase", "info",
	"irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2",
	"mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
	"predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets",
	"round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
	"sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan",
	"tanh", "time", "timestamp", "vector", "year", "start", "end",
)

// promqlAggregations are PromQL's aggregation operators (case-insensitive).
var promqlAggregations = set(
	"sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk", "bottomk",
	"quantile", "count_values", "limitk", "limit_ratio",
)

// promqlKeywords are the other words PromQL reserves (case-insensitive).
var promqlKeywords = set("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan")

// promqlGrouping are the clauses followed by a list of label names.
var promqlGrouping = set("by", "without", "on", "ignoring", "group_left", "group_right")

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
	at     int // token index
}

// grouping is one clause naming labels: by (a, b) and the like.
type grouping struct {
	keyword string
	labels  []string
	// from, to delimit the tokens of the aggregation's argument (by,
	// without); -1 for the whole expression (on, ignoring, group_*).
	from, to int
}

type promQuery struct {
	selectors []selector
	groupings []grouping
	unknown   []string // names called as functions that PromQL does not have
}

// scope is the selectors a grouping's labels must be found on.
func (q *promQuery) scope(g grouping) []selector {
	if g.from < 0 {
		return q.selectors
	}
	var out []selector
	for _, s := range q.selectors {
		if s.at > g.from && s.at < g.to {
			out = append(out, s)
		}
	}
	return out
}

// parsePromQL reads expr: its selectors, grouping clauses and calls.
func parsePromQL(expr string) (*promQuery, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("empty expression")
	}
	match, err := matchBrackets(toks)
	if err != nil {
		return nil, err
	}
	at := func(i int) promToken {
		if i < 0 || i >= len(toks) {
			return promToken{}
		}
		return toks[i]
	}
	q := &promQuery{}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.is("["): // a range or a subquery: durations only
			i = match[i]
		case t.is("{"): // a selector without a name before it: {__name__="x"}
			s := selector{at: i}
			if err := readMatchers(toks[i+1:match[i]], &s); err != nil {
				return nil, err
			}
			if s.name == "" {
				return nil, fmt.Errorf("a selector without a metric name")
			}
			q.selectors = append(q.selectors, s)
			i = match[i]
		case t.kind == tokIdent:
			low := strings.ToLower(t.text)
			next := at(i + 1)
			switch {
			case promqlKeywords[low]:
			case promqlGrouping[low]:
				if !next.is("(") {
					if low == "group_left" || low == "group_right" {
						continue // no extra labels
					}
					return nil, fmt.Errorf("%s without a label list", t.text)
				}
				g := grouping{keyword: low, from: -1, to: -1}
				for j := i + 2; j < match[i+1]; j++ {
					switch l := toks[j]; {
					case l.is(","):
					case l.kind == tokIdent || l.kind == tokString:
						g.labels = append(g.labels, l.text)
					default:
						return nil, fmt.Errorf("%s (...) holds %q, not a label name", t.text, l.text)
					}
				}
				if low == "by" || low == "without" {
					prev := at(i - 1)
					switch {
					case prev.kind == tokIdent && promqlAggregations[strings.ToLower(prev.text)]:
						// sum by (a) (...): the argument follows the list.
						open := match[i+1] + 1
						if !at(open).is("(") {
							return nil, fmt.Errorf("%s %s (...) not followed by its argument", prev.text, t.text)
						}
						g.from, g.to = open, match[open]
					case prev.is(")") && at(match[i-1]-1).kind == tokIdent &&
						promqlAggregations[strings.ToLower(at(match[i-1]-1).text)]:
						// sum (...) by (a): the argument precedes it.
						g.from, g.to = match[i-1], i-1
					default:
						return nil, fmt.Errorf("%s not after an aggregation", t.text)
					}
				}
				q.groupings = append(q.groupings, g)
				i = match[i+1]
			case next.is("("):
				if !promqlFunctions[t.text] && !promqlAggregations[low] {
					q.unknown = append(q.unknown, t.text)
				}
			case promqlAggregations[low] && next.kind == tokIdent &&
				(strings.EqualFold(next.text, "by") || strings.EqualFold(next.text, "without")):
			default:
				s := selector{name: t.text, at: i}
				if next.is("{") {
					if err := readMatchers(toks[i+2:match[i+1]], &s); err != nil {
						return nil, err
					}
					i = match[i+1]
				}
				q.selectors = append(q.selectors, s)
			}
		}
	}
	return q, nil
}

// matchBrackets pairs (), [] and {}: match[i] is the index of the bracket
// closing or opening toks[i].
func matchBrackets(toks []promToken) ([]int, error) {
	match := make([]int, len(toks))
	var stack []int
	pairs := map[string]string{")": "(", "]": "[", "}": "{"}
	for i, t := range toks {
		match[i] = -1
		if t.kind != tokPunct {
			continue
		}
		switch t.text {
		case "(", "[", "{":
			stack = append(stack, i)
		case ")", "]", "}":
			if len(stack) == 0 || toks[stack[len(stack)-1]].text != pairs[t.text] {
				return nil, fmt.Errorf("unbalanced %q", t.text)
			}
			open := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			match[open], match[i] = i, open
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unclosed %q", toks[stack[len(stack)-1]].text)
	}
	return match, nil
}

// readMatchers reads the inside of {...}: label op "value", ... A quoted
// name alone ({"metric"}) or __name__="metric" names the metric.
func readMatchers(toks []promToken, s *selector) error {
	for i := 0; i < len(toks); {
		l := toks[i]
		if l.kind != tokIdent && l.kind != tokString {
			return fmt.Errorf("matcher starts with %q, not a label name", l.text)
		}
		if l.kind == tokString && (i+1 == len(toks) || toks[i+1].is(",")) {
			s.name = l.text
			i += 2
			continue
		}
		if i+2 >= len(toks) {
			return fmt.Errorf("matcher on %q is incomplete", l.text)
		}
		op, v := toks[i+1], toks[i+2]
		if op.kind != tokPunct || (op.text != "=" && op.text != "!=" && op.text != "=~" && op.text != "!~") {
			return fmt.Errorf("matcher on %q has operator %q", l.text, op.text)
		}
		if v.kind != tokString {
			return fmt.Errorf("matcher on %q has an unquoted value %q", l.text, v.text)
		}
		if l.text == "__name__" && op.text == "=" {
			s.name = v.text
		} else {
			s.labels = append(s.labels, l.text)
		}
		i += 3
		if i < len(toks) {
			if !toks[i].is(",") {
				return fmt.Errorf("matchers not separated by a comma at %q", toks[i].text)
			}
			i++
		}
	}
	return nil
}
