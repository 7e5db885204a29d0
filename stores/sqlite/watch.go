package sqlitestore

import (
	"context"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// Watch implements store.Notifier for the engine's wait mode, in this
// process: a Complete, Release, Delete, Evict or exactly-once commit
// through this Store (or its ExactlyOnce view) wakes the waiters of its
// key at once, without a statement. SQLite has no way to tell another
// process; a waiter there learns of the change by the engine's own poll
// (see idem.WithWait). After Close, Watch returns ErrClosed.
func (s *Store) Watch(ctx context.Context, r store.Ref) (<-chan struct{}, func(), error) {
	return s.watch.Watch(ctx, s.base, sqlbase.WatchKey(r))
}

// wake fires and forgets every watcher of r.
func (s *Store) wake(r store.Ref) {
	s.watch.Wake(sqlbase.WatchKey(r))
}
