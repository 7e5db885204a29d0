package idem_test

import (
	"context"
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
	if r, ok := s.recs[k]; ok && c.Now.Before(r.rec.ExpiresAt) {
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
	// a, b     "" idem: invalid idempotency key: a list of keys is not allowed; send one key
	//          "" idem: invalid idempotency key: the key is empty
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
