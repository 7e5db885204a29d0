package idem

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem/core/store"
)

// testStore is a minimal store for the engine's own tests (the real
// in-memory store lives in its own module, which depends on this one).
type testStore struct {
	mu       sync.Mutex
	recs     map[[2]string]*testRec
	watchers map[[2]string][]chan struct{}
	calls    map[string]int
}

type testRec struct {
	store.Record
	token string
}

func newTestStore() *testStore {
	return &testStore{recs: map[[2]string]*testRec{}, watchers: map[[2]string][]chan struct{}{}, calls: map[string]int{}}
}

func (s *testStore) count(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *testStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["claim"]++
	k := [2]string{c.Scope, c.Key}
	if r, ok := s.recs[k]; ok && !r.Takeable(c.Now) {
		cp := r.Record
		return store.ClaimResult{Existing: &cp}, nil
	}
	s.recs[k] = &testRec{Record: store.Record{Fingerprint: c.Fingerprint, State: store.InProgress, CreatedAt: c.Now, LeaseEnd: c.LeaseEnd, ExpiresAt: c.LeaseEnd}, token: c.Token}
	return store.ClaimResult{Acquired: true}, nil
}

func (s *testStore) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["complete"]++
	k := [2]string{h.Scope, h.Key}
	r, ok := s.recs[k]
	if !ok || r.token != h.Token || r.State != store.InProgress {
		return ErrLeaseLost
	}
	res := store.Result{Head: append([]byte(nil), c.Result.Head...), BodyOmitted: c.Result.BodyOmitted}
	if len(c.Result.Body) > 0 {
		res.Body = append([]byte(nil), c.Result.Body...)
	}
	r.State, r.Result, r.LeaseEnd, r.ExpiresAt = store.Completed, res, time.Time{}, c.ExpiresAt
	s.notify(k)
	return nil
}

func (s *testStore) Release(ctx context.Context, h store.Hold) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["release"]++
	k := [2]string{h.Scope, h.Key}
	r, ok := s.recs[k]
	if !ok || r.token != h.Token || r.State != store.InProgress {
		return ErrLeaseLost
	}
	delete(s.recs, k)
	s.notify(k)
	return nil
}

func (s *testStore) Get(ctx context.Context, ref store.Ref, now time.Time) (store.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[[2]string{ref.Scope, ref.Key}]
	if !ok || !now.Before(r.ExpiresAt) {
		return store.Record{}, false, nil
	}
	return r.Record, true, nil
}

func (s *testStore) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["extend"]++
	r, ok := s.recs[[2]string{h.Scope, h.Key}]
	if !ok || r.token != h.Token || r.State != store.InProgress {
		return ErrLeaseLost
	}
	r.LeaseEnd, r.ExpiresAt = leaseEnd, leaseEnd
	return nil
}

func (s *testStore) notify(k [2]string) {
	for _, ch := range s.watchers[k] {
		close(ch)
	}
	delete(s.watchers, k)
}

// notifyingStore adds the Notifier capability to testStore.
type notifyingStore struct{ *testStore }

func (s notifyingStore) Watch(ctx context.Context, ref store.Ref) (<-chan struct{}, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{ref.Scope, ref.Key}
	ch := make(chan struct{})
	s.watchers[k] = append(s.watchers[k], ch)
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		ws := s.watchers[k]
		for i, w := range ws {
			if w == ch {
				s.watchers[k] = append(ws[:i], ws[i+1:]...)
				break
			}
		}
	}, nil
}

func (s *testStore) Delete(ctx context.Context, ref store.Ref) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{ref.Scope, ref.Key}
	_, ok := s.recs[k]
	delete(s.recs, k)
	s.notify(k)
	return ok, nil
}

// Evict deletes the record while it holds token, in any state.
func (s *testStore) Evict(ctx context.Context, h store.Hold) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["evict"]++
	k := [2]string{h.Scope, h.Key}
	r, ok := s.recs[k]
	if !ok || r.token != h.Token {
		return ErrLeaseLost
	}
	delete(s.recs, k)
	s.notify(k)
	return nil
}

// lookup is Get with the result decoded, for tests.
func (s *testStore) lookup(ctx context.Context, scope, key string, now time.Time) (*record, bool, error) {
	r, ok, err := s.Get(ctx, store.Ref{Scope: scope, Key: key}, now)
	if !ok || err != nil {
		return nil, ok, err
	}
	rec, err := fromStore(&r)
	return rec, err == nil, err
}
