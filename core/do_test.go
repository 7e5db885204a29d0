package idem

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func op(key, body string) Op {
	return Op{Kind: "test", Name: "charge", Key: key, Fingerprint: Fingerprint("test", "charge", []byte(body))}
}

// counter is an operation that counts its runs and returns "run N".
type counter struct {
	runs atomic.Int32
	err  error
	wait time.Duration
}

func (c *counter) fn(ctx context.Context) ([]byte, error) {
	n := c.runs.Add(1)
	time.Sleep(c.wait)
	if c.err != nil {
		return nil, c.err
	}
	return []byte("run " + string(rune('0'+n))), nil
}

func TestDoRunsOnceAndReplays(t *testing.T) {
	e, ev := newEngine(t, newTestStore())
	c := &counter{}
	for i, want := range []bool{false, true, true} {
		v, replayed, err := e.Do(t.Context(), op("k", "a"), c.fn)
		if err != nil || string(v) != "run 1" || replayed != want {
			t.Fatalf("call %d: %q replayed=%v %v", i, v, replayed, err)
		}
	}
	if c.runs.Load() != 1 {
		t.Errorf("ran %d times", c.runs.Load())
	}
	if got := ev.outcomes(); len(got) != 3 || got[0] != OutcomeExecuted || got[1] != OutcomeReplayed {
		t.Errorf("outcomes %v", got)
	}
	if ev.evs[0].Method != "test" || ev.evs[0].Route != "charge" || ev.evs[0].KeyHash() == "" {
		t.Errorf("event names %q %q", ev.evs[0].Method, ev.evs[0].Route)
	}
	// Another namespace, kind or name is another key.
	for _, o := range []Op{
		{Namespace: "acme", Kind: "test", Name: "charge", Key: "k", Fingerprint: op("k", "a").Fingerprint},
		{Kind: "other", Name: "charge", Key: "k", Fingerprint: op("k", "a").Fingerprint},
		{Kind: "test", Name: "refund", Key: "k", Fingerprint: op("k", "a").Fingerprint},
	} {
		if _, replayed, err := e.Do(t.Context(), o, c.fn); err != nil || replayed {
			t.Errorf("%+v: replayed=%v %v, want a run of its own", o, replayed, err)
		}
	}
}

func TestDoErrors(t *testing.T) {
	t.Run("mismatch", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore())
		c := &counter{}
		e.Do(t.Context(), op("k", "a"), c.fn)
		if _, _, err := e.Do(t.Context(), op("k", "b"), c.fn); !errors.Is(err, ErrMismatch) {
			t.Errorf("another fingerprint: %v, want ErrMismatch", err)
		}
		if v, replayed, _ := e.Do(t.Context(), op("k", "a"), c.fn); !replayed || string(v) != "run 1" {
			t.Errorf("the first result is untouched: %q %v", v, replayed)
		}
	})
	t.Run("an error releases the key", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore())
		boom := errors.New("boom")
		c := &counter{err: boom}
		if _, _, err := e.Do(t.Context(), op("k", "a"), c.fn); !errors.Is(err, boom) {
			t.Fatalf("%v, want boom", err)
		}
		c.err = nil
		if v, replayed, err := e.Do(t.Context(), op("k", "a"), c.fn); err != nil || replayed || string(v) != "run 2" {
			t.Errorf("retry after an error: %q %v %v, want a new run", v, replayed, err)
		}
	})
	t.Run("a final error is stored and replayed", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore())
		declined := errors.New("card declined")
		c := &counter{err: Final(declined)}
		_, _, err := e.Do(t.Context(), op("k", "a"), c.fn)
		if !errors.Is(err, declined) {
			t.Fatalf("first: %v, want the final error itself", err)
		}
		c.err = nil
		_, replayed, err := e.Do(t.Context(), op("k", "a"), c.fn)
		var fe *FinalError
		if !replayed || !errors.As(err, &fe) || err.Error() != "card declined" {
			t.Errorf("retry: replayed=%v %v, want the stored final error", replayed, err)
		}
		if c.runs.Load() != 1 {
			t.Errorf("ran %d times", c.runs.Load())
		}
		if Final(nil) != nil {
			t.Error("Final(nil) is not nil")
		}
	})
	t.Run("invalid keys", func(t *testing.T) {
		e, ev := newEngine(t, newTestStore())
		if _, _, err := e.Do(t.Context(), op("", "a"), (&counter{}).fn); !errors.Is(err, ErrMissingKey) {
			t.Errorf("no key: %v, want ErrMissingKey", err)
		}
		if got := ev.outcomes(); len(got) != 1 || got[0] != OutcomeMissingKey {
			t.Errorf("no key: outcomes %v", got)
		}
		for _, k := range []string{strings.Repeat("k", 256), "clé", "a\nb"} {
			if _, _, err := e.Do(t.Context(), op(k, "a"), (&counter{}).fn); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("key %q: %v, want ErrInvalidKey", k, err)
			}
		}
		if _, _, err := e.Do(t.Context(), op("with spaces, \"quotes\" and ;", "a"), (&counter{}).fn); err != nil {
			t.Errorf("a printable key: %v", err)
		}
	})
	t.Run("store failure", func(t *testing.T) {
		s := newBlipStore()
		s.set(true, "claim")
		e, _ := newEngine(t, s, WithRetryAfter(2*time.Second))
		c := &counter{}
		_, _, err := e.Do(t.Context(), op("k", "a"), c.fn)
		var re *RetryError
		if !errors.Is(err, ErrStoreFailure) || !errors.Is(err, errBlip) || !errors.As(err, &re) || re.After != 2*time.Second {
			t.Errorf("%v, want ErrStoreFailure with the store's error and a 2s hint", err)
		}
		if c.runs.Load() != 0 {
			t.Error("ran with the store down")
		}
		e2, ev := newEngine(t, s, WithFailOpen())
		if v, _, err := e2.Do(t.Context(), op("k2", "a"), c.fn); err != nil || string(v) != "run 1" {
			t.Errorf("fail open: %q %v", v, err)
		}
		if !ev.evs[0].FailedOpen {
			t.Error("fail open not reported")
		}
	})
	t.Run("commit failure", func(t *testing.T) {
		s := &txStore{testStore: newTestStore(), fail: true}
		e, _ := newEngine(t, s)
		c := &counter{}
		if _, _, err := e.Do(t.Context(), op("k", "a"), c.fn); !errors.Is(err, ErrStoreFailure) {
			t.Errorf("%v, want ErrStoreFailure", err)
		}
		s.fail = false
		if v, replayed, err := e.Do(t.Context(), op("k", "a"), c.fn); err != nil || replayed || string(v) != "run 2" {
			t.Errorf("after a failed commit: %q %v %v, want a new run", v, replayed, err)
		}
	})
}

func TestDoInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ev := newEngine(t, newTestStore())
		c := &counter{wait: 3 * time.Second}
		go e.Do(context.Background(), op("k", "a"), c.fn)
		synctest.Wait()
		_, _, err := e.Do(t.Context(), op("k", "a"), c.fn)
		var re *RetryError
		if !errors.Is(err, ErrInFlight) || !errors.As(err, &re) || re.After != time.Second {
			t.Errorf("%v, want ErrInFlight with a 1s hint", err)
		}
		time.Sleep(4 * time.Second)
		if v, replayed, err := e.Do(t.Context(), op("k", "a"), c.fn); err != nil || !replayed || string(v) != "run 1" {
			t.Errorf("after: %q %v %v", v, replayed, err)
		}
		if got := ev.outcomes(); got[0] != OutcomeConflict {
			t.Errorf("outcomes %v", got)
		}
	})
}

func TestDoWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ev := newEngine(t, notifyingStore{newTestStore()}, WithWait(10*time.Second))
		c := &counter{wait: 3 * time.Second}
		go e.Do(context.Background(), op("k", "a"), c.fn)
		synctest.Wait()
		v, replayed, err := e.Do(t.Context(), op("k", "a"), c.fn)
		if err != nil || !replayed || string(v) != "run 1" {
			t.Errorf("waiter: %q %v %v, want the replay", v, replayed, err)
		}
		if got := ev.outcomes(); len(got) != 2 || got[1] != OutcomeReplayedAfterWait || ev.evs[1].Waited < 3*time.Second {
			t.Errorf("outcomes %v, waited %v", got, ev.evs[len(ev.evs)-1].Waited)
		}
	})
}

func TestDoConcurrentDuplicatesRunOnce(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	c := &counter{wait: 20 * time.Millisecond}
	var wg sync.WaitGroup
	var ok, inFlight atomic.Int32
	for range 50 {
		wg.Go(func() {
			_, _, err := e.Do(t.Context(), op("k", "a"), c.fn)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrInFlight):
				inFlight.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if c.runs.Load() != 1 || ok.Load()+inFlight.Load() != 50 {
		t.Errorf("ran %d times; %d ok, %d in flight", c.runs.Load(), ok.Load(), inFlight.Load())
	}
}

func TestDoPanicReleases(t *testing.T) {
	e, ev := newEngine(t, newTestStore())
	func() {
		defer func() {
			if recover() != "boom" {
				t.Error("the panic did not go on")
			}
		}()
		e.Do(t.Context(), op("k", "a"), func(context.Context) ([]byte, error) { panic("boom") })
	}()
	if got := ev.outcomes(); len(got) != 1 || got[0] != OutcomeReleased {
		t.Errorf("outcomes %v", got)
	}
	if _, replayed, err := e.Do(t.Context(), op("k", "a"), (&counter{}).fn); err != nil || replayed {
		t.Errorf("after a panic: %v %v, want a run", replayed, err)
	}
}

func TestDoHeartbeatKeepsALongRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s)
		c := &counter{wait: time.Minute}
		go e.Do(context.Background(), op("k", "a"), c.fn)
		time.Sleep(50 * time.Second)
		if _, _, err := e.Do(t.Context(), op("k", "a"), c.fn); !errors.Is(err, ErrInFlight) {
			t.Errorf("past the 15s lease: %v, want ErrInFlight", err)
		}
		time.Sleep(11 * time.Second)
		if c.runs.Load() != 1 || s.count("extend") < 9 {
			t.Errorf("ran %d times, %d extends", c.runs.Load(), s.count("extend"))
		}
	})
}

type receipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func TestDoJSON(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	fn := func(context.Context) (receipt, error) {
		runs++
		return receipt{ID: "r1", Amount: 42}, nil
	}
	for i, want := range []bool{false, true} {
		r, replayed, err := DoJSON(t.Context(), e, op("k", "a"), fn)
		if err != nil || r != (receipt{"r1", 42}) || replayed != want {
			t.Errorf("call %d: %+v %v %v", i, r, replayed, err)
		}
	}
	if runs != 1 {
		t.Errorf("ran %d times", runs)
	}
	_, _, err := DoJSON(t.Context(), e, op("k2", "a"), func(context.Context) (func(), error) { return func() {}, nil })
	if err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Errorf("an unencodable result: %v", err)
	}
}

func TestReport(t *testing.T) {
	e, ev := newEngine(t, newTestStore())
	for _, o := range []Outcome{OutcomeSkipped, OutcomeMissingKey, OutcomeInvalidKey} {
		if err := e.Report(t.Context(), Op{Kind: "grpc", Name: "/s/M", Key: "k"}, o); err != nil {
			t.Errorf("Report(%s): %v", o, err)
		}
	}
	if err := e.Report(t.Context(), Op{}, OutcomeExecuted); err == nil {
		t.Error("Report(executed) accepted")
	}
	got := ev.outcomes()
	if len(got) != 3 || got[0] != OutcomeSkipped || ev.evs[0].Method != "grpc" || ev.evs[0].Route != "/s/M" || ev.evs[0].KeyHash() == "" {
		t.Errorf("events %+v", ev.evs)
	}
}

// TestDoReplayIsTheCallersOwn: a caller that changes the value Do replayed
// changes no other replay, from the replay cache or the store.
func TestDoReplayIsTheCallersOwn(t *testing.T) {
	for name, opts := range map[string][]Option{"store": nil, "replay cache": {WithReplayCache(1<<20, time.Hour)}} {
		t.Run(name, func(t *testing.T) {
			e, _ := newEngine(t, newTestStore(), opts...)
			op := Op{Kind: "k", Name: "n", Key: "key", Fingerprint: "fp"}
			fn := func(context.Context) ([]byte, error) { return []byte("hello"), nil }
			e.Do(t.Context(), op, fn)
			v, replayed, err := e.Do(t.Context(), op, fn)
			if !replayed || err != nil {
				t.Fatal(replayed, err)
			}
			v[0] = 'J'
			if v2, _, _ := e.Do(t.Context(), op, fn); string(v2) != "hello" {
				t.Errorf("a replay after the first caller changed its value: %q", v2)
			}
		})
	}
}

// TestDoJSONUnencodableValueIsFinal: fn ran (its side effects happened)
// but its value does not encode as JSON: the failure is stored as final,
// so a retry gets it rather than running fn again.
func TestDoJSONUnencodableValueIsFinal(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	op := Op{Kind: "t", Name: "n", Key: "k", Fingerprint: "f"}
	for i := range 2 {
		_, replayed, err := DoJSON(t.Context(), e, op, func(context.Context) (float64, error) {
			runs++
			return math.Inf(1), nil
		})
		var fe *FinalError
		if !errors.As(err, &fe) || replayed != (i == 1) {
			t.Errorf("call %d: replayed %v, %v; want a final error, replayed on the retry", i, replayed, err)
		}
	}
	if runs != 1 {
		t.Errorf("fn ran %d times, want 1", runs)
	}
}
