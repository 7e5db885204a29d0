package mysqlstore

import (
	"context"
	"sync"
	"time"
)

// watchChunk is how many keys one poll statement reads at most.
const watchChunk = 100

// Watch implements idem.Notifier for the engine's wait mode. MySQL has no
// LISTEN/NOTIFY, so a waiter is woken in one of two ways:
//
//   - A Complete, Release or Delete through this Store wakes the waiters of
//     its key in this process at once, without a statement.
//   - One poller per Store reads the state of every watched key with one
//     consistent read per 100 keys, every watch interval (default 100ms),
//     and wakes the waiters of a key whose row is gone, completed, or held
//     by another claim than when the poller first saw it. That is how a
//     waiter learns about another process's completion: within one
//     interval plus one query. An in-progress record whose lease ended
//     does not wake it: an exactly-once transaction may hold it past its
//     lease (the waiter would only find it held again), and a waiter
//     polls by itself as well, so it takes an abandoned claim over
//     within its own poll interval.
//
// The poller runs only while there are watches, and stops on Close; a
// failing poll wakes the waiters of its keys (so the engine polls itself)
// and is retried on the next tick. Wake-ups may be spurious: a key with no
// record at all is reported at once. After Close, Watch returns ErrClosed.
func (s *Store) Watch(ctx context.Context, scope, key string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	w := &watcher{ch: make(chan struct{})}
	k := watchKey{scopeKey(scope), key}
	ws := &s.watch
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if s.ctx.Err() != nil {
		return nil, nil, ErrClosed
	}
	if ws.keys == nil {
		ws.keys = make(map[watchKey]map[*watcher]struct{})
		ws.kick = make(chan struct{}, 1)
		s.wg.Go(s.poll)
	}
	set := ws.keys[k]
	if set == nil {
		set = make(map[*watcher]struct{})
		ws.keys[k] = set
	}
	set[w] = struct{}{}
	select {
	case ws.kick <- struct{}{}:
	default:
	}
	return w.ch, func() { s.unwatch(k, w) }, nil
}

// watchSet is the store's watches, guarded by mu.
type watchSet struct {
	mu      sync.Mutex
	keys    map[watchKey]map[*watcher]struct{} // nil until the first Watch
	kick    chan struct{}                      // tells an idle poller there is work
	failing bool                               // the last poll failed (for logging once)
}

type watchKey struct{ scope, key string } // scope as stored (see scopeKey)

type watcher struct {
	ch    chan struct{}
	fired bool
	seen  bool   // the poller has read the row since the watch began
	token string // the claim's token the poller first saw
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

// wake fires the waiters of (scope, key) in this process.
func (s *Store) wake(scope, key string) {
	ws := &s.watch
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.keys) == 0 {
		return
	}
	k := watchKey{scopeKey(scope), key}
	for w := range ws.keys[k] {
		w.fire()
	}
	delete(ws.keys, k)
}

// poll is the poller's loop, started by the first Watch.
func (s *Store) poll() {
	t := time.NewTicker(s.cfg.watchInterval)
	defer t.Stop()
	for {
		s.watch.mu.Lock()
		idle := len(s.watch.keys) == 0
		s.watch.mu.Unlock()
		if idle {
			select {
			case <-s.ctx.Done():
				return
			case <-s.watch.kick:
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.pollOnce()
	}
}

// rowState is what a poll reads of a watched key.
type rowState struct {
	token string
	state int64
}

// pollOnce reads every watched key once and wakes the waiters whose key
// changed.
func (s *Store) pollOnce() {
	ws := &s.watch
	ws.mu.Lock()
	keys := make([]watchKey, 0, len(ws.keys))
	for k := range ws.keys {
		keys = append(keys, k)
	}
	ws.mu.Unlock()
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), watchChunk)]
		keys = keys[len(chunk):]
		rows, err := s.readWatched(chunk)
		ws.mu.Lock()
		if err != nil {
			if !ws.failing && s.ctx.Err() == nil {
				s.cfg.logger.Warn("mysqlstore: watch poll failed; waiters poll until it works again", "table", s.table, "err", err)
			}
			ws.failing = true
		} else if ws.failing {
			s.cfg.logger.Info("mysqlstore: watch poll works again", "table", s.table)
			ws.failing = false
		}
		for _, k := range chunk {
			set := ws.keys[k]
			r, ok := rows[k]
			for w := range set {
				switch {
				case err != nil, !ok, r.state != 1:
					w.fire()
				case !w.seen:
					w.seen, w.token = true, r.token
				case r.token != w.token:
					w.fire()
				default:
					continue
				}
				if w.fired {
					delete(set, w)
				}
			}
			if set != nil && len(set) == 0 {
				delete(ws.keys, k)
			}
		}
		ws.mu.Unlock()
	}
}

// readWatched reads the rows of keys with one consistent read.
func (s *Store) readWatched(keys []watchKey) (map[watchKey]rowState, error) {
	ctx, cancel := context.WithTimeout(s.ctx, max(s.cfg.watchInterval, time.Second))
	defer cancel()
	scopes := make([]string, len(keys))
	names := make([]string, len(keys))
	for i, k := range keys {
		scopes[i], names[i] = k.scope, k.key
	}
	rows, err := s.db.QueryContext(ctx, s.q.watch.render(pairList(scopes, names)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[watchKey]rowState, len(keys))
	for rows.Next() {
		var scope, key, token []byte
		var r rowState
		if err := rows.Scan(&scope, &key, &token, &r.state); err != nil {
			return nil, err
		}
		r.token = string(token)
		out[watchKey{string(scope), string(key)}] = r
	}
	return out, rows.Err()
}
