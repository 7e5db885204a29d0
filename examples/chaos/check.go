package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// readExecLog parses an instance's -exec-log: one line "exec-id pid
// arrived started recorded key" per execution. A line that does not parse
// is returned in bad.
func readExecLog(path string) (out []execution, bad []string, err error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 6)
		var x execution
		var errs [4]error
		if len(fields) == 6 {
			x.Exec, x.Key = fields[0], fields[5]
			x.PID, errs[0] = strconv.Atoi(fields[1])
			x.Arrived, errs[1] = strconv.ParseInt(fields[2], 10, 64)
			x.Started, errs[2] = strconv.ParseInt(fields[3], 10, 64)
			x.At, errs[3] = strconv.ParseInt(fields[4], 10, 64)
		}
		if len(fields) != 6 || errors.Join(errs[:]...) != nil {
			bad = append(bad, sc.Text())
			continue
		}
		out = append(out, x)
	}
	return out, bad, sc.Err()
}

// verdict is what the checks found.
type verdict struct {
	failures []string // one line per failed check, with examples
	excused  int
}

func (v *verdict) fail(format string, args ...any) {
	v.failures = append(v.failures, fmt.Sprintf(format, args...))
}

// listed formats up to 5 examples and how many more there are.
func listed(items []string) string {
	if len(items) <= 5 {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:5], "; ") + fmt.Sprintf("; and %d more", len(items)-5)
}

// report holds everything the run gathered, for the checks and the
// printout.
type report struct {
	cfg     *config
	j       *injector
	insts   []*instance
	answers []answer
	attempt map[string]int
	runs    []execution // every execution recorded in the logs
	rows    []execution // exactly-once: the committed rows
	badLog  []string
	exits   []string // instances' exit statuses after SIGTERM, when not 0

	interrupted bool // SIGINT or SIGTERM ended the run early
}

// excuse returns why a key run more than once may have been, or "": an
// instance that ran one of its executions was killed, stopped or
// partitioned at some point between the earliest arrival of a request
// that ran it (the instance may have claimed the key from then on) and
// its last execution. Only plain mode excuses.
func (r *report) excuse(runs []execution) string {
	if r.cfg.exactlyOnce || len(runs) < 2 {
		return ""
	}
	from, to := int64(math.MaxInt64), int64(0)
	pids := map[int]bool{}
	for _, x := range runs {
		arrived := x.Arrived
		if arrived == 0 {
			arrived = x.Started
		}
		from, to = min(from, arrived), max(to, x.At)
		pids[x.PID] = true
	}
	for _, f := range r.j.faults {
		if !holding(f.kind) || !pids[f.pid] || f.start.IsZero() {
			continue
		}
		end := f.end
		if f.kind == faultKill || end.IsZero() {
			end = f.start
		}
		if f.start.UnixNano() <= to && end.UnixNano() >= from {
			why := fmt.Sprintf("%s %s (pid %d) at %s", f.kind, f.inst.name, f.pid, r.j.at(f.start))
			if len(pids) == 1 {
				why += "; every run by that one process"
			}
			return why
		}
	}
	return ""
}

// check runs the checks and prints what was counted to w.
func (r *report) check(w io.Writer) verdict {
	var v verdict
	c := r.cfg
	byKey := func(xs []execution) map[string][]execution {
		m := map[string][]execution{}
		for _, x := range xs {
			m[x.Key] = append(m[x.Key], x)
		}
		for _, xs := range m {
			slices.SortFunc(xs, func(a, b execution) int { return cmp.Compare(a.At, b.At) })
		}
		return m
	}
	runs, rows := byKey(r.runs), byKey(r.rows)
	// what must hold each key's one execution: the rows that committed in
	// exactly-once mode, every recorded run in plain mode
	decisive := runs
	if c.exactlyOnce {
		decisive = rows
	}

	// Requests.
	keys := map[string][]answer{}
	var failed []string
	fresh, replayed := 0, 0
	var took []time.Duration
	attempts := map[int]int{}
	for _, a := range r.answers {
		keys[a.key] = append(keys[a.key], a)
		if !a.ok() {
			failed = append(failed, fmt.Sprintf("key %s: %s", a.key, a))
			continue
		}
		took = append(took, a.took)
		attempts[a.result.Attempts]++
		if a.result.Replayed {
			replayed++
		} else {
			fresh++
		}
	}
	fmt.Fprintf(w, "requests: %d logical requests for %d keys: %d succeeded (%d fresh answers, %d replays), %d failed\n",
		len(r.answers), len(keys), len(r.answers)-len(failed), fresh, replayed, len(failed))
	if len(took) > 0 {
		slices.Sort(took)
		pct := func(p float64) time.Duration {
			return took[min(len(took)-1, int(float64(len(took))*p))].Round(time.Millisecond)
		}
		var hist []string
		for _, n := range slices.Sorted(maps.Keys(attempts)) {
			hist = append(hist, fmt.Sprintf("%d:%d", n, attempts[n]))
		}
		fmt.Fprintf(w, "  time to success p50 %v, p90 %v, p99 %v, max %v; attempts per request %s\n", pct(.5), pct(.9), pct(.99), took[len(took)-1].Round(time.Millisecond), strings.Join(hist, " "))
	}
	total := 0
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(r.attempt)) {
		total += r.attempt[k]
		kinds = append(kinds, fmt.Sprintf("%s %d", k, r.attempt[k]))
	}
	fmt.Fprintf(w, "attempts: %d: %s\n", total, strings.Join(kinds, ", "))
	if len(failed) > 0 {
		v.fail("%d requests did not end in success: %s", len(failed), listed(failed))
	}
	if r.interrupted {
		v.fail("interrupted: the requests in flight were cancelled, and the counts cover the run until then")
	}

	// Executions.
	multi := func(m map[string][]execution) (n int) {
		for _, xs := range m {
			if len(xs) > 1 {
				n++
			}
		}
		return n
	}
	fmt.Fprintf(w, "executions: %d recorded for %d keys; %d keys ran more than once\n", len(r.runs), len(runs), multi(runs))
	if c.exactlyOnce {
		fmt.Fprintf(w, "  committed: %d rows for %d keys; %d keys with more than one row; %d runs rolled back\n", len(r.rows), len(rows), multi(rows), len(r.runs)-len(r.rows))
	}
	if len(r.badLog) > 0 {
		v.fail("%d execution log lines do not parse: %s", len(r.badLog), listed(r.badLog))
	}

	// Keys run more than once.
	var twice, excusedLines []string
	for _, k := range slices.Sorted(maps.Keys(decisive)) {
		xs := decisive[k]
		if len(xs) < 2 {
			continue
		}
		var ids []string
		for _, x := range xs {
			ids = append(ids, fmt.Sprintf("%s by pid %d at %s", x.Exec, x.PID, r.j.at(time.Unix(0, x.At))))
		}
		line := fmt.Sprintf("key %s ran %d times (%s)", k, len(xs), strings.Join(ids, ", "))
		if why := r.excuse(xs); why != "" {
			v.excused++
			excusedLines = append(excusedLines, line+", excused: "+why)
			continue
		}
		twice = append(twice, line)
	}
	fmt.Fprintf(w, "keys run twice: %d excused, %d not\n", len(excusedLines), len(twice))
	for i, l := range excusedLines {
		if i == 10 {
			fmt.Fprintf(w, "  and %d more excused\n", len(excusedLines)-10)
			break
		}
		fmt.Fprintln(w, "  "+l)
	}
	if len(twice) > 0 {
		what := "ran more than once with no instance that ran them killed, stopped or partitioned meanwhile"
		if c.exactlyOnce {
			what = "have more than one committed row"
		}
		v.fail("%d keys %s: %s", len(twice), what, listed(twice))
	}

	// Answers: one execution per key, and a recorded one.
	var disagree, unrecorded, missing []string
	excusedDisagree := 0
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		ids := map[string]bool{}
		for _, a := range keys[k] {
			if a.ok() {
				ids[a.exec.Exec] = true
			}
		}
		if len(ids) == 0 {
			continue
		}
		known := map[string]bool{}
		for _, x := range decisive[k] {
			known[x.Exec] = true
		}
		for id := range ids {
			if !known[id] {
				unrecorded = append(unrecorded, fmt.Sprintf("key %s answered with %s", k, id))
			}
		}
		if c.exactlyOnce && len(decisive[k]) == 0 {
			missing = append(missing, "key "+k)
		}
		if len(ids) > 1 {
			if r.excuse(decisive[k]) != "" {
				excusedDisagree++
				continue
			}
			disagree = append(disagree, fmt.Sprintf("key %s answered with %s", k, strings.Join(slices.Sorted(maps.Keys(ids)), " and ")))
		}
	}
	fmt.Fprintf(w, "answers: %d keys whose answers disagree (%d of them excused with the key's double run)\n", len(disagree)+excusedDisagree, excusedDisagree)
	if len(disagree) > 0 {
		v.fail("%d keys whose answers disagree: %s", len(disagree), listed(disagree))
	}
	if len(unrecorded) > 0 {
		what := "was never recorded"
		if c.exactlyOnce {
			what = "never committed"
		}
		v.fail("%d answers whose execution %s: %s", len(unrecorded), what, listed(unrecorded))
	}
	if len(missing) > 0 {
		v.fail("%d keys answered with success have no committed row: %s", len(missing), listed(missing))
	}

	// Instances.
	var exits []string
	for _, in := range r.insts {
		exits = append(exits, in.exits...)
		if in.startErr != nil {
			v.fail("%s could not be restarted: %v", in.name, in.startErr)
		}
	}
	if len(exits) > 0 {
		v.fail("%d instances exited by themselves: %s", len(exits), listed(exits))
	}
	for _, e := range r.exits {
		fmt.Fprintln(w, "note: "+e)
	}
	return v
}
