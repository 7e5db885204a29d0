package pgxstore

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// legacyHeader is a header blob as this package wrote it before results
// were opaque (idem.AppendHeader's format 1: the number of names, then
// each name, sorted, with its values, every length a uvarint), for
//
//	Content-Type: application/json
//	X-Multi: a
//	X-Multi: b
//	X-Request-Id: r1
var legacyHeader = []byte("\x01\x03" +
	"\x0cContent-Type\x01\x10application/json" +
	"\x07X-Multi\x02\x01a\x01b" +
	"\x0cX-Request-Id\x01\x02r1")

// TestLegacyRecord writes rows completed in the format of the version
// before results were opaque (an HTTP status in status, the header blob in
// headers, the body in body) straight into PostgreSQL, and reads them back
// through the store (Get, and Claim's Existing), whose head is then
// store.LegacyHead of the status and the header bytes, and through an
// engine, plain and exactly-once, which replays the stored status, headers
// and body without running the handler. A completion of today's code
// leaves status NULL and keeps the engine's head in headers.
func TestLegacyRecord(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	const reqBody = `{"amount":4200}`

	var runs int
	serve := func(st store.Store) http.Handler {
		e, err := idem.New(st, idem.WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		return e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, "ran again")
		}))
	}
	post := func(h http.Handler, key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(reqBody))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	plain := serve(s)

	// A first request through today's engine gives the request's scope
	// and fingerprint, and a row in today's format.
	if rec := post(plain, "probe"); rec.Code != http.StatusAccepted || runs != 1 {
		t.Fatalf("first request: %d after %d runs", rec.Code, runs)
	}
	var (
		scope, fp []byte
		status    *int32
		headers   []byte
	)
	if err := s.db.QueryRow(ctx, `SELECT scope, fingerprint, status, headers FROM `+quoted(s.table)+` WHERE key = 'probe'`).Scan(&scope, &fp, &status, &headers); err != nil {
		t.Fatal(err)
	}
	if status != nil || len(headers) == 0 {
		t.Fatalf("a completion of today's code: status set %v, headers %q; want status NULL and the engine's head", status != nil, headers)
	}

	// Rows completed by the previous version: one with its body, one whose
	// body it did not keep.
	now := time.Now()
	if _, err := s.db.Exec(ctx, `INSERT INTO `+quoted(s.table)+`
		(scope, key, fingerprint, token, state, status, headers, body, body_omitted, created_at, lease_end, expires_at)
		VALUES ($1, 'legacy', $2, 'old-token', 2, 201, $3, '{"id":7}', false, $4, NULL, $5),
		       ($1, 'legacy-omitted', $2, 'old-token', 2, 200, $3, NULL, true, $4, NULL, $5)`,
		scope, fp, legacyHeader, now.Add(-time.Minute), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	want := store.Result{Head: store.LegacyHead(201, legacyHeader), Body: []byte(`{"id":7}`)}
	got, ok, err := s.Get(ctx, ref(string(scope), "legacy"), now)
	if err != nil || !ok || got.State != store.Completed || got.Fingerprint != string(fp) || !reflect.DeepEqual(got.Result, want) {
		t.Fatalf("Get = %+v, %v, %v; want the result %+v", got, ok, err, want)
	}
	c := store.Claim{Scope: string(scope), Key: "legacy", Fingerprint: string(fp), Token: "new-token", Now: now, LeaseEnd: now.Add(time.Minute)}
	res, err := s.Claim(ctx, c)
	if err != nil || res.Acquired || res.Existing.State != store.Completed || !reflect.DeepEqual(res.Existing.Result, want) {
		t.Fatalf("Claim = %+v, %v; want the existing result %+v", res.Existing, err, want)
	}
	omitted := store.Result{Head: store.LegacyHead(200, legacyHeader), BodyOmitted: true}
	if got, ok, err := s.Get(ctx, ref(string(scope), "legacy-omitted"), now); err != nil || !ok || !reflect.DeepEqual(got.Result, omitted) {
		t.Fatalf("Get of a row without its body = %+v, %v, %v; want %+v", got.Result, ok, err, omitted)
	}

	// The engine replays it, in either mode, as the previous version did.
	for name, h := range map[string]http.Handler{"plain": plain, "exactly once": serve(s.ExactlyOnce())} {
		t.Run(name, func(t *testing.T) {
			before := runs
			rec := post(h, "legacy")
			if rec.Code != http.StatusCreated || rec.Body.String() != `{"id":7}` || runs != before {
				t.Fatalf("replay: %d %q after %d runs; want 201 {\"id\":7} and no run", rec.Code, rec.Body, runs-before)
			}
			for name, vals := range map[string][]string{
				"Content-Type": {"application/json"},
				"X-Multi":      {"a", "b"},
				"X-Request-Id": {"r1"},
			} {
				if got := rec.Header().Values(name); !reflect.DeepEqual(got, vals) {
					t.Errorf("replayed %s: %q, want %q", name, got, vals)
				}
			}
			if rec.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("replay without Idempotent-Replayed: %v", rec.Header())
			}
		})
	}
	// Untouched by the replays.
	var after int32
	if err := s.db.QueryRow(ctx, `SELECT status FROM `+quoted(s.table)+` WHERE key = 'legacy'`).Scan(&after); err != nil || after != 201 {
		t.Fatalf("legacy row's status after the replays: %d, %v", after, err)
	}
}
