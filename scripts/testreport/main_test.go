package main

import (
	"strings"
	"testing"
	"time"
)

const stream = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0.1}
{"Action":"run","Package":"example.com/a","Test":"TestRedis"}
{"Action":"output","Package":"example.com/a","Test":"TestRedis","Output":"=== RUN   TestRedis\n"}
{"Action":"output","Package":"example.com/a","Test":"TestRedis","Output":"    a_test.go:9: Redis at 127.0.0.1:6379 unreachable; set IDEM_TEST_REDIS_URL\n"}
{"Action":"output","Package":"example.com/a","Test":"TestRedis","Output":"--- SKIP: TestRedis (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestRedis","Elapsed":0}
{"Action":"pass","Package":"example.com/a","Elapsed":1.5}
{"Action":"start","Package":"example.com/b"}
{"Action":"run","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"    b_test.go:3: got 1, want 2\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBad","Elapsed":0}
{"Action":"fail","Package":"example.com/b","Elapsed":0.2}
{"Action":"start","Package":"example.com/d"}
{"Action":"output","Package":"example.com/d","Output":"ok  \texample.com/d\t(cached)\n"}
{"Action":"pass","Package":"example.com/d","Elapsed":0}
{"ImportPath":"example.com/e [example.com/e.test]","Action":"build-output","Output":"# example.com/e\n"}
{"ImportPath":"example.com/e [example.com/e.test]","Action":"build-output","Output":"./e.go:5:39: fmt.Sprintf format %d has arg \"x\" of wrong type string\n"}
{"ImportPath":"example.com/e [example.com/e.test]","Action":"build-fail"}
{"Action":"start","Package":"example.com/e"}
{"Action":"output","Package":"example.com/e","Output":"FAIL\texample.com/e [build failed]\n"}
{"Action":"fail","Package":"example.com/e","Elapsed":0,"FailedBuild":"example.com/e [example.com/e.test]"}
{"Action":"output","Package":"example.com/c","Output":"?   \texample.com/c\t[no test files]\n"}
{"Action":"skip","Package":"example.com/c","Elapsed":0}
`

func TestReport(t *testing.T) {
	var out strings.Builder
	now := time.Unix(0, 0)
	r := newReport(&out, func() time.Time { return now })
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	if r.summary() {
		t.Error("summary reports a pass for a run with a failed test")
	}
	got := out.String()
	for _, want := range []string{
		"ok   example.com/a",
		"FAIL example.com/b",
		"FAIL example.com/e",
		"./e.go:5:39: fmt.Sprintf format %d has arg \"x\" of wrong type string\nFAIL\texample.com/e [build failed]", // vet's message (go test -vet=all)
		"ok   example.com/d                                    (cached)",
		"--- FAIL: example.com/b TestBad\n    b_test.go:3: got 1, want 2",
		"1 skipped:\n  example.com/a TestRedis: a_test.go:9: Redis at 127.0.0.1:6379 unreachable; set IDEM_TEST_REDIS_URL",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "example.com/c") {
		t.Errorf("a package without tests is reported:\n%s", got)
	}
}

func TestProgress(t *testing.T) {
	var out strings.Builder
	now := time.Unix(0, 0)
	r := newReport(&out, func() time.Time { return now })
	r.add(event{Action: "start", Package: "github.com/idemkit/idem/stores/pgx"})
	now = now.Add(45 * time.Second)
	r.add(event{Action: "start", Package: "github.com/idemkit/idem/core"})
	now = now.Add(15 * time.Second)
	r.progress()
	if want := "... 1m0s: 0 packages done; running stores/pgx (1m0s), core (15s)"; !strings.Contains(out.String(), want) {
		t.Errorf("progress %q, want %q", out.String(), want)
	}
}

func TestPassingRun(t *testing.T) {
	var out strings.Builder
	r := newReport(&out, time.Now)
	r.read(strings.NewReader(`{"Action":"pass","Package":"p","Test":"T"}` + "\n" + `{"Action":"pass","Package":"p"}` + "\n"))
	if !r.summary() {
		t.Errorf("a passing run reported as failed:\n%s", out.String())
	}
}
