package idem_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// mapStore is the smallest correct Store, for these examples; use
// stores/memory, stores/redis or stores/pgx in a service. Package store
// holds the contract.
type mapStore struct {
	mu   sync.Mutex
	recs map[store.Ref]*storedRec
}

type storedRec struct {
	rec   store.Record
	token string
}

func (s *mapStore) Claim(_ context.Context, c store.Claim) (store.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.recs[c.Ref()]; ok && !r.rec.Takeable(c.Now) {
		cp := r.rec
		return store.ClaimResult{Existing: &cp}, nil
	}
	s.recs[c.Ref()] = &storedRec{store.Record{Fingerprint: c.Fingerprint, State: store.InProgress, CreatedAt: c.Now, LeaseEnd: c.LeaseEnd, ExpiresAt: c.LeaseEnd}, c.Token}
	return store.ClaimResult{Acquired: true}, nil
}

func (s *mapStore) Complete(_ context.Context, h store.Hold, c store.Completion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[h.Ref]
	if !ok || r.token != h.Token || r.rec.State != store.InProgress {
		return store.ErrLeaseLost
	}
	res := store.Result{Head: bytes.Clone(c.Result.Head), Body: bytes.Clone(c.Result.Body), BodyOmitted: c.Result.BodyOmitted}
	r.rec.State, r.rec.Result, r.rec.LeaseEnd, r.rec.ExpiresAt = store.Completed, res, time.Time{}, c.ExpiresAt
	return nil
}

func (s *mapStore) Release(_ context.Context, h store.Hold) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.recs[h.Ref]; !ok || r.token != h.Token || r.rec.State != store.InProgress {
		return store.ErrLeaseLost
	}
	delete(s.recs, h.Ref)
	return nil
}

func Example() {
	engine, err := idem.New(&mapStore{recs: map[store.Ref]*storedRec{}})
	if err != nil {
		panic(err)
	}
	charges := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "payment %d", charges)
	})
	h := engine.Middleware()(mux) // keys scoped by the ServeMux pattern

	for _, body := range []string{`{"amount":10}`, `{"amount":10}`, `{"amount":99}`} {
		r := httptest.NewRequest("POST", "/payments", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), w.Header().Get("Content-Type"))
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201  text/plain; charset=utf-8
	// 201 true text/plain; charset=utf-8
	// 422  application/problem+json
	// charges: 1
}

func ExampleParseKey() {
	for _, v := range []string{`abc`, `"abc"`, `"a\"b"`, `a, b`, ``} {
		key, err := idem.ParseKey([]string{v})
		fmt.Printf("%-8s %q %v\n", v, key, err)
	}
	// Output:
	// abc      "abc" <nil>
	// "abc"    "abc" <nil>
	// "a\"b"   "a\"b" <nil>
	// a, b     "" idem: invalid idempotency key: the header holds a list of keys (a comma at position 2); send exactly one key
	//          "" idem: invalid idempotency key: the key is empty; send 1 to 255 characters, such as a UUID
}

func ExampleScope() {
	fmt.Println(idem.Scope("acme", "POST", "/orders/{id}"))
	fmt.Println(idem.Scope("", "POST", "/orders/{id}"))
	// Output:
	// 4:acme4:POST12:/orders/{id}
	// 0:4:POST12:/orders/{id}
}

func ExampleFingerprint() {
	a := idem.Fingerprint("POST", "/orders?draft=1", []byte(`{"item":"book"}`))
	b := idem.Fingerprint("POST", "/orders?draft=2", []byte(`{"item":"book"}`))
	fmt.Println(len(a), a == b)
	// Output:
	// 64 false
}

func ExampleEngine_AdminHandler() {
	engine, _ := idem.New(&mapStore{recs: map[store.Ref]*storedRec{}})
	admin := http.NewServeMux()
	// Behind your own authentication: evicting a key lets its next
	// duplicate run again.
	admin.Handle("/idem", requireOperator(engine.AdminHandler()))
	_ = admin
}

func requireOperator(h http.Handler) http.Handler { return h }

func ExampleForRoute() {
	engine, _ := idem.New(&mapStore{recs: map[store.Ref]*storedRec{}})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /search", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /webhooks/{source}", func(w http.ResponseWriter, r *http.Request) {})
	_ = engine.Middleware(
		idem.WithMaxRequestBody(64<<10),                   // HTTPOptions for every route,
		idem.ForRoute("POST", "/search", idem.Optional()), // RouteOptions for some
		idem.ForRoute("POST", "/webhooks/{source}", idem.Skip()),
	)(mux)
}

// Do runs an operation once per key, for any transport: here a message
// consumer that sees one message twice.
func ExampleEngine_Do() {
	engine, _ := idem.New(&mapStore{recs: map[store.Ref]*storedRec{}})
	charges := 0
	consume := func(msgID string, data []byte) {
		op := idem.Op{Kind: "queue", Name: "payments", Key: msgID, Fingerprint: idem.Fingerprint("queue", "payments", data)}
		v, replayed, err := engine.Do(context.Background(), op, func(ctx context.Context) ([]byte, error) {
			charges++
			return fmt.Appendf(nil, "charge %d", charges), nil
		})
		var retry *idem.RetryError
		switch {
		case errors.As(err, &retry):
			fmt.Println("redeliver in", retry.After) // in flight elsewhere, or the store failed
		case err != nil:
			fmt.Println("error:", err)
		default:
			fmt.Printf("%s replayed=%v\n", v, replayed)
		}
	}
	consume("msg-1", []byte(`{"amount":10}`))
	consume("msg-1", []byte(`{"amount":10}`)) // a redelivery
	consume("msg-1", []byte(`{"amount":99}`)) // the same id on another message
	// Output:
	// charge 1 replayed=false
	// charge 1 replayed=true
	// error: idem: the key was already used with a different request
}

func ExampleDoJSON() {
	engine, _ := idem.New(&mapStore{recs: map[store.Ref]*storedRec{}})
	type receipt struct{ ID string }
	op := idem.Op{Kind: "job", Name: "invoice", Key: "2026-12", Fingerprint: "monthly"}
	for range 2 {
		r, replayed, err := idem.DoJSON(context.Background(), engine, op, func(ctx context.Context) (receipt, error) {
			return receipt{ID: "inv_1"}, nil
		})
		fmt.Println(r.ID, replayed, err)
	}
	// Output:
	// inv_1 false <nil>
	// inv_1 true <nil>
}

// A final error is stored like a result: every retry gets it back, and
// the operation does not run again.
func ExampleFinal() {
	engine, _ := idem.New(&mapStore{recs: map[store.Ref]*storedRec{}})
	op := idem.Op{Kind: "job", Name: "charge", Key: "order-7", Fingerprint: "order-7"}
	for range 2 {
		_, replayed, err := engine.Do(context.Background(), op, func(ctx context.Context) ([]byte, error) {
			return nil, idem.Final(errors.New("card declined"))
		})
		fmt.Println(err, replayed)
	}
	// Output:
	// card declined false
	// card declined true
}
