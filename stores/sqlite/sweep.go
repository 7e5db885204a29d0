package sqlitestore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem/stores/sqlbase"
)

// DeleteExpired implements store.ExpiredDeleter. It removes completed
// records from their expiry, and in-progress ones a lease later (at
// LeaseEnd + (LeaseEnd - CreatedAt)), so that a late completion of a
// claim nobody took over still lands. It works in batches of at most 1000
// rows, each one statement under the write lock, which it gives up
// between batches so that requests are not held up by a large backlog. It
// returns how many rows it removed.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time) (int, error) {
	nowUS := sqlbase.FloorMicro(now).UnixMicro()
	total := 0
	for {
		n, err := s.write(ctx, s.q.expired, nowUS, sweepBatch)
		total += int(n)
		if err != nil {
			return total, fmt.Errorf("sqlitestore: delete expired: %w", err)
		}
		if n < sweepBatch {
			return total, nil
		}
	}
}

// Sweep calls DeleteExpired with time.Now every interval until ctx is
// cancelled or the store is closed, logging errors and carrying on. It
// returns ctx.Err() or ErrClosed. New starts it in the background every
// DefaultSweepInterval unless WithSweepInterval says otherwise; call it
// yourself to tie the sweeper to your own context.
func (s *Store) Sweep(ctx context.Context, interval time.Duration) error {
	return s.base.Sweep(ctx, interval, func(ctx context.Context) (slog.Attr, error) {
		n, err := s.DeleteExpired(ctx, time.Now())
		return slog.Int("deleted", n), err
	})
}
