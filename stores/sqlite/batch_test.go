package sqlitestore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// TestGroupCommit: writes that queue while the write lock is held run
// together once it is free, each with its own outcome, and a write whose
// context ends while it waits is withdrawn and never runs.
func TestGroupCommit(t *testing.T) {
	s := newStore(t, nil, WithSweepInterval(0))
	ctx := t.Context()
	now := time.Now()
	claim := func(key string) store.Claim { return claimAt(key, "t-"+key, now, time.Minute) }
	if res, err := s.Claim(ctx, claim("taken")); err != nil || !res.Acquired {
		t.Fatalf("claim: %v %v", res, err)
	}
	if err := s.lock(ctx); err != nil {
		t.Fatal(err)
	}
	// A write that gives up while it waits.
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := s.Claim(cctx, claim("withdrawn"))
		gaveUp <- err
	}()
	// Writes that wait: new keys, a wrong-token Release, a Complete.
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n+2)
	for i := range n {
		wg.Go(func() {
			res, err := s.Claim(ctx, claim(string(rune('a'+i))))
			if err == nil && !res.Acquired {
				err = errors.New("not acquired")
			}
			errs <- err
		})
	}
	wg.Go(func() {
		if err := s.Release(ctx, hold("taken", "wrong")); !errors.Is(err, store.ErrLeaseLost) {
			errs <- err
		}
	})
	wg.Go(func() {
		errs <- s.Complete(ctx, hold("taken", "t-taken"), done("created", now, now.Add(time.Hour)))
	})
	for i := 0; i < 1000 && s.pendingWrites() < n+3; i++ {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a claim whose context ended while waiting: %v, want context.Canceled", err)
	}
	runs := s.batchRuns()
	s.unlock()
	wg.Wait()
	if got := s.batchRuns() - runs; got != 1 {
		t.Errorf("the %d waiting writes ran in %d batches, want 1", n+2, got)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if _, ok, _ := s.Get(ctx, ref("withdrawn"), now); ok {
		t.Error("the withdrawn claim was written")
	}
	if rec, ok, err := s.Get(ctx, ref("taken"), now); err != nil || !ok || rec.State != store.Completed {
		t.Errorf("the completed record: %+v %v %v", rec, ok, err)
	}
}

func (s *Store) batchRuns() int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.runs
}

func (s *Store) pendingWrites() int {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.pending)
}
