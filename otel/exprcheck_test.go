package idemotel_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	idem "github.com/idemkit/idem/core"
)

// templateLabel matches a label named in a Grafana legend ({{outcome}})
// or an alert template ({{ $labels.job }}).
var templateLabel = regexp.MustCompile(`\{\{\s*(?:\$labels\.)?([A-Za-z_][A-Za-z0-9_]*)\s*(?:\}\}|\|)`)

// exprChecker checks PromQL expressions against the exported series and
// remembers which series they used.
type exprChecker struct {
	t      *testing.T
	series map[string][]string
	used   map[string]bool
}

// check reports every metric or label of expr that the exporter does not
// serve, and every label template names that the expression's result
// does not carry.
func (c *exprChecker) check(where, expr, template string) {
	c.t.Helper()
	refs, err := parsePromQL(expr)
	if err != nil {
		c.t.Errorf("%s: %v in %q", where, err, expr)
		return
	}
	if len(refs.selectors) == 0 {
		c.t.Errorf("%s: no metric in %q", where, expr)
	}
	have := slices.Clone(scrapeLabels)
	for _, s := range refs.selectors {
		labels, ok := c.series[s.metric]
		if !ok {
			c.t.Errorf("%s: metric %s is not exported (the exporter serves %v)", where, s.metric, sortedKeys(c.series))
			continue
		}
		c.used[s.metric] = true
		have = append(have, labels...)
		for _, l := range s.labels {
			if !slices.Contains(labels, l) && !slices.Contains(scrapeLabels, l) {
				c.t.Errorf("%s: %s has no label %s (it has %v)", where, s.metric, l, labels)
			}
		}
		for _, m := range s.matchers {
			checkValues(c.t, where, m)
		}
	}
	for _, l := range refs.grouping {
		if !slices.Contains(have, l) {
			c.t.Errorf("%s: grouping label %s is on none of the series of %q", where, l, expr)
		}
	}
	result := have
	if len(refs.grouping) > 0 {
		result = refs.grouping
	}
	for _, m := range templateLabel.FindAllStringSubmatch(template, -1) {
		if !slices.Contains(result, m[1]) {
			c.t.Errorf("%s: the template names label %s, which the result of %q does not carry", where, m[1], expr)
		}
	}
}

// knownValues are the values the package gives its enumerated labels.
var knownValues = map[string][]string{
	"outcome": strs(idem.OutcomeExecuted, idem.OutcomeReplayed, idem.OutcomeReplayedAfterWait, idem.OutcomeReleased,
		idem.OutcomeConflict, idem.OutcomeWaitTimeout, idem.OutcomeFingerprintMismatch, idem.OutcomeMissingKey,
		idem.OutcomeInvalidKey, idem.OutcomeBodyTooLarge, idem.OutcomeBodyUnreadable, idem.OutcomeStoreFailure,
		idem.OutcomeNotAcceptable, idem.OutcomeUndecryptable, idem.OutcomeNoNamespace, idem.OutcomeCanceled, idem.OutcomeSkipped,
		idem.OutcomeCompletedLate, idem.OutcomeCompletionLost, idem.OutcomeCompletionExpired,
		idem.OutcomeCompletionDropped, idem.OutcomeReleaseFailed),
	"operation": strs(idem.StoreClaim, idem.StoreComplete, idem.StoreRelease, idem.StoreExtend, idem.StoreGet,
		idem.StoreDelete, idem.StoreBeginTx, idem.StoreCommit, idem.StoreRollback, idem.StoreEvict, idem.StoreNow),
	"error": {"true", "false"},
}

func strs[S ~string](vs ...S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// literalAlternatives matches a regexp that is only a|b|c.
var literalAlternatives = regexp.MustCompile(`^[a-z_]+(\|[a-z_]+)*$`)

// checkValues reports a matcher of an enumerated label whose value (or
// one of the alternatives of its regexp) the package never records.
func checkValues(t *testing.T, where string, m matcher) {
	t.Helper()
	known, ok := knownValues[m.label]
	if !ok {
		return
	}
	values := []string{m.value}
	if m.op == "=~" || m.op == "!~" {
		if !literalAlternatives.MatchString(m.value) {
			t.Errorf("%s: %s%s%q: write the values as a|b|c, so that they can be checked", where, m.label, m.op, m.value)
			return
		}
		values = strings.Split(m.value, "|")
	}
	for _, v := range values {
		if !slices.Contains(known, v) {
			t.Errorf("%s: %s has no value %q (it has %v)", where, m.label, v, known)
		}
	}
}
