package idemotel_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// promRefs is what a PromQL expression names: its selectors and the
// labels it groups by. It is only as much of PromQL as the dashboard
// and alert checks need; promtool checks the syntax.
type promRefs struct {
	selectors []selector
	grouping  []string // by, without, on, ignoring, group_left, group_right
}

// selector is one vector selector: a metric name and the labels its
// matchers name.
type selector struct {
	metric   string
	labels   []string
	matchers []matcher
}

// matcher is one label matcher: outcome=~"replayed|conflict".
type matcher struct {
	label, op, value string // value without its quotes
}

// promKeywords are identifiers that are neither metric names nor
// functions.
var promKeywords = []string{"and", "or", "unless", "bool", "offset"}

// promAggregations may be followed by a grouping modifier before their
// parenthesis: sum by (le) (...).
var promAggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
	"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// promGrouping are the modifiers followed by a list of label names.
var promGrouping = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// parsePromQL returns the selectors and grouping labels of expr. Grafana
// variables ($job, ${route}, $__rate_interval) are skipped wherever they
// stand; a range or subquery in brackets is skipped whole.
func parsePromQL(expr string) (promRefs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return promRefs{}, err
	}
	var r promRefs
	for i := 0; i < len(toks); i++ {
		tok := toks[i]
		next := ""
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case tok == "{":
			return r, fmt.Errorf("a selector without a metric name at token %d", i)
		case !isIdent(tok), slices.Contains(promKeywords, tok):
		case slices.Contains(promGrouping, tok) && next == "(":
			j := i + 2
			for ; j < len(toks) && toks[j] != ")"; j++ {
				if toks[j] != "," {
					if !isIdent(toks[j]) {
						return r, fmt.Errorf("%s (...): %q is not a label name", tok, toks[j])
					}
					r.grouping = append(r.grouping, toks[j])
				}
			}
			if j == len(toks) {
				return r, fmt.Errorf("%s (...): no closing parenthesis", tok)
			}
			i = j
		case next == "(": // a function or an aggregation
		case slices.Contains(promAggregations, tok) && (next == "by" || next == "without"):
		default:
			s := selector{metric: tok}
			if next == "{" {
				j, ms, err := matchers(toks, i+2)
				if err != nil {
					return r, fmt.Errorf("%s{...}: %w", tok, err)
				}
				for _, m := range ms {
					s.labels = append(s.labels, m.label)
				}
				s.matchers, i = ms, j
			}
			r.selectors = append(r.selectors, s)
		}
	}
	return r, nil
}

// matchers reads label matchers from toks[i] to the closing brace and
// returns the brace's index and the matchers.
func matchers(toks []string, i int) (int, []matcher, error) {
	var ms []matcher
	for i < len(toks) && toks[i] != "}" {
		if toks[i] == "," {
			i++
			continue
		}
		if i+2 >= len(toks) || !isIdent(toks[i]) || !slices.Contains([]string{"=", "!=", "=~", "!~"}, toks[i+1]) || !isString(toks[i+2]) {
			return i, nil, fmt.Errorf("bad matcher at %q", strings.Join(toks[i:min(i+3, len(toks))], " "))
		}
		v := toks[i+2]
		ms = append(ms, matcher{label: toks[i], op: toks[i+1], value: v[1 : len(v)-1]})
		i += 3
	}
	if i == len(toks) {
		return i, nil, fmt.Errorf("no closing brace")
	}
	return i, ms, nil
}

// lexPromQL splits expr into identifiers, strings (quotes kept),
// numbers, operators and punctuation, dropping Grafana variables,
// bracketed ranges and comments.
func lexPromQL(expr string) ([]string, error) {
	var toks []string
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, expr[i:j+1])
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated range at %d", i)
			}
			i += j + 1
		case c == '$':
			i = skipVariable(expr, i+1)
		case isIdentByte(c, true):
			j := i + 1
			for j < len(expr) && isIdentByte(expr[j], false) {
				j++
			}
			toks = append(toks, expr[i:j])
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i + 1
			for j < len(expr) && (isIdentByte(expr[j], false) || expr[j] == '.') {
				j++
			}
			toks = append(toks, expr[i:j])
			i = j
		case i+1 < len(expr) && slices.Contains([]string{"!=", "=~", "!~", "==", ">=", "<="}, expr[i:i+2]):
			toks = append(toks, expr[i:i+2])
			i += 2
		case strings.IndexByte("{}(),=<>+-*/%^", c) >= 0:
			toks = append(toks, expr[i:i+1])
			i++
		default:
			return nil, fmt.Errorf("unexpected %q at %d", c, i)
		}
	}
	return toks, nil
}

// skipVariable returns the index after the Grafana variable whose name
// starts at i ($name or ${name}).
func skipVariable(expr string, i int) int {
	if i < len(expr) && expr[i] == '{' {
		if j := strings.IndexByte(expr[i:], '}'); j >= 0 {
			return i + j + 1
		}
		return len(expr)
	}
	for i < len(expr) && isIdentByte(expr[i], false) {
		i++
	}
	return i
}

func isIdentByte(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

func isIdent(tok string) bool { return tok != "" && isIdentByte(tok[0], true) }

func isString(tok string) bool { return tok != "" && strings.IndexByte("\"'`", tok[0]) >= 0 }

func TestParsePromQL(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want string // fmt of promRefs, or "error"
	}{
		{`up`, `{[{up [] []}] []}`},
		{`sum by (le, operation) (rate(a_bucket{job=~"$job", x!="y"}[$__rate_interval]))`, `{[{a_bucket [job x] [{job =~ $job} {x != y}]}] [le operation]}`},
		{"histogram_quantile(0.99, sum(rate(a[5m])) by (le))\n> 0.5", `{[{a [] []}] [le]}`},
		{`a / on (job) group_left (x) b offset 5m`, `{[{a [] []} {b [] []}] [job x]}`},
		{`sum(rate(a{o=~"x|y"}[1m])) / sum(rate(b{o!='z'}[1m])) > bool 1`, `{[{a [o] [{o =~ x|y}]} {b [o] [{o != z}]}] []}`},
		{`label_values(a{job=~"${job}"}, x)`, `{[{a [job] [{job =~ ${job}}]} {x [] []}] []}`}, // not PromQL: the caller splits it
		{`{job="x"}`, "error"},
		{`a{job}`, "error"},
		{`a{job="x"`, "error"},
		{`a{job="x}`, "error"},
		{`rate(a[5m`, "error"},
		{`a ; b`, "error"},
	} {
		got, err := parsePromQL(tc.expr)
		s := fmt.Sprint(got)
		if err != nil {
			s = "error"
		}
		if s != tc.want {
			t.Errorf("parsePromQL(%q) = %s (%v), want %s", tc.expr, s, err, tc.want)
		}
	}
}

// FuzzParsePromQL checks that no input makes the parser panic or loop,
// and that every name it returns is an identifier.
func FuzzParsePromQL(f *testing.F) {
	for _, s := range []string{`sum by (le) (rate(a_bucket{job=~"$job"}[5m]))`, `a / on(x) b`, `{`, `a{b="`, "`", `$`, `${`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		r, err := parsePromQL(expr)
		if err != nil {
			return
		}
		for _, s := range r.selectors {
			if !isIdent(s.metric) || slices.ContainsFunc(s.labels, func(l string) bool { return !isIdent(l) }) {
				t.Fatalf("%q: selector %v", expr, s)
			}
		}
	})
}
