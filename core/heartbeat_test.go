package idem

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

func TestHeartbeatFollowsTheRouteLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithLease(time.Hour), WithHeartbeat(30*time.Minute))
		runs := 0
		h := e.Middleware(TTL(3 * time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				time.Sleep(10 * time.Second)
			}
		}))
		done := make(chan struct{})
		go func() { post(h, "/", "k", ""); close(done) }()
		time.Sleep(5 * time.Second)
		if w := post(h, "/", "k", ""); w.Code != 409 {
			t.Errorf("a short route lease must be kept alive: %d, want 409", w.Code)
		}
		<-done
		if runs != 1 {
			t.Errorf("runs %d", runs)
		}
	})
}

func TestTinyRouteTTLWithHeartbeat(t *testing.T) {
	e, _ := newEngine(t, newTestStore(), WithHeartbeat(time.Second))
	h := e.Middleware(TTL(time.Millisecond))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	post(h, "/", "k", "") // must not crash the process
}

// batchStore is a testStore with a BatchExtender that counts its calls.
type batchStore struct {
	*testStore
	batches, refs atomic.Int32
}

func (s *batchStore) ExtendBatch(ctx context.Context, now time.Time, refs []store.Extension) []error {
	s.batches.Add(1)
	s.refs.Add(int32(len(refs)))
	errs := make([]error, len(refs))
	for i, r := range refs {
		errs[i] = s.testStore.Extend(ctx, r.Hold, now, r.LeaseEnd)
	}
	return errs
}

func TestHeartbeatBatchesExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &batchStore{testStore: newTestStore()}
		e, _ := newEngine(t, s, WithLease(30*time.Second), WithHeartbeat(10*time.Second))
		const n = 5
		release := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				e.Do(context.Background(), op("k"+strconv.Itoa(i), "a"), func(context.Context) ([]byte, error) {
					<-release
					return nil, nil
				})
			})
		}
		synctest.Wait()
		// The test store's lease ends are checked when a claim is taken
		// over: past the lease without the heartbeat, a duplicate would run.
		time.Sleep(95 * time.Second)
		for i := range n {
			if _, _, err := e.Do(t.Context(), op("k"+strconv.Itoa(i), "a"), nil); !errors.Is(err, ErrInFlight) {
				t.Errorf("k%d after three leases: %v, want ErrInFlight", i, err)
			}
		}
		close(release)
		wg.Wait()
		beats := s.batches.Load()
		if beats < 8 || s.refs.Load() != n*beats || s.count("extend") != int(n*beats) {
			t.Errorf("%d batch calls for %d refs (%d extends): want one call per beat for all %d claims", beats, s.refs.Load(), s.count("extend"), n)
		}
	})
}

// A lost claim in a batch is marked as when extended alone.
func TestHeartbeatBatchLostClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &batchStore{testStore: newTestStore()}
		e, ev := newEngine(t, s, WithLease(30*time.Second), WithHeartbeat(10*time.Second))
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.Do(context.Background(), op("k", "a"), func(context.Context) ([]byte, error) {
				time.Sleep(5 * time.Second)
				s.Delete(context.Background(), store.Ref{Scope: Scope("", "test", "charge"), Key: "k"}) // an operator evicts it
				time.Sleep(20 * time.Second)
				return []byte("late"), nil
			})
		}()
		<-done
		if got := ev.evs[0]; !errors.Is(got.Err, ErrLeaseLost) {
			t.Errorf("event %+v: want the lost claim", got)
		}
		// The beat marked the claim lost, so the result was not offered to
		// the store at all.
		if s.count("complete") != 0 || s.batches.Load() == 0 {
			t.Errorf("%d completes, %d batches: want the batch beat to find the claim lost", s.count("complete"), s.batches.Load())
		}
	})
}
