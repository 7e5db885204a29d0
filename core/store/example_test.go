package store_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// mapStore is a complete Store in forty lines: one mutex, one map. A real
// store does the same inside its database, each method one atomic step.
type mapStore struct {
	mu   sync.Mutex
	recs map[store.Ref]entry
}

type entry struct {
	rec   store.Record
	token string
}

func (s *mapStore) Claim(_ context.Context, c store.Claim) (store.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.recs[c.Ref()]; ok && !e.rec.Takeable(c.Now) {
		return store.ClaimResult{Existing: &e.rec}, nil
	}
	s.recs[c.Ref()] = entry{store.Record{Fingerprint: c.Fingerprint, State: store.InProgress,
		CreatedAt: c.Now, LeaseEnd: c.LeaseEnd, ExpiresAt: c.LeaseEnd}, c.Token}
	return store.ClaimResult{Acquired: true}, nil
}

func (s *mapStore) Complete(_ context.Context, h store.Hold, c store.Completion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.recs[h.Ref]
	if !ok || e.token != h.Token || e.rec.State != store.InProgress {
		return store.ErrLeaseLost
	}
	// The caller reuses c.Result's memory: keep copies.
	res := store.Result{Head: append([]byte(nil), c.Result.Head...),
		Body: append([]byte(nil), c.Result.Body...), BodyOmitted: c.Result.BodyOmitted}
	e.rec.State, e.rec.Result, e.rec.LeaseEnd, e.rec.ExpiresAt = store.Completed, res, time.Time{}, c.ExpiresAt
	s.recs[h.Ref] = e
	return nil
}

func (s *mapStore) Release(_ context.Context, h store.Hold) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.recs[h.Ref]; !ok || e.token != h.Token || e.rec.State != store.InProgress {
		return store.ErrLeaseLost
	}
	delete(s.recs, h.Ref)
	return nil
}

// A store is the three methods of Store; the engine does the rest. The
// conformance module's RunStore checks one against every rule.
func Example() {
	s := &mapStore{recs: map[store.Ref]entry{}}
	engine, err := idem.New(s)
	if err != nil {
		panic(err)
	}
	h := engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "order 1")
	}))
	for range 2 {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"sku":"A"}`))
		r.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s replayed=%q\n", w.Code, w.Body, w.Header().Get("Idempotent-Replayed"))
	}
	for ref, e := range s.recs {
		fmt.Println(ref.Key, e.rec.State, len(e.rec.Result.Head) > 0)
	}
	// Output:
	// 201 order 1 replayed=""
	// 201 order 1 replayed="true"
	// k1 completed true
}

// A record written before results were opaque (a status and a header
// column) reads through LegacyHead.
func ExampleLegacyHead() {
	statusCol, headerCol := 201, []byte{1, 0} // header format 1, no names
	res := store.Result{Head: store.LegacyHead(statusCol, headerCol), Body: []byte(`{"id":7}`)}
	fmt.Println(res.Head)
	// Output: [1 201 1 1 0]
}
