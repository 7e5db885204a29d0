package mysqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
)

// The tests of idem issue 16, "never twice, in every configuration", on
// MySQL: each failed on the store before its fix.

// serverPacket returns the server's max_allowed_packet.
func serverPacket(t *testing.T, db *sql.DB) int {
	t.Helper()
	var p int
	if err := db.QueryRowContext(t.Context(), "SELECT @@max_allowed_packet").Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// bodyFor is the body a request for key answers with: n bytes that hold
// every byte value, in an order that depends on key. (Built by copying, so
// that 16 MiB take no time under the race detector.)
func bodyFor(key string, n int) []byte {
	var k byte
	for i := range len(key) {
		k = k*31 + key[i]
	}
	b := make([]byte, n)
	for i := range min(n, 256) {
		b[i] = byte(i) ^ k
	}
	for i := 256; i < n; i *= 2 {
		copy(b[i:], b[:i])
	}
	return b
}

// app is an engine in front of a handler that, in exactly-once mode,
// inserts one order per request through Tx (its ref is the idempotency
// key), holds its transaction for X-Hold, and answers 201 with a body of
// X-Size bytes (bodyFor).
type app struct {
	f          txFixture
	srv        *httptest.Server
	mu         sync.Mutex
	runs       map[string]int
	commitErrs atomic.Int32
	lastErr    atomic.Value
}

// orderIDs numbers the orders of every app, which may share a table.
var orderIDs atomic.Int64

func newApp(t *testing.T, f txFixture, store idem.Store, opts ...idem.Option) *app {
	t.Helper()
	a := &app{f: f, runs: map[string]int{}}
	opts = append([]idem.Option{
		idem.WithLogger(quietLog),
		idem.WithStoreObserver(func(_ context.Context, op idem.StoreOp, _ time.Duration, err error) {
			if op == idem.StoreCommit && err != nil {
				a.commitErrs.Add(1)
				a.lastErr.Store(err.Error())
			}
		}),
	}, opts...)
	e, err := idem.New(store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	a.srv = httptest.NewServer(e.Middleware()(http.HandlerFunc(a.serve)))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *app) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.runs[key]++
	a.mu.Unlock()
	size, _ := strconv.Atoi(r.Header.Get("X-Size"))
	hold, _ := time.ParseDuration(r.Header.Get("X-Hold"))
	if Tx(r.Context()) != nil {
		if err := a.f.insert(r.Context(), int(orderIDs.Add(1)), key); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	time.Sleep(hold)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusCreated)
	w.Write(bodyFor(key, size))
}

type reply struct {
	code   int
	body   []byte
	header http.Header
	err    error
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }
func (r reply) omitted() bool  { return r.header.Get(idem.HeaderBodyOmitted) == "true" }

func (r reply) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	s := fmt.Sprintf("%d, %d bytes", r.code, len(r.body))
	if r.replayed() {
		s += ", replayed"
	}
	if r.omitted() {
		s += ", body omitted"
	}
	if r.code >= 300 && len(r.body) < 512 {
		s += ": " + strings.TrimSpace(string(r.body))
	}
	return s
}

func (a *app) post(key string, size int, hold time.Duration) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", a.srv.URL+"/orders", nil)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Size", strconv.Itoa(size))
	req.Header.Set("X-Hold", hold.String())
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, body: b, header: resp.Header, err: err}
}

// ranOnce fails the test unless the handler ran exactly once for key and,
// in exactly-once mode, its order committed exactly once.
func (a *app) ranOnce(t *testing.T, key string, orders bool) {
	t.Helper()
	a.mu.Lock()
	runs := a.runs[key]
	a.mu.Unlock()
	if runs != 1 {
		t.Errorf("key %s: the handler ran %d times, want once", key, runs)
	}
	if !orders {
		return
	}
	var n int
	if err := a.f.s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(a.f.orders)+" WHERE ref = ?", key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("key %s: %d orders committed, want exactly one", key, n)
	}
}

// TestLargeResponse: a response whose body and headers fit the server's
// max_allowed_packet is stored in full, up to the byte; a larger one is
// stored without its body (as the engine stores a response over its
// cap), never refused, in both modes.
func TestLargeResponse(t *testing.T) {
	db := newDB(t, 2)
	packet := serverPacket(t, db)
	hdr := http.Header{"Content-Type": {"application/octet-stream"}, "Etag": {`"v1"`}}
	s := newStore(t, db, WithSweepInterval(0))
	if got, want := s.MaxResponseSize(), packet-4096; got != want {
		t.Fatalf("MaxResponseSize() = %d, want max_allowed_packet (%d) - 4 KiB", got, packet)
	}
	limit := s.MaxResponseSize() - len(idem.AppendHeader(nil, hdr))
	t.Logf("max_allowed_packet %d: bodies up to %d bytes are stored with these headers", packet, limit)
	for _, mode := range []string{"plain", "exactly once"} {
		t.Run(mode, func(t *testing.T) {
			// The largest scope, key and token the table holds: the
			// reserve must cover them.
			scope := strings.Repeat("s", 600)
			token := strings.Repeat("t", maxToken)
			for _, tc := range []struct {
				name string
				size int
				full bool
			}{
				{"empty", 0, true},
				{"just under", limit - 1, true},
				{"at the limit", limit, true},
				{"just over", limit + 1, false},
				{"over the packet", packet + 1, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					key := mode + "/" + tc.name
					key += strings.Repeat("k", maxKey-len(key))
					c := idem.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: token, Now: t0, LeaseEnd: t0.Add(time.Minute)}
					if res, err := s.Claim(t.Context(), c); err != nil || !res.Acquired {
						t.Fatal(res, err)
					}
					resp := idem.Response{Status: 201, Header: hdr, Body: bodyFor(c.Key, tc.size)}
					var err error
					if mode == "plain" {
						err = s.Complete(t.Context(), c.Scope, c.Key, c.Token, resp, t0, t0.Add(time.Hour))
					} else {
						var tx idem.Tx
						if tx, err = s.ExactlyOnce().BeginTx(t.Context(), c.Scope, c.Key, c.Token); err == nil {
							err = tx.Commit(t.Context(), resp, t0, t0.Add(time.Hour))
						}
					}
					if err != nil {
						t.Fatalf("storing a %d-byte body (limit %d, packet %d): %v", tc.size, limit, packet, err)
					}
					res, err := s.Claim(t.Context(), idem.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "retry", Now: t0.Add(time.Second), LeaseEnd: t0.Add(time.Minute)})
					if err != nil || res.Acquired || res.Existing.State != idem.StateCompleted {
						t.Fatalf("retry: %+v %v, want the completed record", res, err)
					}
					got := res.Existing.Response
					want := resp
					if !tc.full {
						want = resp.WithoutBody()
					}
					if got.Status != want.Status || got.BodyOmitted != want.BodyOmitted || !bytes.Equal(got.Body, want.Body) ||
						fmt.Sprint(got.Header) != fmt.Sprint(want.Header) {
						t.Fatalf("stored %d, %d body bytes, omitted %v, headers %v; want %d, %d bytes, omitted %v, headers %v",
							got.Status, len(got.Body), got.BodyOmitted, got.Header, want.Status, len(want.Body), want.BodyOmitted, want.Header)
					}
				})
			}
		})
	}
}

// TestLargeResponseThroughEngine: with an engine cap above the server's
// packet limit, a body that fits is replayed in full and one that does
// not is replayed without its body; either way the retry does not run
// the handler again, in both modes.
func TestLargeResponseThroughEngine(t *testing.T) {
	db := newDB(t, 4)
	packet := serverPacket(t, db)
	limit := packet - 4096 - 1024 // MaxResponseSize, less room for any headers the engine stores
	for _, mode := range []string{"plain", "exactly once"} {
		t.Run(mode, func(t *testing.T) {
			f := newTxFixture(t, db)
			var store idem.Store = f.s.Store
			if mode == "exactly once" {
				store = f.s
			}
			// Writing 16 MiB takes this server seconds: the store timeout
			// must cover the largest response.
			a := newApp(t, f, store, idem.WithMaxResponseBody(packet+1<<20), idem.WithStoreTimeout(time.Minute))
			for _, tc := range []struct {
				name string
				size int
				full bool
			}{
				{"fits", limit, true},
				{"over the packet", packet + 1, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					key := strings.ReplaceAll(tc.name, " ", "-")
					first := a.post(key, tc.size, 0)
					if first.code != http.StatusCreated || !bytes.Equal(first.body, bodyFor(key, tc.size)) {
						t.Fatalf("first request: %v, want 201 with all %d bytes", first, tc.size)
					}
					retry := a.post(key, tc.size, 0)
					switch {
					case retry.code != http.StatusCreated || !retry.replayed():
						t.Fatalf("retry: %v, want the replay", retry)
					case tc.full && (retry.omitted() || !bytes.Equal(retry.body, first.body)):
						t.Fatalf("retry: %v, want the whole body replayed", retry)
					case !tc.full && (!retry.omitted() || len(retry.body) != 0):
						t.Fatalf("retry: %v, want the replay without its body", retry)
					}
					a.ranOnce(t, key, mode == "exactly once")
				})
			}
			if n := a.commitErrs.Load(); n != 0 {
				t.Errorf("%d commits failed (last: %v)", n, a.lastErr.Load())
			}
		})
	}
}
