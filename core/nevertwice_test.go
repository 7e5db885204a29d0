package idem

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

// This file holds the engine's regression tests for "never twice, in every
// configuration": each fails on the engine before its fix.

// TestEvictAfterExpiryKeepsTheRetrysClaim: a response streams under a
// completed record, the record expires while the handler still runs, a
// retry claims the key, and then the first handler panics. Evicting the
// truncated record must not delete the retry's claim, or a third request
// runs beside the retry.
func TestEvictAfterExpiryKeepsTheRetrysClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s)
		release := make(chan struct{})
		h := e.Middleware(WithMaxResponseBody(4), TTL(time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Header.Get("X-Run") {
			case "first":
				w.Write([]byte("more than four bytes: the response streams"))
				time.Sleep(2 * time.Second) // the one-second record expires meanwhile
				panic(http.ErrAbortHandler)
			case "retry":
				<-release // holds its claim while the first panics
				w.WriteHeader(201)
			default:
				w.WriteHeader(202)
			}
		}))
		send := func(run string) int {
			r := httptest.NewRequest("POST", "/", nil)
			r.Header.Set("Idempotency-Key", "k")
			r.Header.Set("X-Run", run)
			w := httptest.NewRecorder()
			func() {
				defer func() { recover() }()
				h.ServeHTTP(w, r)
			}()
			return w.Code
		}
		var wg sync.WaitGroup
		wg.Go(func() { send("first") })
		time.Sleep(1500 * time.Millisecond)
		wg.Go(func() { send("retry") })
		time.Sleep(time.Second) // the first has panicked and evicted
		synctest.Wait()
		if code := send("third"); code != http.StatusConflict {
			t.Errorf("a third request while the retry holds the key answered %d, want 409: the first request's eviction deleted the retry's claim", code)
		}
		close(release)
		wg.Wait()
	})
}

// TestLateCompletionLandsAfterTheLease: the store stalls through the
// completion for longer than the lease, and nobody takes the key over
// meanwhile: the claim is still the request's, so the background
// completion lands once the store is back (completed_late, not
// completion_lost) and the retry replays instead of running again.
func TestLateCompletionLandsAfterTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, ev := newEngine(t, s)
		h := &counting{}
		mw := e.Middleware()(h)
		s.set(true, "complete", "extend")
		post(mw, "/", "k", "")
		time.Sleep(16 * time.Second) // past the 15 s lease
		s.set(false, "complete", "extend")
		time.Sleep(2 * time.Second)
		if hasOutcome(ev, OutcomeCompletionLost) || !hasOutcome(ev, OutcomeCompletedLate) {
			t.Errorf("outcomes %v, want completed_late and no completion_lost", ev.outcomes())
		}
		if w := post(mw, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry once the store is back: %d %q, want the replay", w.Code, w.Body)
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

// TestPendingBytesIsABound: completions waiting for a store that blipped
// stay within WithMaxPendingBytes; one completion larger than the whole
// bound evicts none of the others, and is kept without its body, so its
// key still settles (a retry gets status and headers, not a second run).
func TestPendingBytesIsABound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, ev := newEngine(t, s, WithMaxPendingBytes(4096))
		big := strings.Repeat("b", 8192)
		runs := map[string]int{}
		var mu sync.Mutex
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			runs[r.Header.Get("Idempotency-Key")]++
			mu.Unlock()
			w.WriteHeader(201)
			if r.Header.Get("Idempotency-Key") == "big" {
				io.WriteString(w, big)
				return
			}
			io.WriteString(w, "small")
		}))
		s.set(true, "complete")
		for _, k := range []string{"a", "b", "c", "big"} {
			if w := post(h, "/", k, ""); w.Code != 201 {
				t.Fatalf("first request %q: %d", k, w.Code)
			}
		}
		if hasOutcome(ev, OutcomeCompletionDropped) {
			t.Errorf("outcomes %v: a completion was dropped to make room for one larger than the whole bound", ev.outcomes())
		}
		if n := e.bg.pending(); n != 4 {
			t.Errorf("%d completions pending, want 4", n)
		}
		if b := e.bg.bytes; b > 4096 {
			t.Errorf("pending work holds %d bytes, over the bound of 4096", b)
		}
		s.set(false, "complete")
		time.Sleep(2 * time.Second)
		for _, k := range []string{"a", "b", "c", "big"} {
			w := post(h, "/", k, "")
			if w.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry %q: %d, want a replay", k, w.Code)
			}
			if k == "big" && w.Header().Get(HeaderBodyOmitted) != "true" {
				t.Errorf("retry of the completion too large to keep pending: want %s: true, got %v", HeaderBodyOmitted, w.Header())
			}
		}
		for k, n := range runs {
			if n != 1 {
				t.Errorf("key %q ran %d times", k, n)
			}
		}
	})
}

// hangingStore's Claim waits until its context ends, as a store does when
// the client hangs up in the middle of the call.
type hangingStore struct{ *testStore }

func (s hangingStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	<-ctx.Done()
	return store.ClaimResult{}, fmt.Errorf("hangingStore: %w", ctx.Err())
}

// TestHangUpDuringClaimIsNotAStoreFailure: a client that hangs up while
// its claim is in flight is not a store failure: no error-level event,
// and with WithFailOpen the handler does not run unprotected.
func TestHangUpDuringClaimIsNotAStoreFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		e, err := New(hangingStore{newTestStore()}, WithFailOpen(), WithLogger(logger))
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }))
		ctx, cancel := context.WithCancel(t.Context())
		r := httptest.NewRequestWithContext(ctx, "POST", "/", nil)
		r.Header.Set("Idempotency-Key", "k")
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		h.ServeHTTP(httptest.NewRecorder(), r)
		if ran {
			t.Error("the handler ran unprotected after the client hung up during the claim (fail open)")
		}
		if strings.Contains(buf.String(), "level=ERROR") || strings.Contains(buf.String(), "store_failure") {
			t.Errorf("a hang-up was logged as a store failure:\n%s", buf.String())
		}
	})
}

// TestScopingDefaults: the same key and body sent to two hosts of a
// multi-host service is never one host's response replayed to the other;
// with WithRequiredNamespace, a request without a namespace (idem mounted
// before authentication, an anonymous client) is refused, never scoped
// globally, and so is a Do call.
func TestScopingDefaults(t *testing.T) {
	t.Run("two hosts, scoped by host", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore())
		h := e.Middleware(WithNamespace(func(r *http.Request) string { return r.Host }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			io.WriteString(w, "private to "+r.Host)
		}))
		send := func(host string) *httptest.ResponseRecorder {
			r := httptest.NewRequest("POST", "http://"+host+"/orders", strings.NewReader(`{"item":"book"}`))
			r.Header.Set("Idempotency-Key", "order-1")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		send("tenant-a.example.com")
		if w := send("tenant-b.example.com"); w.Code != 201 || strings.Contains(w.Body.String(), "tenant-a") {
			t.Errorf("tenant-b got %d %q: want its own response", w.Code, w.Body)
		}
	})
	t.Run("a retry through another address of the same service", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore())
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
		for i, host := range []string{"10.0.0.1:8080", "10.0.0.2:8080"} {
			r := httptest.NewRequest("POST", "http://"+host+"/orders", strings.NewReader(`{"item":"book"}`))
			r.Header.Set("Idempotency-Key", "order-2")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if i == 1 && w.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry through another instance's address: %d, want the replay", w.Code)
			}
		}
	})
	t.Run("required namespace", func(t *testing.T) {
		type userKey struct{}
		e, ev := newEngine(t, newTestStore(), WithRequiredNamespace())
		runs := 0
		h := e.Middleware(WithNamespace(func(r *http.Request) string { u, _ := r.Context().Value(userKey{}).(string); return u }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(201) }))
		// idem mounted before the authentication middleware: no user yet.
		if w := post(h, "/orders", "k", ""); w.Code != http.StatusForbidden || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("no namespace: %d %v, want a 403 problem", w.Code, w.Header())
		}
		if runs != 0 || !hasOutcome(ev, OutcomeNoNamespace) {
			t.Errorf("runs %d, outcomes %v: want no run and no_namespace", runs, ev.outcomes())
		}
		r := httptest.NewRequest("POST", "/orders", nil)
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 201 || runs != 1 {
			t.Errorf("with a namespace: %d, runs %d", w.Code, runs)
		}
		_, _, err := e.Do(t.Context(), Op{Kind: "q", Name: "n", Key: "k", Fingerprint: "f"}, func(context.Context) ([]byte, error) { return nil, nil })
		if !errors.Is(err, ErrNamespaceRequired) {
			t.Errorf("Do without a namespace: %v, want ErrNamespaceRequired", err)
		}
	})
}

// omittingStore keeps every response without its body, as a store does
// past its size limit (the memory store's byte budget, say).
type omittingStore struct{ *testStore }

func (s omittingStore) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	c.Result.Body, c.Result.BodyOmitted = nil, true
	return s.testStore.Complete(ctx, h, c)
}

// TestDoReplaysAnOmittedResultAsAnError: a Do result the store kept
// without its value never comes back as an empty success.
func TestDoReplaysAnOmittedResultAsAnError(t *testing.T) {
	e, _ := newEngine(t, omittingStore{newTestStore()})
	op := Op{Kind: "q", Name: "charge", Key: "k", Fingerprint: "f"}
	runs := 0
	fn := func(context.Context) ([]byte, error) { runs++; return []byte(`{"receipt":"r-1"}`), nil }
	if v, replayed, err := e.Do(t.Context(), op, fn); err != nil || replayed || string(v) != `{"receipt":"r-1"}` {
		t.Fatalf("first call: %q %v %v", v, replayed, err)
	}
	v, replayed, err := e.Do(t.Context(), op, fn)
	if !errors.Is(err, ErrResultOmitted) || !replayed || v != nil {
		t.Errorf("retry of a result kept without its value: %q, replayed %v, err %v; want ErrResultOmitted", v, replayed, err)
	}
	if runs != 1 {
		t.Errorf("fn ran %d times", runs)
	}
}

// clockStore gives testStore the Clock capability: the one clock that
// every engine sharing it reads.
type clockStore struct{ *testStore }

func (clockStore) Now(context.Context) (time.Time, error) { return time.Now(), nil }

// TestSkewedInstanceDoesNotTakeOverALiveClaim: two instances share a
// store; one's clock runs 20 s ahead, more than the 15 s lease. Judged on
// its own clock, the live claim of the other looks abandoned and its
// retry takes it over, running the handler twice. Aligned with the
// store's clock, it answers 409.
func TestSkewedInstanceDoesNotTakeOverALiveClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := clockStore{newTestStore()}
		a, _ := newEngine(t, s)
		b, _ := newEngine(t, s, WithClock(func() time.Time { return time.Now().Add(20 * time.Second) }))
		release := make(chan struct{})
		runs := 0
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if r.Header.Get("X-First") != "" {
				<-release
			}
			w.WriteHeader(201)
		})
		var wg sync.WaitGroup
		wg.Go(func() {
			r := httptest.NewRequest("POST", "/", nil)
			r.Header.Set("Idempotency-Key", "k")
			r.Header.Set("X-First", "1")
			a.Middleware()(handler).ServeHTTP(httptest.NewRecorder(), r)
		})
		time.Sleep(time.Second)
		if w := post(b.Middleware()(handler), "/", "k", ""); w.Code != http.StatusConflict {
			t.Errorf("the skewed instance answered %d while the other runs the key, want 409", w.Code)
		}
		close(release)
		wg.Wait()
		if runs != 1 {
			t.Errorf("the handler ran %d times, want 1", runs)
		}
		if off, bound, ok := b.ClockOffset(); !ok || off > -19*time.Second || off < -21*time.Second || bound < 0 {
			t.Errorf("ClockOffset = %v ± %v (%v), want about -20s", off, bound, ok)
		}
	})
}

// gzipInside is a compression middleware mounted inside idem: it
// compresses for a request that accepts gzip.
func gzipInside(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(rec.Body.Bytes())
		zw.Close()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Vary", "Accept-Encoding")
		w.Header().Set("ETag", `"gz-1"`)
		w.WriteHeader(rec.Code)
		w.Write(b.Bytes())
	})
}

// TestReplayIsInAnAcceptedEncoding: a response compressed by middleware
// inside idem is replayed to a retry that does not accept gzip as the
// identity body, never as gzip bytes; a retry that accepts gzip gets it as
// stored; a coding the engine cannot decode is a 406 problem.
func TestReplayIsInAnAcceptedEncoding(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	const body = `{"id":"ord_1","item":"book"}`
	h := e.Middleware()(gzipInside(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		io.WriteString(w, body)
	})))
	send := func(key, ae string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders", nil)
		r.Header.Set("Idempotency-Key", key)
		if ae != "" {
			r.Header.Set("Accept-Encoding", ae)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	send("k", "gzip, deflate")
	for _, ae := range []string{"", "identity", "gzip;q=0, br"} {
		w := send("k", ae)
		if w.Body.String() != body || w.Header().Get("Content-Encoding") != "" || w.Header().Get("ETag") != "" {
			t.Errorf("Accept-Encoding %q: replay %d %v %q, want the identity body without Content-Encoding or the gzip ETag", ae, w.Code, w.Header(), w.Body.Bytes())
		}
		if w.Header().Get("Content-Length") != strconv.Itoa(len(body)) || w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("Accept-Encoding %q: Content-Length %q, replayed %q", ae, w.Header().Get("Content-Length"), w.Header().Get("Idempotent-Replayed"))
		}
	}
	w := send("k", "br;q=1.0, gzip;q=0.5")
	if w.Header().Get("Content-Encoding") != "gzip" {
		t.Errorf("a retry that accepts gzip: %v, want the stored gzip body", w.Header())
	}
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(zr); string(got) != body {
		t.Errorf("gzip replay decodes to %q", got)
	}

	// A coding the engine cannot decode.
	e2, _ := newEngine(t, newTestStore())
	h2 := e2.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		w.WriteHeader(201)
		w.Write([]byte{0x1b, 0x02})
	}))
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Idempotency-Key", "k")
	r.Header.Set("Accept-Encoding", "br")
	h2.ServeHTTP(httptest.NewRecorder(), r)
	r.Header.Del("Accept-Encoding")
	w = httptest.NewRecorder()
	h2.ServeHTTP(w, r)
	if w.Code != http.StatusNotAcceptable || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("replay of br to a request that does not accept it: %d %v, want a 406 problem", w.Code, w.Header())
	}
}

// TestPendingCompletionBlocksARerunHere: a process that ran a key and is
// still retrying its completion in the background (the store was away
// past the lease) answers a retry that reaches it with 409, rather than
// take the lapsed claim over and run the key a second time.
func TestPendingCompletionBlocksARerunHere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, _ := newEngine(t, s)
		h := &counting{}
		mw := e.Middleware()(h)
		s.set(true, "complete", "extend")
		post(mw, "/", "k", "")
		time.Sleep(16 * time.Second) // past the lease; the completion is pending
		if w := post(mw, "/", "k", ""); w.Code != http.StatusConflict {
			t.Errorf("retry while this process holds the key's pending completion: %d, want 409", w.Code)
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("the handler ran %d times, want 1", n)
		}
		s.set(false, "complete", "extend")
		time.Sleep(2 * time.Second)
	})
}

// slowClaimStore answers a Claim only after a delay, as a store that
// stalled or a process that was stopped while its claim was on the wire;
// taken runs meanwhile, as another instance's request would.
type slowClaimStore struct {
	*testStore
	delay time.Duration
	taken func()
}

func (s slowClaimStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	res, err := s.testStore.Claim(ctx, c)
	if res.Acquired && s.taken != nil {
		time.Sleep(s.delay)
		s.taken()
	}
	return res, err
}

// TestLateClaimAnswerIsConfirmed: the answer to a claim arrives after the
// claim's lease ran out, and another instance took the key over
// meanwhile: the work must not run on the late claim.
func TestLateClaimAnswerIsConfirmed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := newTestStore()
		other, _ := newEngine(t, ts)
		release := make(chan struct{})
		runs := 0
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if r.Header.Get("X-Other") != "" {
				<-release
			}
			w.WriteHeader(201)
		})
		var wg sync.WaitGroup
		s := slowClaimStore{testStore: ts, delay: 16 * time.Second, taken: func() {
			wg.Go(func() {
				r := httptest.NewRequest("POST", "/", nil)
				r.Header.Set("Idempotency-Key", "k")
				r.Header.Set("X-Other", "1")
				other.Middleware()(handler).ServeHTTP(httptest.NewRecorder(), r)
			})
			synctest.Wait()
		}}
		late, _ := newEngine(t, s, WithStoreTimeout(time.Minute))
		w := post(late.Middleware()(handler), "/", "k", "")
		close(release)
		wg.Wait()
		if runs != 1 || w.Code == 201 {
			t.Errorf("the late claim answered %d and the handler ran %d times, want 1 (the other instance's) and a 409", w.Code, runs)
		}
	})
}

// lostTxStore's BeginTx finds the claim taken over between the claim and
// the transaction, as pgxstore's does when its token check fails.
type lostTxStore struct{ *testStore }

func (lostTxStore) BeginTx(context.Context, store.Hold) (store.Tx, error) {
	return nil, fmt.Errorf("lostTxStore: begin: %w", ErrLeaseLost)
}

// TestBeginTxLostIsInFlight: a transaction that cannot start because
// another request took the key is a key in flight (409), never a store
// failure: with WithFailOpen the handler must not run unprotected beside
// the request that holds the key.
func TestBeginTxLostIsInFlight(t *testing.T) {
	e, ev := newEngine(t, lostTxStore{newTestStore()}, WithFailOpen())
	ran := false
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }))
	if w := post(h, "/", "k", ""); w.Code != http.StatusConflict || ran {
		t.Errorf("BeginTx found the claim lost: %d, handler ran %v; want 409 and no run", w.Code, ran)
	}
	if !hasOutcome(ev, OutcomeConflict) {
		t.Errorf("outcomes %v, want conflict", ev.outcomes())
	}
	_, _, err := e.Do(t.Context(), Op{Kind: "q", Name: "n", Key: "k2", Fingerprint: "f"}, func(context.Context) ([]byte, error) {
		t.Error("Do ran fn unprotected")
		return nil, nil
	})
	if !errors.Is(err, ErrInFlight) {
		t.Errorf("Do: %v, want ErrInFlight", err)
	}
}

// slowClockStore is a clockStore whose clock takes 5 ms to answer, like a
// database on a loaded machine.
type slowClockStore struct{ *testStore }

func (slowClockStore) Now(context.Context) (time.Time, error) {
	time.Sleep(5 * time.Millisecond)
	return time.Now(), nil
}

// TestStandingClockWithASlowStoreClock: an engine clock that stands still
// (a test's manual clock) did not move while the store's clock was read,
// however long the read took: the sample counts, and the request runs
// instead of failing with "the engine's clock moved during every sample".
func TestStandingClockWithASlowStoreClock(t *testing.T) {
	still := time.Now()
	e, _ := newEngine(t, slowClockStore{newTestStore()}, WithClock(func() time.Time { return still }))
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	if w := post(h, "/", "k", ""); w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if w := post(h, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d, want the replay", w.Code)
	}
}

// TestClockReadPaused: a goroutine paused between reading the engine's
// clock and the wall clock (the scheduler on a loaded machine; here a
// clock that returns 5 ms after it read the time, every other call) has
// not seen its clock moved: the sample counts and the request runs. It
// used to fail with 503, "the engine's clock moved during every sample".
func TestClockReadPaused(t *testing.T) {
	var calls atomic.Int64
	paused := func() time.Time {
		now := time.Now()
		if calls.Add(1)%2 == 1 {
			time.Sleep(5 * time.Millisecond)
		}
		return now
	}
	e, _ := newEngine(t, clockStore{newTestStore()}, WithClock(paused))
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	if w := post(h, "/", "k", ""); w.Code != http.StatusCreated {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if off, _, ok := e.ClockOffset(); !ok || absDur(off) > 50*time.Millisecond {
		t.Errorf("ClockOffset = %v (%v), want about 0", off, ok)
	}
}

// TestWaiterNeverRunsBesidePendingCompletion: a duplicate waiting on
// this process's flight, when that flight ends with its completion still
// pending (the store failing), must neither run unprotected (fail open,
// the store down) nor take the claim over once its lease has run out
// (the store answering claims, not completions or extensions).
func TestWaiterNeverRunsBesidePendingCompletion(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		down []string
	}{
		{"fail open, store down", []Option{WithWait(10 * time.Second), WithFailOpen()}, []string{"complete", "claim", "extend"}},
		{"store taking claims", []Option{WithWait(60 * time.Second)}, []string{"complete", "extend"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newBlipStore()
				e, _ := newEngine(t, s, tc.opts...)
				gate := make(chan struct{})
				var runs atomic.Int32
				mw := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if runs.Add(1) == 1 {
						<-gate
					}
					w.WriteHeader(201)
				}))
				first := make(chan int)
				go func() { first <- post(mw, "/", "k", "").Code }()
				synctest.Wait()
				waiter := make(chan int)
				go func() { waiter <- post(mw, "/", "k", "").Code }()
				synctest.Wait() // the duplicate waits on the local flight
				s.set(true, tc.down...)
				close(gate)
				if code := <-first; code != 201 {
					t.Errorf("first: %d, want 201", code)
				}
				if code := <-waiter; code != http.StatusConflict {
					t.Errorf("waiter: %d, want 409 while the first's completion is pending", code)
				}
				if n := runs.Load(); n != 1 {
					t.Errorf("the handler ran %d times, want 1", n)
				}
				s.set(false, tc.down...)
				time.Sleep(20 * time.Second)
			})
		})
	}
}

// TestWaitLimitCountsOnce: WithWait's limit is the whole wait, on the
// local flight and then on the store together.
func TestWaitLimitCountsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, _ := newEngine(t, newTestStore(), WithWait(10*time.Second))
		var runs atomic.Int32
		mw := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch runs.Add(1) {
			case 1:
				time.Sleep(9 * time.Second)
				w.WriteHeader(503) // released: the waiters race for the key
			default:
				time.Sleep(30 * time.Second)
				w.WriteHeader(201)
			}
		}))
		go post(mw, "/", "k", "")
		synctest.Wait()
		start := time.Now()
		var wg sync.WaitGroup
		var waited [2]time.Duration
		var codes [2]int
		for i := range 2 {
			wg.Go(func() {
				t0 := time.Now()
				codes[i] = post(mw, "/", "k", "").Code
				waited[i] = time.Since(t0)
			})
		}
		wg.Wait()
		_ = start
		for i := range 2 {
			if codes[i] == http.StatusConflict && waited[i] > 10*time.Second+time.Millisecond {
				t.Errorf("a waiter answered 409 after %v; WithWait's limit is 10s", waited[i])
			}
		}
		time.Sleep(60 * time.Second)
	})
}

// TestEvictedStreamIsNotReplayed: a streamed response whose handler then
// panics is evicted from the store; neither a duplicate waiting on it in
// this process nor the replay cache may replay it.
func TestEvictedStreamIsNotReplayed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithWait(10*time.Second), WithReplayCache(1<<20, time.Hour))
		gate := make(chan struct{})
		var runs atomic.Int32
		mw := e.Middleware(WithMaxResponseBody(4))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				<-gate                                  // the duplicate joins this flight meanwhile
				w.Write([]byte("more than four bytes")) // streams: the record is completed, body omitted
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(201)
		}))
		go func() {
			defer func() { recover() }()
			post(mw, "/", "k", "")
		}()
		synctest.Wait()
		waiter := make(chan *httptest.ResponseRecorder)
		go func() { waiter <- post(mw, "/", "k", "") }()
		synctest.Wait()
		close(gate)
		w := <-waiter
		if w.Header().Get("Idempotent-Replayed") == "true" {
			t.Errorf("the waiter replayed the evicted stream: %d", w.Code)
		}
		synctest.Wait()
		if w := post(mw, "/", "k", ""); w.Code != 201 {
			t.Errorf("a retry answered %d (replayed %q), want the rerun's 201, never the evicted stream's 200", w.Code, w.Header().Get("Idempotent-Replayed"))
		}
		if n := runs.Load(); n < 2 {
			t.Errorf("the handler ran %d times after its stream was evicted; a retry must run it again", n)
		}
	})
}

// TestPanickingObserverKeepsThePromise: an observer that panics (the
// user's code) must not keep a pending completion from landing: the
// record lands in the background, and a retry replays it.
func TestPanickingObserverKeepsThePromise(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		var panicked atomic.Bool
		e, _ := newEngine(t, s, WithObserver(func(ctx context.Context, ev Event) {
			if panicked.CompareAndSwap(false, true) {
				panic("observer bug")
			}
		}))
		h := &counting{}
		mw := e.Middleware()(h)
		s.set(true, "complete")
		func() {
			defer func() { recover() }()
			post(mw, "/", "k", "")
		}()
		if !panicked.Load() {
			t.Fatal("the observer was not called")
		}
		s.set(false, "complete")
		time.Sleep(20 * time.Second) // past the lease: only the record keeps the key
		if w := post(mw, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" || h.runs.Load() != 1 {
			t.Errorf("retry after the observer panicked: %d, runs %d; want the replay of the one run", w.Code, h.runs.Load())
		}
	})
}

// pausedAnswers is a store whose claim of key lands at once, but whose
// answer reaches the engine only after delay (the process was paused by
// GC or SIGSTOP, the network stalled).
type pausedAnswers struct {
	*testStore
	delay time.Duration
	key   string
}

func (s pausedAnswers) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	res, err := s.testStore.Claim(ctx, c)
	if c.Key == s.key {
		time.Sleep(s.delay)
	}
	return res, err
}

// TestFirstBeatCountsFromTheClaim: a claim answer that came late, though
// not so late that the engine extends before running, has used part of
// the lease: the first heartbeat must come a beat after the claim, not a
// beat after the answer, or the lease runs out while the work runs.
func TestFirstBeatCountsFromTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := newTestStore()
		a, _ := newEngine(t, pausedAnswers{ts, 9900 * time.Millisecond, "k"}, WithStoreTimeout(time.Minute))
		b, _ := newEngine(t, ts)
		var running, overlap atomic.Int32
		work := func(d time.Duration) func(context.Context) ([]byte, error) {
			return func(ctx context.Context) ([]byte, error) {
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				defer running.Add(-1)
				time.Sleep(d)
				return []byte("ok"), nil
			}
		}
		var wg sync.WaitGroup
		// Another flight arms the heartbeat's timer first, so its ticks
		// have their own phase.
		wg.Go(func() {
			a.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "x", Fingerprint: "f"}, func(context.Context) ([]byte, error) { time.Sleep(40 * time.Second); return nil, nil })
		})
		time.Sleep(600 * time.Millisecond)
		wg.Go(func() { a.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "k", Fingerprint: "f"}, work(30*time.Second)) })
		time.Sleep(16 * time.Second) // past the first claim's lease end, had no beat come
		_, _, err := b.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "k", Fingerprint: "f"}, work(time.Second))
		wg.Wait()
		if overlap.Load() > 0 || err == nil {
			t.Errorf("another instance ran the key beside the first (its call: %v)", err)
		}
	})
}

// TestStreamWithPendingCompletionKeepsItsClaim: a streamed response whose
// Complete failed leaves its completion to the background, which starts
// once the stream ends; until then the heartbeat keeps the claim, so no
// other instance runs the key beside the stream.
func TestStreamWithPendingCompletionKeepsItsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		a, _ := newEngine(t, s)
		b, _ := newEngine(t, s)
		var running, overlap atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if running.Add(1) > 1 {
				overlap.Add(1)
			}
			defer running.Add(-1)
			w.WriteHeader(200)
			w.Write([]byte("start"))
			s.set(true, "complete")
			w.(http.Flusher).Flush() // streams: the completion fails
			s.set(false, "complete")
			for range 30 {
				time.Sleep(time.Second)
				w.Write([]byte("."))
			}
		})
		var wg sync.WaitGroup
		wg.Go(func() { post(a.Middleware()(h), "/", "k", "") })
		time.Sleep(20 * time.Second) // past the lease, had nothing extended it
		if w := post(b.Middleware()(h), "/", "k", ""); w.Code != http.StatusConflict {
			t.Errorf("another instance during the stream: %d, want 409", w.Code)
		}
		wg.Wait()
		if overlap.Load() > 0 {
			t.Error("the handler ran twice at once")
		}
	})
}

// TestPanickedStreamWhoseCompletionLanded: a stream's Complete failed but
// landed, then its handler panicked: the record holds an answer the
// client saw cut short, and is evicted like any other such record, so the
// retry runs again rather than replaying it.
func TestPanickedStreamWhoseCompletionLanded(t *testing.T) {
	s := newBlipStore()
	s.landing = true
	e, _ := newEngine(t, s)
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs > 1 {
			w.WriteHeader(201)
			return
		}
		w.WriteHeader(200)
		s.set(true, "complete")
		w.(http.Flusher).Flush() // streams: the completion fails, but lands
		s.set(false, "complete")
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() { recover() }()
		post(h, "/", "k", "")
	}()
	if w := post(h, "/", "k", ""); w.Code != 201 || runs != 2 {
		t.Errorf("retry after the panicked stream: %d (replayed %q), runs %d; want it run again", w.Code, w.Header().Get("Idempotent-Replayed"), runs)
	}
}

// silentClock is a store whose clock never answers: each Now call waits
// for its context to end.
type silentClock struct {
	*testStore
	calls atomic.Int32
}

func (s *silentClock) Now(ctx context.Context) (time.Time, error) {
	s.calls.Add(1)
	<-ctx.Done()
	return time.Time{}, ctx.Err()
}

// TestFirstClockMeasurementIsShared: requests that need the time while
// the engine first measures the store's clock wait for that measurement
// and share its outcome, rather than each trying again in turn.
func TestFirstClockMeasurementIsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &silentClock{testStore: newTestStore()}
		e, _ := newEngine(t, s, WithStoreTimeout(time.Second))
		var wg sync.WaitGroup
		var failed atomic.Int32
		for i := range 10 {
			wg.Go(func() {
				op := Op{Kind: "t", Name: "n", Key: "k" + strconv.Itoa(i), Fingerprint: "f"}
				if _, _, err := e.Do(t.Context(), op, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
					failed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := s.calls.Load(); n != 1 || failed.Load() != 10 {
			t.Errorf("10 requests made %d clock calls and %d failed; want 1 shared measurement, all failing", n, failed.Load())
		}
	})
}

// failingOver is a blipStore that says its failovers take up to d.
type failingOver struct {
	*blipStore
	d time.Duration
}

func (s failingOver) FailoverTime() time.Duration { return s.d }

// TestClaimOutlastsAFailoverAtAnyPhase: a failover as long as the store
// says, starting at the worst moment (just before a flight's beat is
// due, with the heartbeat's timer in another phase), must not end the
// flight's lease: once the store is back, the heartbeat extends before
// the lease ends, and no other instance takes the key over.
func TestClaimOutlastsAFailoverAtAnyPhase(t *testing.T) {
	for _, start := range []time.Duration{4900 * time.Millisecond, 6200 * time.Millisecond, 8700 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			bs := newBlipStore()
			s := failingOver{bs, 10 * time.Second}
			a, _ := newEngine(t, s)
			b, _ := newEngine(t, s)
			var running, overlap atomic.Int32
			work := func(ctx context.Context) ([]byte, error) {
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				defer running.Add(-1)
				time.Sleep(30 * time.Second)
				return []byte("ok"), nil
			}
			var wg sync.WaitGroup
			// Another flight arms the heartbeat's timer, in its own phase.
			wg.Go(func() {
				a.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "x", Fingerprint: "f"}, func(context.Context) ([]byte, error) { time.Sleep(40 * time.Second); return nil, nil })
			})
			time.Sleep(1250 * time.Millisecond)
			wg.Go(func() { a.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "k", Fingerprint: "f"}, work) })
			time.Sleep(start - 1250*time.Millisecond)
			bs.set(true, "claim", "complete", "release", "extend")
			time.Sleep(10 * time.Second) // the failover, as long as the store says
			bs.set(false, "claim", "complete", "release", "extend")
			time.Sleep(100 * time.Millisecond)
			_, _, err := b.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "k", Fingerprint: "f"}, work)
			wg.Wait()
			if overlap.Load() > 0 || err == nil {
				t.Errorf("failover from %v (lease %v): another instance ran the key beside the first (its call: %v)", start, a.Lease(), err)
			}
		})
	}
}

// restlessWatch is a store whose watches fire at once, as a Notifier that
// wakes on every message on a busy channel would.
type restlessWatch struct{ *testStore }

func (s restlessWatch) Watch(ctx context.Context, ref store.Ref) (<-chan struct{}, func(), error) {
	ch := make(chan struct{})
	close(ch)
	return ch, func() {}, nil
}

// TestSpuriousWakesBackOff: a waiter whose watch fires while the key is
// still in flight looks at the store again, but at most once per wakeGap,
// instead of claiming as fast as the store answers.
func TestSpuriousWakesBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := restlessWatch{newTestStore()}
		a, _ := newEngine(t, s)
		b, _ := newEngine(t, s, WithWait(2*time.Second))
		release := make(chan struct{})
		go a.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "k", Fingerprint: "f"}, func(context.Context) ([]byte, error) {
			<-release
			return []byte("ok"), nil
		})
		synctest.Wait()
		before := s.count("claim")
		_, _, err := b.Do(t.Context(), Op{Kind: "t", Name: "n", Key: "k", Fingerprint: "f"}, func(context.Context) ([]byte, error) { return nil, nil })
		if n := s.count("claim") - before; !errors.Is(err, ErrInFlight) || n > int(2*time.Second/wakeGap)+20 {
			t.Errorf("a 2 s wait with a restless watch: %v after %d claims; want ErrInFlight after at most one look per %v", err, n, wakeGap)
		}
		close(release)
		synctest.Wait()
	})
}

// TestPanickedStreamEvictedThroughABlip: a stream's Complete failed but
// landed, its handler then panicked while the store still failed: the
// record is evicted in the background once the store is back, and a
// retry runs again rather than replaying the cut-short answer.
func TestPanickedStreamEvictedThroughABlip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		s.landing = true
		e, _ := newEngine(t, s)
		runs := 0
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs > 1 {
				w.WriteHeader(201)
				return
			}
			w.WriteHeader(200)
			s.set(true, "complete", "release", "evict")
			w.(http.Flusher).Flush() // streams: the completion fails, but lands
			panic(http.ErrAbortHandler)
		}))
		func() {
			defer func() { recover() }()
			post(h, "/", "k", "")
		}()
		s.set(false, "complete", "release", "evict")
		time.Sleep(30 * time.Second)
		if w := post(h, "/", "k", ""); w.Code != 201 || runs != 2 {
			t.Errorf("retry after the panicked stream: %d (replayed %q), runs %d; want it run again", w.Code, w.Header().Get("Idempotent-Replayed"), runs)
		}
	})
}

// TestWakeAfterAWakeIsPrompt: waiters woken by a release, one of which
// claims and runs, see its completion as soon as their watch fires, not a
// poll's backoff later.
func TestWakeAfterAWakeIsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := notifyingStore{newTestStore()}
		var done time.Time
		runs := 0
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				time.Sleep(5 * time.Second)
				w.WriteHeader(503) // released: the waiters wake
				return
			}
			time.Sleep(50 * time.Millisecond)
			w.WriteHeader(201)
			done = time.Now()
		})
		var mws []http.Handler
		for range 3 {
			e, _ := newEngine(t, s, WithWait(30*time.Second))
			mws = append(mws, e.Middleware()(h))
		}
		go post(mws[0], "/", "k", "")
		synctest.Wait()
		var wg sync.WaitGroup
		var answered [2]time.Time
		for i := range 2 {
			wg.Go(func() {
				post(mws[i+1], "/", "k", "")
				answered[i] = time.Now()
			})
		}
		wg.Wait()
		for i, at := range answered {
			if late := at.Sub(done); late > wakeGap {
				t.Errorf("waiter %d answered %v after the run it waited for ended; want at most %v", i, late, wakeGap)
			}
		}
	})
}

// TestFailoverLeaseKeepsBeatsSparse: on a store that fails over, the
// default lease leaves the heartbeat an interval of at least a tenth of
// it, whatever the store timeout, and still outlasts the failover at any
// phase (two intervals, the failover and the store timeout fit).
func TestFailoverLeaseKeepsBeatsSparse(t *testing.T) {
	for _, tc := range []struct{ failover, timeout time.Duration }{
		{10 * time.Second, 2 * time.Second},
		{35 * time.Second, 2 * time.Second},
		{35 * time.Second, 20 * time.Second},
		{32 * time.Second, 2 * time.Second},
	} {
		e, _ := newEngine(t, failingOver{newBlipStore(), tc.failover}, WithStoreTimeout(tc.timeout))
		lease := e.Lease()
		every := e.beatEvery(lease)
		if every < lease/10 || 2*every+tc.failover+tc.timeout > lease {
			t.Errorf("failover %v, store timeout %v: lease %v, a beat every %v", tc.failover, tc.timeout, lease, every)
		}
	}
}
