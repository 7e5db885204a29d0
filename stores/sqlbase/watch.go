package sqlbase

import (
	"context"
	"sync"
	"time"
)

// WatchKey names a record a waiter watches: its scope (in the form the
// store chooses, such as the scope as stored) and its key.
type WatchKey struct{ Scope, Key string }

// WatchRow is what a poll reads of a watched record's row.
type WatchRow struct {
	Token string
	State int64 // 1 in progress, 2 completed
}

// DefaultWatchChunk is how many keys one call of a Watches' Read is given
// at most unless Chunk says otherwise.
const DefaultWatchChunk = 100

// Watches is a store's waiters, by record, for store.Notifier: a store's
// Watch method calls Watch, and its Complete, Release, Delete and Evict
// call Wake for the record they changed, which wakes the waiters in this
// process at once.
//
// With Read set, Watches also polls, for waiters of changes made by other
// processes: a poller, started by the first Watch and stopped by the
// store's Close, calls Read every Interval for the watched keys (Chunk at
// a time), and wakes the waiters of a key whose row is gone, not in
// progress, or held by another claim (token) than when the poller first
// saw it. A failing Read wakes the waiters of its keys, so that the
// engine polls by itself, and is logged once until a Read works again.
//
// Set the fields before the first Watch; the zero value, without Read,
// is ready to use. Wake-ups may be spurious.
type Watches struct {
	// Read reads the rows of keys, with one statement, and returns those
	// it found. ctx is bounded by the interval (at least a second).
	Read func(ctx context.Context, keys []WatchKey) (map[WatchKey]WatchRow, error)
	// Interval is how often the poller calls Read; it must be positive
	// when Read is set.
	Interval time.Duration
	// Chunk is how many keys one Read is given at most; 0 means
	// DefaultWatchChunk.
	Chunk int

	mu      sync.Mutex
	keys    map[WatchKey]map[*watcher]struct{} // nil until the first Watch
	kick    chan struct{}                      // tells an idle poller there is work
	failing bool                               // the last poll failed (for logging once)
}

// watcher is one Watch; its fields but ch are guarded by Watches.mu.
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

// Watch adds a waiter for k, and returns the channel closed when it should
// look again and the function that removes it. It returns ctx's error
// when ctx has ended, and the store's ErrClosed after b's Close.
func (ws *Watches) Watch(ctx context.Context, b *Base, k WatchKey) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	w := &watcher{ch: make(chan struct{})}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if b.ctx.Err() != nil {
		return nil, nil, b.errClosed
	}
	if ws.keys == nil {
		if ws.Read != nil {
			ws.kick = make(chan struct{}, 1)
			if !b.Go(func(ctx context.Context) { ws.poll(ctx, b) }) {
				return nil, nil, b.errClosed
			}
		}
		ws.keys = make(map[WatchKey]map[*watcher]struct{})
	}
	set := ws.keys[k]
	if set == nil {
		set = make(map[*watcher]struct{})
		ws.keys[k] = set
	}
	set[w] = struct{}{}
	if ws.kick != nil {
		select {
		case ws.kick <- struct{}{}:
		default:
		}
	}
	return w.ch, func() { ws.unwatch(k, w) }, nil
}

func (ws *Watches) unwatch(k WatchKey, w *watcher) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if set := ws.keys[k]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(ws.keys, k)
		}
	}
}

// Wake wakes and forgets every waiter of k in this process.
func (ws *Watches) Wake(k WatchKey) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.keys) == 0 {
		return
	}
	for w := range ws.keys[k] {
		w.fire()
	}
	delete(ws.keys, k)
}

// Len returns how many records have waiters.
func (ws *Watches) Len() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.keys)
}

// poll is the poller's loop, started by the first Watch.
func (ws *Watches) poll(ctx context.Context, b *Base) {
	t := time.NewTicker(ws.Interval)
	defer t.Stop()
	for {
		ws.mu.Lock()
		idle := len(ws.keys) == 0
		ws.mu.Unlock()
		if idle {
			select {
			case <-ctx.Done():
				return
			case <-ws.kick:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ws.PollOnce(b)
	}
}

// PollOnce reads every watched key once, as the poller does every
// Interval, and wakes the waiters whose key changed. Read must be set.
// Tests call it to poll without waiting.
func (ws *Watches) PollOnce(b *Base) {
	ctx := b.ctx
	chunkSize := ws.Chunk
	if chunkSize <= 0 {
		chunkSize = DefaultWatchChunk
	}
	ws.mu.Lock()
	keys := make([]WatchKey, 0, len(ws.keys))
	for k := range ws.keys {
		keys = append(keys, k)
	}
	ws.mu.Unlock()
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), chunkSize)]
		keys = keys[len(chunk):]
		rctx, cancel := context.WithTimeout(ctx, max(ws.Interval, time.Second))
		rows, err := ws.Read(rctx, chunk)
		cancel()
		ws.mu.Lock()
		if err != nil {
			if !ws.failing && ctx.Err() == nil {
				b.opts.Logger.Warn(b.name+": watch poll failed; waiters poll until it works again", "table", b.opts.Table, "err", err)
			}
			ws.failing = true
		} else if ws.failing {
			b.opts.Logger.Info(b.name+": watch poll works again", "table", b.opts.Table)
			ws.failing = false
		}
		for _, k := range chunk {
			set := ws.keys[k]
			r, ok := rows[k]
			for w := range set {
				switch {
				case err != nil, !ok, r.State != 1:
					w.fire()
				case !w.seen:
					w.seen, w.token = true, r.Token
				case r.Token != w.token:
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
