package sqlitestore

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// oldHeader writes header bytes as stores kept them before results were
// opaque (core's header format 1), by hand: the format byte, the number
// of names, then each name with its one value, lengths as one-byte
// uvarints.
func oldHeader(pairs ...string) []byte {
	b := []byte{1, byte(len(pairs) / 2)}
	for i := 0; i+1 < len(pairs); i += 2 {
		b = append(b, byte(len(pairs[i])))
		b = append(b, pairs[i]...)
		b = append(b, 1, byte(len(pairs[i+1])))
		b = append(b, pairs[i+1]...)
	}
	return b
}

// TestLegacyRecord: rows completed before results were opaque (an HTTP
// status, core's header bytes and a body, INSERTed here as that code
// wrote them) still read: Get and Claim's Existing return a Head of
// store.LegacyHead(status, headers) and the body, and an engine replays
// the original response, status, headers and body.
func TestLegacyRecord(t *testing.T) {
	db := newDB(t)
	s := newStore(t, db)
	ctx := t.Context()
	const reqBody = `{"sku":"A1"}`
	scope := idem.Scope("", "POST", "/orders")
	fp := idem.Fingerprint("POST", "/orders", []byte(reqBody)) // the middleware's default fingerprint
	created := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	expires := created.Add(24 * time.Hour)
	header := oldHeader("Content-Type", "application/json", "X-Order", "7")

	type row struct {
		key     string
		status  int
		header  []byte // nil: a NULL column
		body    []byte
		omitted bool
	}
	rows := []row{
		{"legacy", http.StatusCreated, header, []byte(`{"id":7}`), false},
		{"legacy-no-headers", http.StatusNoContent, nil, nil, false},
		{"legacy-empty-body", http.StatusOK, oldHeader(), []byte{}, false},
		{"legacy-body-omitted", http.StatusOK, header, nil, true},
		// Rows no engine can have written: the store returns them as they
		// are, and the engine, which reads the head, refuses them.
		{"legacy-bad-status", 700, header, []byte("x"), false},
		{"legacy-bad-headers", http.StatusOK, []byte{0xff, 0x01}, []byte("x"), false},
	}
	q := `INSERT INTO ` + quoteIdent(s.Table()) + ` (scope, "key", fingerprint, token, state, status, headers, body, body_omitted,
  created_at, lease_end, expires_at) VALUES (?, ?, ?, 'old-token', 2, ?, ?, ?, ?, ?, NULL, ?)`
	for _, r := range rows {
		if _, err := db.ExecContext(ctx, q, []byte(scope), []byte(r.key), []byte(fp), r.status, r.header, r.body, r.omitted,
			created.UnixMicro(), expires.UnixMicro()); err != nil {
			t.Fatal(err)
		}
	}

	check := func(t *testing.T, how string, r row, rec *store.Record) {
		t.Helper()
		want := store.Result{Head: store.LegacyHead(r.status, r.header), Body: r.body, BodyOmitted: r.omitted}
		if rec.State != store.Completed || rec.Fingerprint != fp || !rec.CreatedAt.Equal(created) ||
			!rec.ExpiresAt.Equal(expires) || !rec.LeaseEnd.IsZero() {
			t.Errorf("%s: record %+v", how, rec)
		}
		if !bytes.Equal(rec.Result.Head, want.Head) || !bytes.Equal(rec.Result.Body, want.Body) || rec.Result.BodyOmitted != want.BodyOmitted {
			t.Errorf("%s: result %+v, want %+v", how, rec.Result, want)
		}
	}
	for _, r := range rows {
		t.Run(r.key, func(t *testing.T) {
			rec, ok, err := s.Get(ctx, store.Ref{Scope: scope, Key: r.key}, time.Now())
			if err != nil || !ok {
				t.Fatalf("Get: %v %v", ok, err)
			}
			check(t, "Get", r, &rec)
			c := store.Claim{Scope: scope, Key: r.key, Fingerprint: fp, Token: "new-token", Now: time.Now(), LeaseEnd: time.Now().Add(time.Minute)}
			res, err := s.Claim(ctx, c)
			if err != nil || res.Acquired {
				t.Fatalf("Claim: %+v %v; want the completed record as Existing", res, err)
			}
			check(t, "Claim's Existing", r, res.Existing)
		})
	}

	// Through an engine and the net/http middleware: the retry of the
	// request that wrote the row is answered from it, the handler never
	// runs; a row with a bad status or header bytes is answered 503, never
	// replayed.
	e, err := idem.New(s, idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the handler ran for key %q; want the legacy record replayed", r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusTeapot)
	})
	srv := httptest.NewServer(e.Middleware()(mux))
	defer srv.Close()
	for _, tc := range []struct {
		key    string
		status int
		header http.Header
		body   string
	}{
		{"legacy", http.StatusCreated, http.Header{"Content-Type": {"application/json"}, "X-Order": {"7"},
			"Idempotent-Replayed": {"true"}}, `{"id":7}`},
		{"legacy-no-headers", http.StatusNoContent, http.Header{"Idempotent-Replayed": {"true"}}, ""},
		{"legacy-empty-body", http.StatusOK, http.Header{"Idempotent-Replayed": {"true"}}, ""},
		{"legacy-body-omitted", http.StatusOK, http.Header{"X-Order": {"7"}, "Idempotent-Replayed": {"true"},
			idem.HeaderBodyOmitted: {"true"}}, ""},
		{"legacy-bad-status", http.StatusServiceUnavailable, nil, ""},
		{"legacy-bad-headers", http.StatusServiceUnavailable, nil, ""},
	} {
		t.Run("engine/"+tc.key, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(reqBody))
			req.Header.Set("Idempotency-Key", tc.key)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || tc.status != http.StatusServiceUnavailable && string(body) != tc.body {
				t.Fatalf("replay: %d %q %v; want %d %q", resp.StatusCode, body, resp.Header, tc.status, tc.body)
			}
			if tc.status == http.StatusServiceUnavailable && resp.Header.Get("Idempotent-Replayed") != "" {
				t.Errorf("a corrupt record was replayed: %v", resp.Header)
			}
			for name, vals := range tc.header {
				if got := resp.Header.Values(name); len(got) != len(vals) || got[0] != vals[0] {
					t.Errorf("header %s: %q, want %q", name, got, vals)
				}
			}
		})
	}
}
