// Command testreport reads `go test -json` on stdin and prints what a
// person waiting for the tests wants: one line per package as it ends
// (as go test prints them), a progress line every 30 seconds naming the
// packages still running, the output of every failing test, and at the
// end the skipped tests with their reasons. It exits with status 1 when
// a test or package failed.
//
//	go test -json ./... | go run ./scripts/testreport
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of test2json output.
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string // of build-output events
	FailedBuild string // of a package's fail event: the ImportPath whose build failed
}

func main() {
	r := newReport(os.Stdout, time.Now)
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				r.progress()
			case <-stop:
				return
			}
		}
	}()
	err := r.read(os.Stdin)
	close(stop)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if !r.summary() {
		os.Exit(1)
	}
}

// report accumulates the events of one go test run.
type report struct {
	mu       sync.Mutex
	w        io.Writer
	now      func() time.Time
	start    time.Time
	running  map[string]time.Time // package → when its first event came
	done     int
	output   map[string][]string // "pkg\x00Test" → its output lines
	build    map[string][]string // build-output lines by ImportPath, until their package fails
	failed   []string            // "pkg\x00Test", in order
	skipped  []string            // "pkg Test: reason"
	failures int
	stray    []string // lines that are not JSON (build errors)
}

func newReport(w io.Writer, now func() time.Time) *report {
	return &report{w: w, now: now, start: now(), running: map[string]time.Time{}, output: map[string][]string{}, build: map[string][]string{}}
}

// read consumes the event stream until EOF.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			r.mu.Lock()
			r.stray = append(r.stray, string(line))
			r.mu.Unlock()
			continue
		}
		r.add(ev)
	}
	return sc.Err()
}

func (r *report) add(ev event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Action == "build-output" {
		// The compiler's or vet's messages (go test -vet=all), reported
		// before the fail event that names their ImportPath.
		r.build[ev.ImportPath] = append(r.build[ev.ImportPath], ev.Output)
		return
	}
	if ev.Package == "" {
		return
	}
	if ev.FailedBuild != "" {
		id := ev.Package + "\x00"
		r.output[id] = append(r.build[ev.FailedBuild], r.output[id]...)
		delete(r.build, ev.FailedBuild)
	}
	if _, ok := r.running[ev.Package]; !ok && ev.Action != "pass" && ev.Action != "fail" && ev.Action != "skip" {
		r.running[ev.Package] = r.now()
	}
	id := ev.Package + "\x00" + ev.Test
	switch ev.Action {
	case "output":
		r.output[id] = append(r.output[id], ev.Output)
	case "skip":
		if ev.Test != "" {
			r.skipped = append(r.skipped, fmt.Sprintf("%s %s: %s", short(ev.Package), ev.Test, reason(r.output[id])))
			delete(r.output, id)
		} else {
			r.finish(ev)
		}
	case "pass":
		if ev.Test != "" {
			delete(r.output, id)
		} else {
			r.finish(ev)
		}
	case "fail":
		if ev.Test != "" {
			r.failed = append(r.failed, id)
		} else {
			r.finish(ev)
		}
	}
}

// finish prints a package's line; r.mu is held.
func (r *report) finish(ev event) {
	delete(r.running, ev.Package)
	r.done++
	status := "ok  "
	if ev.Action == "fail" {
		status = "FAIL"
		r.failures++
		if len(r.failedIn(ev.Package)) == 0 { // a build failure or a crash outside any test
			r.failed = append(r.failed, ev.Package+"\x00")
		}
	}
	if ev.Action == "skip" && len(r.output[ev.Package+"\x00"]) > 0 && strings.Contains(strings.Join(r.output[ev.Package+"\x00"], ""), "no test files") {
		return
	}
	if strings.Contains(strings.Join(r.output[ev.Package+"\x00"], ""), "(cached)") {
		// Unchanged since it last passed: go test replays its output.
		fmt.Fprintf(r.w, "  %s %-48s (cached)\n", status, short(ev.Package))
		return
	}
	fmt.Fprintf(r.w, "  %s %-48s %6.1fs\n", status, short(ev.Package), ev.Elapsed)
}

func (r *report) failedIn(pkg string) []string {
	var ids []string
	for _, id := range r.failed {
		if strings.HasPrefix(id, pkg+"\x00") {
			ids = append(ids, id)
		}
	}
	return ids
}

// progress prints the packages still running, longest first.
func (r *report) progress() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.running) == 0 {
		return
	}
	type run struct {
		pkg string
		d   time.Duration
	}
	var runs []run
	for pkg, t := range r.running {
		runs = append(runs, run{short(pkg), r.now().Sub(t).Round(time.Second)})
	}
	sort.Slice(runs, func(i, j int) bool {
		return runs[i].d > runs[j].d || runs[i].d == runs[j].d && runs[i].pkg < runs[j].pkg
	})
	names := make([]string, len(runs))
	for i, x := range runs {
		names[i] = fmt.Sprintf("%s (%v)", x.pkg, x.d)
	}
	fmt.Fprintf(r.w, "  ... %v: %d packages done; running %s\n", r.now().Sub(r.start).Round(time.Second), r.done, strings.Join(names, ", "))
}

// summary prints the failures' output and the skipped tests, and reports
// whether the run passed.
func (r *report) summary() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range r.failed {
		pkg, test, _ := strings.Cut(id, "\x00")
		name := test
		if name == "" {
			name = "(package)"
		}
		fmt.Fprintf(r.w, "\n--- FAIL: %s %s\n%s", short(pkg), name, strings.Join(r.output[id], ""))
	}
	if len(r.stray) > 0 && (r.failures > 0 || len(r.failed) > 0) {
		fmt.Fprintf(r.w, "\n%s\n", strings.Join(r.stray, "\n"))
	}
	if len(r.skipped) > 0 {
		fmt.Fprintf(r.w, "\n%d skipped:\n", len(r.skipped))
		for _, s := range r.skipped {
			fmt.Fprintf(r.w, "  %s\n", s)
		}
	}
	return r.failures == 0 && len(r.failed) == 0
}

// reason finds the message of t.Skip in a skipped test's output: the
// lines between its "=== RUN" and "--- SKIP" lines.
func reason(lines []string) string {
	var msg []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		msg = append(msg, t)
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}

// short drops the module prefix shared by every package here.
func short(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/idemkit/idem/")
}
