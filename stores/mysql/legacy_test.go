package mysqlstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// legacyRow is a completed row as the store wrote it before results were
// opaque: an HTTP status, the header bytes (format 1: a count of names,
// then each name with its values, lengths as uvarints; NULL for no
// headers) and the body.
type legacyRow struct {
	status  int
	header  []byte // nil: NULL
	body    []byte // nil: NULL
	omitted bool
}

// legacyHeader is the old header bytes of Content-Type: application/json
// and X-Order: a, b, names sorted as the old store wrote them.
var legacyHeader = slices.Concat(
	[]byte{1, 2},
	[]byte{12}, []byte("Content-Type"), []byte{1, 16}, []byte("application/json"),
	[]byte{7}, []byte("X-Order"), []byte{2, 1, 'a', 1, 'b'},
)

// legacyRows are the rows of the tests: with headers and a body, with no
// headers (NULL) and no body (NULL), with an empty header list and an
// empty body, with its body omitted.
var legacyRows = []legacyRow{
	{status: 201, header: legacyHeader, body: []byte(`{"id":7}`)},
	{status: 204},
	{status: 200, header: []byte{1, 0}, body: []byte{}},
	{status: 200, header: legacyHeader, omitted: true},
}

// badLegacyRows are old rows that no store can have written: a status no
// response has, header bytes in no format. The store returns them as it
// returns any old row; the engine, which reads the head, refuses them.
var badLegacyRows = []legacyRow{
	{status: 700, header: legacyHeader, body: []byte("x")},
	{status: 200, header: []byte{0xff, 0x01}, body: []byte("x")},
}

// insertLegacy writes r with raw SQL, as the old store's completion left
// it: state 2, the status, headers and body columns, no lease end.
func insertLegacy(t *testing.T, s *Store, scope, key, fp, token string, r legacyRow, created, expires time.Time) {
	t.Helper()
	null := func(b []byte) any {
		if b == nil {
			return nil
		}
		return b
	}
	_, err := s.db.ExecContext(t.Context(), "INSERT INTO "+quoteIdent(s.table)+
		" (scope, `key`, fingerprint, token, state, status, headers, body, body_omitted, created_at, lease_end, expires_at)"+
		" VALUES (?, ?, ?, ?, 2, ?, ?, ?, ?, ?, NULL, ?)",
		[]byte(scopeKey(scope)), []byte(key), []byte(fp), []byte(token), r.status, null(r.header), null(r.body), r.omitted,
		created.UnixMicro(), expires.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
}

// want is the result the store returns for r: its head built by
// store.LegacyHead, its body as stored.
func (r legacyRow) want() store.Result {
	return store.Result{Head: store.LegacyHead(r.status, r.header), Body: r.body, BodyOmitted: r.omitted}
}

// A completed row written before results were opaque reads as it did:
// Get and Claim return its head built from the status and the header
// bytes, and its body. Once it expires a claim takes it over and the new
// completion is kept in the new form, the status left NULL.
func TestLegacyRecord(t *testing.T) {
	for _, mode := range []string{"plain", "exactly once"} {
		t.Run(mode, func(t *testing.T) {
			s := newStore(t, nil)
			var st interface {
				store.Store
				store.Getter
			} = s
			if mode == "exactly once" {
				st = s.ExactlyOnce()
			}
			ctx := t.Context()
			for i, r := range slices.Concat(legacyRows, badLegacyRows) {
				c := claimAt(fmt.Sprint("legacy-", i), "fp", "new", t0.Add(time.Minute), time.Minute)
				insertLegacy(t, s, c.Scope, c.Key, "fp", "old", r, t0, t0.Add(time.Hour))
				want := r.want()

				rec, ok, err := st.Get(ctx, c.Ref(), t0.Add(time.Minute))
				if err != nil || !ok {
					t.Fatalf("%d: get = %v, %v", i, ok, err)
				}
				if rec.State != store.Completed || rec.Fingerprint != "fp" || !rec.CreatedAt.Equal(t0) ||
					!rec.ExpiresAt.Equal(t0.Add(time.Hour)) || !rec.LeaseEnd.IsZero() || !reflect.DeepEqual(rec.Result, want) {
					t.Fatalf("%d: get = %+v, want the result %+v", i, rec, want)
				}

				res, err := st.Claim(ctx, c)
				if err != nil || res.Acquired || res.Existing == nil {
					t.Fatalf("%d: claim = %+v, %v; want the completed record", i, res, err)
				}
				if ex := res.Existing; ex.State != store.Completed || ex.Fingerprint != "fp" || !reflect.DeepEqual(ex.Result, want) {
					t.Fatalf("%d: claim's existing = %+v, want the result %+v", i, ex, want)
				}

				// Expired: a new claim takes the row over, and its
				// completion is kept as opaque bytes, not read as an old
				// row's.
				later := t0.Add(time.Hour)
				c.Token, c.Now, c.LeaseEnd = "next", later, later.Add(time.Minute)
				if res, err := st.Claim(ctx, c); err != nil || !res.Acquired {
					t.Fatalf("%d: claim after expiry = %+v, %v", i, res, err)
				}
				next := result("\x01next", "next")
				if err := st.Complete(ctx, c.Hold(), completeAt(next, later, later.Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
				if rec, ok, err := st.Get(ctx, c.Ref(), later); err != nil || !ok || !reflect.DeepEqual(rec.Result, next) {
					t.Fatalf("%d: after a new completion, get = %+v, %v, %v; want %+v", i, rec.Result, ok, err, next)
				}
				var status any
				if err := s.db.QueryRowContext(ctx, "SELECT status FROM "+quoteIdent(s.table)+" WHERE `key` = ?", c.Key).Scan(&status); err != nil || status != nil {
					t.Fatalf("%d: status column of a new completion = %v, %v; want NULL", i, status, err)
				}
			}
		})
	}
}

// An engine replays a completed row written before results were opaque
// as it did: its status, its headers and its body, without running the
// handler, in both modes, through the net/http middleware. An old row it
// cannot read is answered 503, never replayed, and the handler does not
// run either.
func TestLegacyRecordThroughEngine(t *testing.T) {
	for _, mode := range []string{"plain", "exactly once"} {
		t.Run(mode, func(t *testing.T) {
			s := newStore(t, nil)
			var st store.Store = s
			if mode == "exactly once" {
				st = s.ExactlyOnce()
			}
			e, err := idem.New(st, idem.WithLogger(quietLog), idem.WithObserver(func(_ context.Context, ev idem.Event) {
				if ev.Err != nil {
					t.Logf("%s: %v", ev.Outcome, ev.Err) // why a request got 503
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusOK)
				io.WriteString(w, "fresh")
			}))
			post := func(key string) *http.Response {
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":42}`))
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				return w.Result()
			}
			for i, r := range slices.Concat(legacyRows, badLegacyRows) {
				bad := i >= len(legacyRows)
				key := fmt.Sprint("legacy-", i)
				// The first request writes the row, in the new form, with
				// the scope and fingerprint the engine gives this
				// request; the test replaces it with an old row for the
				// same request.
				if resp := post(key); resp.StatusCode != http.StatusOK {
					t.Fatalf("%d: first request: %d", i, resp.StatusCode)
				}
				var scope, fp []byte
				if err := s.db.QueryRowContext(t.Context(), "SELECT scope, fingerprint FROM "+quoteIdent(s.table)+" WHERE `key` = ?", key).Scan(&scope, &fp); err != nil {
					t.Fatal(err)
				}
				if _, err := s.db.ExecContext(t.Context(), "DELETE FROM "+quoteIdent(s.table)+" WHERE `key` = ?", key); err != nil {
					t.Fatal(err)
				}
				now, err := s.Now(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				insertLegacy(t, s, string(scope), key, string(fp), "old", r, now.Add(-time.Second), now.Add(time.Hour))

				resp := post(key)
				body, _ := io.ReadAll(resp.Body)
				if runs != i+1 {
					t.Fatalf("%d: the handler ran again for an old row (%d runs)", i, runs)
				}
				if bad {
					if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Idempotent-Replayed") != "" {
						t.Errorf("%d: a corrupt old row answered %d %v, want 503 and no replay", i, resp.StatusCode, resp.Header)
					}
					continue
				}
				if resp.StatusCode != r.status || resp.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(body, r.body) {
					t.Fatalf("%d: replay %d %v %q, want %d, replayed, %q", i, resp.StatusCode, resp.Header, body, r.status, r.body)
				}
				switch i {
				case 0:
					if resp.Header.Get("Content-Type") != "application/json" || !slices.Equal(resp.Header.Values("X-Order"), []string{"a", "b"}) {
						t.Errorf("%d: replayed headers %v, want Content-Type application/json and X-Order a, b", i, resp.Header)
					}
				case 1, 2:
					if resp.Header.Get("Content-Type") != "" || resp.Header.Get("X-Order") != "" {
						t.Errorf("%d: replayed headers %v, want none stored", i, resp.Header)
					}
				case 3:
					// A row whose body was omitted replays its headers but
					// those that describe the body.
					if !slices.Equal(resp.Header.Values("X-Order"), []string{"a", "b"}) {
						t.Errorf("%d: replayed headers %v, want X-Order a, b", i, resp.Header)
					}
				}
				if got := resp.Header.Get(idem.HeaderBodyOmitted) == "true"; got != r.omitted {
					t.Errorf("%d: %s %v, want %v", i, idem.HeaderBodyOmitted, got, r.omitted)
				}
			}
		})
	}
}
