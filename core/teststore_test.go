package idem

import (
	"context"
	"sync"
	"time"
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
	Record
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

func (s *testStore) Claim(ctx context.Context, c Claim) (ClaimResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["claim"]++
	k := [2]string{c.Scope, c.Key}
	if r, ok := s.recs[k]; ok && !r.Takeable(c.Now) {
		cp := r.Record
		return ClaimResult{Existing: &cp}, nil
	}
	s.recs[k] = &testRec{Record: Record{Fingerprint: c.Fingerprint, State: StateInProgress, CreatedAt: c.Now, LeaseEnd: c.LeaseEnd, ExpiresAt: c.LeaseEnd}, token: c.Token}
	return ClaimResult{Acquired: true}, nil
}

func (s *testStore) Complete(ctx context.Context, scope, key, token string, resp Response, now, exp time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["complete"]++
	k := [2]string{scope, key}
	r, ok := s.recs[k]
	if !ok || r.token != token || r.State != StateInProgress {
		return ErrLeaseLost
	}
	resp.Body = append([]byte(nil), resp.Body...)
	resp.Header = resp.Header.Clone()
	r.State, r.Response, r.LeaseEnd, r.ExpiresAt = StateCompleted, &resp, time.Time{}, exp
	s.notify(k)
	return nil
}

func (s *testStore) Release(ctx context.Context, scope, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["release"]++
	k := [2]string{scope, key}
	r, ok := s.recs[k]
	if !ok || r.token != token || r.State != StateInProgress {
		return ErrLeaseLost
	}
	delete(s.recs, k)
	s.notify(k)
	return nil
}

func (s *testStore) Get(ctx context.Context, scope, key string, now time.Time) (Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.recs[[2]string{scope, key}]
	if !ok || !now.Before(r.ExpiresAt) {
		return Record{}, false, nil
	}
	return r.Record, true, nil
}

func (s *testStore) Extend(ctx context.Context, scope, key, token string, now, leaseEnd time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["extend"]++
	r, ok := s.recs[[2]string{scope, key}]
	if !ok || r.token != token || r.State != StateInProgress {
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

func (s notifyingStore) Watch(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{scope, key}
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

func (s *testStore) Delete(ctx context.Context, scope, key string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{scope, key}
	_, ok := s.recs[k]
	delete(s.recs, k)
	s.notify(k)
	return ok, nil
}

// Evict deletes the record while it holds token, in any state.
func (s *testStore) Evict(ctx context.Context, scope, key, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls["evict"]++
	k := [2]string{scope, key}
	r, ok := s.recs[k]
	if !ok || r.token != token {
		return ErrLeaseLost
	}
	delete(s.recs, k)
	s.notify(k)
	return nil
}
