package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// RunPaymentOptions checks, on a store, the engine options payment APIs
// use beside encryption: the JSON fingerprint (with Ignore), the key from
// a body field, the key validator, Stripe-style global keys, the
// replayed-headers allowlist, WithRedact and WithReplayHook, through the
// net/http middleware and through Engine.Do. Each check gets a fresh
// engine on store and keys of its own.
func RunPaymentOptions(t *testing.T, s store.Store) {
	t.Helper()
	engine := func(t *testing.T, opts ...idem.Option) *idem.Engine {
		e, err := idem.New(s, append([]idem.Option{idem.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		return e
	}
	type answer struct {
		code     int
		body     string
		header   http.Header
		replayed bool
	}
	runs := 0
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Card-Holder", "Ada Lovelace")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	})
	post := func(h http.Handler, path, key, body string) answer {
		r := httptest.NewRequest("POST", path, strings.NewReader(body))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return answer{w.Code, w.Body.String(), w.Header(), w.Header().Get("Idempotent-Replayed") == "true"}
	}
	mux := func(e *idem.Engine, opts ...idem.HTTPOption) http.Handler {
		m := http.NewServeMux()
		m.Handle("POST /pay", handler)
		m.Handle("POST /refund", handler)
		return e.Middleware(opts...)(m)
	}
	key := func() string { return "opt-" + rand.Text() }

	t.Run("JSONFingerprint", func(t *testing.T) {
		h := mux(engine(t), idem.WithJSONFingerprint(idem.Ignore("/sent_at")))
		k, before := key(), runs
		first := post(h, "/pay", k, `{"amount":10,"sent_at":1}`)
		again := post(h, "/pay", k, `{ "sent_at": 2, "amount": 10.0 }`)
		if first.code != 201 || !again.replayed || runs != before+1 {
			t.Errorf("the same JSON written another way, another ignored member: %d, retry %d replayed=%v, %d runs", first.code, again.code, again.replayed, runs-before)
		}
		if a := post(h, "/pay", k, `{"amount":11,"sent_at":1}`); a.code != http.StatusUnprocessableEntity {
			t.Errorf("another amount: %d, want 422", a.code)
		}
		if a := post(h, "/pay", key(), `{"amount":`); a.code != http.StatusBadRequest || !strings.Contains(a.body, "invalid-json") {
			t.Errorf("invalid JSON: %d %q, want 400 invalid-json", a.code, a.body)
		}
	})
	t.Run("KeyField", func(t *testing.T) {
		h := mux(engine(t), idem.WithKeyField("request_id"))
		id := key()
		first := post(h, "/pay", "", `{"request_id":"`+id+`","amount":5}`)
		again := post(h, "/pay", "", `{"request_id":"`+id+`","amount":5}`)
		if first.code != 201 || !again.replayed {
			t.Errorf("the key from the body: %d, retry %d replayed=%v", first.code, again.code, again.replayed)
		}
	})
	t.Run("KeyValidator", func(t *testing.T) {
		h := mux(engine(t, idem.WithKeyValidator(func(k string) error {
			if !strings.HasPrefix(k, "opt-") {
				return io.ErrUnexpectedEOF
			}
			return nil
		})))
		if a := post(h, "/pay", "not-ours", `{}`); a.code != http.StatusBadRequest || !strings.Contains(a.body, "invalid-key") {
			t.Errorf("a refused key: %d %q, want 400 invalid-key", a.code, a.body)
		}
	})
	t.Run("GlobalKeys", func(t *testing.T) {
		h := mux(engine(t, idem.WithGlobalKeys()))
		k := key()
		post(h, "/pay", k, `{"amount":1}`)
		if a := post(h, "/refund", k, `{"amount":1}`); a.code != http.StatusUnprocessableEntity {
			t.Errorf("the key on another route: %d, want 422", a.code)
		}
	})
	t.Run("ReplayedHeadersRedactAndHook", func(t *testing.T) {
		e := engine(t,
			idem.WithRedact(func(_ context.Context, r idem.Response) idem.Response {
				r.Body = bytes.ReplaceAll(r.Body, []byte("4242"), []byte("****"))
				return r
			}),
			idem.WithReplayHook(func(_ context.Context, r *idem.Response, created time.Time) {
				r.Header.Set("Idempotent-Replayed-At", created.UTC().Format(http.TimeFormat))
			}))
		h, k := mux(e, idem.WithReplayedHeaders()), key()
		first := post(h, "/pay", k, `{"card":"4242"}`)
		again := post(h, "/pay", k, `{"card":"4242"}`)
		if first.body != `{"card":"4242"}` || first.header.Get("X-Card-Holder") == "" {
			t.Errorf("the first client got %q %v, want everything", first.body, first.header)
		}
		if !again.replayed || again.body != `{"card":"****"}` || again.header.Get("X-Card-Holder") != "" ||
			again.header.Get("Content-Type") != "application/json" || again.header.Get("Idempotent-Replayed-At") == "" {
			t.Errorf("replay %d %q %v: want the redacted body, Content-Type kept, X-Card-Holder dropped, the hook's header", again.code, again.body, again.header)
		}
	})
	t.Run("Do", func(t *testing.T) {
		e := engine(t, idem.WithRedact(func(_ context.Context, r idem.Response) idem.Response {
			r.Body = bytes.ReplaceAll(r.Body, []byte("tok_live"), []byte("tok_****"))
			return r
		}))
		k, n := key(), 0
		fn := func(context.Context) ([]byte, error) { n++; return []byte("tok_live_1"), nil }
		op := func(payload string) idem.Op {
			fp, err := e.Policy(idem.WithJSONFingerprint()).FingerprintRequest("queue", "payments", []byte(payload))
			if err != nil {
				t.Fatal(err)
			}
			return idem.Op{Kind: "queue", Name: "payments", Key: k, Fingerprint: fp}
		}
		v, _, err := e.Do(t.Context(), op(`{"a":1,"b":2}`), fn)
		if err != nil || string(v) != "tok_live_1" {
			t.Fatalf("first: %q %v", v, err)
		}
		v, replayed, err := e.Do(t.Context(), op(`{"b":2, "a":1}`), fn)
		if err != nil || !replayed || string(v) != "tok_****_1" || n != 1 {
			t.Errorf("the same JSON reordered: %q replayed=%v %v, %d runs; want the redacted value replayed", v, replayed, err, n)
		}
	})
}
