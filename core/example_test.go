package idem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	idem "github.com/idemkit/idem/core"
)

// mapStore is the smallest correct Store, for these examples; use
// stores/memory, stores/redis or stores/pgx in a service.
type mapStore struct {
	mu   sync.Mutex
	recs map[[2]string]*storedRec
}

type storedRec struct {
	rec   idem.Record
	token string
}

func (s *mapStore) Claim(_ context.Context, c idem.Claim) (idem.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{c.Scope, c.Key}
	if r, ok := s.recs[k]; ok && !r.rec.Takeable(c.Now) {
		cp := r.rec
		return idem.ClaimResult{Existing: &cp}, nil
	}
	s.recs[k] = &storedRec{idem.Record{Fingerprint: c.Fingerprint, State: idem.StateInProgress, CreatedAt: c.Now, LeaseEnd: c.LeaseEnd, ExpiresAt: c.LeaseEnd}, c.Token}
	return idem.ClaimResult{Acquired: true}, nil
}

func (s *mapStore) Complete(_ context.Context, scope, key, token string, resp idem.Response, now, exp time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[[2]string{scope, key}]
	if !ok || r.token != token || r.rec.State != idem.StateInProgress || !now.Before(r.rec.LeaseEnd) {
		return idem.ErrLeaseLost
	}
	resp.Body = append([]byte(nil), resp.Body...)
	r.rec.State, r.rec.Response, r.rec.LeaseEnd, r.rec.ExpiresAt = idem.StateCompleted, &resp, time.Time{}, exp
	return nil
}

func (s *mapStore) Release(_ context.Context, scope, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{scope, key}
	if r, ok := s.recs[k]; !ok || r.token != token || r.rec.State != idem.StateInProgress {
		return idem.ErrLeaseLost
	}
	delete(s.recs, k)
	return nil
}

func Example() {
	engine, err := idem.New(&mapStore{recs: map[[2]string]*storedRec{}})
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
	engine, _ := idem.New(&mapStore{recs: map[[2]string]*storedRec{}})
	admin := http.NewServeMux()
	// Behind your own authentication: evicting a key lets its next
	// duplicate run again.
	admin.Handle("/idem", requireOperator(engine.AdminHandler()))
	_ = admin
}

func requireOperator(h http.Handler) http.Handler { return h }

func ExampleForRoute() {
	engine, _ := idem.New(&mapStore{recs: map[[2]string]*storedRec{}})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /search", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /webhooks/{source}", func(w http.ResponseWriter, r *http.Request) {})
	_ = engine.Middleware(
		idem.ForRoute("POST", "/search", idem.Optional()),
		idem.ForRoute("POST", "/webhooks/{source}", idem.Skip()),
	)(mux)
}

// Do runs an operation once per key, for any transport: here a message
// consumer that sees one message twice.
func ExampleEngine_Do() {
	engine, _ := idem.New(&mapStore{recs: map[[2]string]*storedRec{}})
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
	engine, _ := idem.New(&mapStore{recs: map[[2]string]*storedRec{}})
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
	engine, _ := idem.New(&mapStore{recs: map[[2]string]*storedRec{}})
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
