package pgxstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/puddle/v2"
)

// Listener timing. Variables so tests can shorten them.
var (
	// listenerPing is how long the listener waits for a notification before
	// it pings the server, so a dead connection is noticed even when the
	// operating system has not noticed yet.
	listenerPing = 30 * time.Second
	// listenerPingTimeout bounds that ping and the LISTEN statement.
	listenerPingTimeout = 5 * time.Second
	// listenerBackoff and listenerMaxBackoff bound the reconnect delay,
	// which doubles after each failure and is jittered.
	listenerBackoff    = 100 * time.Millisecond
	listenerMaxBackoff = 10 * time.Second
	// markTimeout bounds the statement with which Watch marks a record as
	// waited for.
	markTimeout = time.Second
)

// Watch implements store.Notifier.
//
// The first Watch starts the store's listener: one connection, taken from
// a *pgxpool.Pool with Acquire and Hijack (so it no longer counts against
// the pool's MaxConns) or dialled with a *pgx.Conn's config, that runs
// LISTEN on the store's channel and fans notifications out to every
// watcher in the process. Watch then marks the record as waited for (one
// statement, only for a record in progress, only the first time, bounded
// by ctx and a second); Complete, Release, Delete and Evict notify, in the
// same statement that changes the row, only for a marked record, and
// PostgreSQL delivers the notification when that statement commits. See
// markSQL for why no wake-up is lost; a failed mark only costs one, and
// the engine polls as well. A record that an exactly-once transaction
// holds is not marked, without waiting for it: its waiters poll, and those
// of the process whose Store commits it are woken in-process, as every
// statement of a Store that ends a claim wakes that Store's own watchers
// of the key.
//
// When the listener's connection breaks, every watcher is woken (so the
// engine polls) and the listener reconnects with jittered exponential
// backoff. Watch never waits for the listener: while it is down (or still
// connecting, on the first Watch) the watch is registered at once and
// woken when the listener is up, since notifications may have been missed
// meanwhile; the engine polls as well.
//
// When the pool the store runs on has been closed (without Close), the
// listener stops instead of retrying; watches then never fire and the
// engine polls.
//
// With WithNotify(false), or on a DB that is a pgx.Tx, Watch returns a
// channel that never fires. After Close it returns ErrClosed.
func (s *Store) Watch(ctx context.Context, r store.Ref) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	l, err := s.startListener()
	if err != nil {
		return nil, nil, err
	}
	if l == nil {
		return make(chan struct{}), func() {}, nil
	}
	w := &watcher{ch: make(chan struct{})}
	p := payload(r)
	l.add(p, w)
	// While the listener is down the watch is woken when it is back up
	// (notifications may have been missed); the engine then watches again
	// and the mark is made then.
	if l.isUp() {
		mctx, cancel := context.WithTimeout(ctx, markTimeout)
		var err error
		mark := s.q.markSync
		if s.ownTx() {
			mark = s.q.mark
		}
		// Tried again at once: after an outage the pool may hand out a
		// connection that turns out dead, and drops it.
		for range 3 {
			if _, err = s.exec(mctx, mark, []byte(r.Scope), r.Key); err == nil || mctx.Err() != nil {
				break
			}
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Debug("pgxstore: could not mark a record as waited for; the waiter polls", "table", s.table, "err", err)
		}
	}
	return w.ch, func() { l.remove(p, w) }, nil
}

// wakeLocal wakes this process's watchers of the record r names, after a
// statement of this Store ended the claim: a waiter in the same process is
// then woken even when its mark was skipped (a live exactly-once
// transaction held the row) or the record was never marked. Waiters in
// other processes rely on the mark and the notification, or poll.
func (s *Store) wakeLocal(r store.Ref) {
	s.lmu.Lock()
	l := s.listener
	s.lmu.Unlock()
	if l != nil {
		l.wake(payload(r))
	}
}

type watcher struct {
	ch    chan struct{}
	fired bool // guarded by listener.mu
}

type listener struct {
	s *Store

	mu       sync.Mutex
	up       bool
	watchers map[string]map[*watcher]struct{}
	done     chan struct{} // closed when run returns
}

// startListener returns the store's listener, starting it on first use;
// nil when the store cannot listen; ErrClosed after Close.
func (s *Store) startListener() (*listener, error) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.base.Context().Err() != nil {
		return nil, ErrClosed
	}
	if s.listener != nil {
		return s.listener, nil
	}
	if !s.cfg.notify {
		return nil, nil
	}
	connect := s.listenConnector()
	if connect == nil {
		return nil, nil
	}
	l := &listener{s: s, watchers: make(map[string]map[*watcher]struct{}), done: make(chan struct{})}
	if !s.base.Go(func(ctx context.Context) { l.run(ctx, connect) }) {
		return nil, ErrClosed
	}
	s.listener = l
	return l, nil
}

// listenConnector returns how to open the listener's own connection, or
// nil when db offers no way to.
func (s *Store) listenConnector() func(context.Context) (*pgx.Conn, error) {
	if p, ok := s.pool(); ok {
		return func(ctx context.Context) (*pgx.Conn, error) {
			c, err := p.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return c.Hijack(), nil
		}
	}
	if c, ok := s.db.(*pgx.Conn); ok {
		cfg := c.Config()
		return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cfg) }
	}
	return nil
}

// isUp reports whether the listener is connected and listening.
func (l *listener) isUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up
}

func (l *listener) add(p string, w *watcher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := l.watchers[p]
	if set == nil {
		set = make(map[*watcher]struct{})
		l.watchers[p] = set
	}
	set[w] = struct{}{}
}

func (l *listener) remove(p string, w *watcher) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if set := l.watchers[p]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(l.watchers, p)
		}
	}
}

// wake fires the watchers of one payload.
func (l *listener) wake(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.watchers[p] {
		w.fire()
	}
	delete(l.watchers, p)
}

// setUp records a state change and wakes every watcher: going down, so
// they poll; coming up, because they may have missed a notification.
func (l *listener) setUp(up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up == up {
		return
	}
	l.up = up
	for p, set := range l.watchers {
		for w := range set {
			w.fire()
		}
		delete(l.watchers, p)
	}
}

func (w *watcher) fire() {
	if !w.fired {
		w.fired = true
		close(w.ch)
	}
}

func (l *listener) run(ctx context.Context, connect func(context.Context) (*pgx.Conn, error)) {
	defer close(l.done)
	backoff := listenerBackoff
	for {
		err := l.session(ctx, connect, &backoff)
		l.setUp(false)
		if ctx.Err() != nil {
			return
		}
		if poolClosed(err) {
			// The application closed the pool without closing the store:
			// no connection will ever come from it again.
			l.s.cfg.Logger.Debug("pgxstore: listener stopped: the pool is closed", "table", l.s.table)
			return
		}
		l.s.cfg.Logger.Warn("pgxstore: listener disconnected; waiters poll until it is back",
			"table", l.s.table, "retry_in", backoff, "err", err)
		d := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenerMaxBackoff)
	}
}

// session connects, listens and dispatches notifications until the
// connection fails or ctx is done.
func (l *listener) session(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), backoff *time.Duration) error {
	cctx, cancel := context.WithTimeout(ctx, listenerPingTimeout)
	conn, err := connect(cctx)
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{l.s.channel}.Sanitize())
	}
	cancel()
	if err != nil {
		if conn != nil {
			closeConn(conn)
		}
		return err
	}
	defer closeConn(conn)
	*backoff = listenerBackoff
	l.setUp(true)
	for {
		wctx, cancel := context.WithTimeout(ctx, listenerPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if n.Channel == l.s.channel {
				l.wake(n.Payload)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, listenerPingTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// poolClosed reports whether err comes from acquiring a connection from a
// closed *pgxpool.Pool.
func poolClosed(err error) bool {
	return errors.Is(err, puddle.ErrClosedPool)
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(ctx) //nolint:errcheck // the connection is being dropped
}
