package sqlitestore

import (
	"context"
	"sync"
)

// Watch implements idem.Notifier for the engine's wait mode, in this
// process: a Complete, Release, Delete, Evict or exactly-once commit
// through this Store (or its ExactlyOnce view) wakes the waiters of its
// key at once, without a statement. SQLite has no way to tell another
// process; a waiter there learns of the change by the engine's own poll
// (see idem.WithWait). After Close, Watch returns ErrClosed.
func (s *Store) Watch(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if s.ctx.Err() != nil {
		return nil, nil, ErrClosed
	}
	w := &watcher{ch: make(chan struct{})}
	k := watchKey{scope, key}
	ws := &s.watch
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.keys == nil {
		ws.keys = make(map[watchKey]map[*watcher]struct{})
	}
	set := ws.keys[k]
	if set == nil {
		set = make(map[*watcher]struct{})
		ws.keys[k] = set
	}
	set[w] = struct{}{}
	return w.ch, func() { s.unwatch(k, w) }, nil
}

// watchSet is the store's watches, guarded by mu.
type watchSet struct {
	mu   sync.Mutex
	keys map[watchKey]map[*watcher]struct{}
}

type watchKey struct{ scope, key string }

// watcher is one Watch; fired is guarded by watchSet.mu.
type watcher struct {
	ch    chan struct{}
	fired bool
}

func (w *watcher) fire() {
	if !w.fired {
		w.fired = true
		close(w.ch)
	}
}

func (s *Store) unwatch(k watchKey, w *watcher) {
	ws := &s.watch
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if set := ws.keys[k]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(ws.keys, k)
		}
	}
}

// wake fires and forgets every watcher of (scope, key).
func (s *Store) wake(scope, key string) {
	ws := &s.watch
	ws.mu.Lock()
	defer ws.mu.Unlock()
	k := watchKey{scope, key}
	for w := range ws.keys[k] {
		w.fire()
	}
	delete(ws.keys, k)
}
