package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// Errors the store returns besides those of package store. Callers test
// with errors.Is.
var (
	// ErrBadOption wraps idem.ErrBadOption. It is wrapped by the error New
	// returns for a bad argument or option (a nil *sql.DB, a bad table
	// name, a negative interval, a database that cannot run in WAL mode or
	// has no busy timeout), and by the errors of Schema and Open for a bad
	// table name or path.
	ErrBadOption = fmt.Errorf("sqlitestore: %w", idem.ErrBadOption)
	// ErrClosed means Watch or Sweep was called after Close.
	ErrClosed = errors.New("sqlitestore: store closed")
)

// Defaults of the options.
const (
	// DefaultSweepInterval is how often the background sweeper deletes
	// expired records unless WithSweepInterval says otherwise.
	DefaultSweepInterval = time.Minute
)

// maxClaimAttempts bounds how often Claim starts over after losing a race:
// each new attempt needs another writer to change the row between Claim's
// read and its write.
const maxClaimAttempts = 5

// sweepBatch is how many rows one DeleteExpired statement removes at most:
// the write lock is given up between batches, so requests go on.
const sweepBatch = 1000

// Option configures a Store. A nil Option is ignored.
type Option func(*sqlbase.Options)

// WithTable sets the table the store uses. The default is DefaultTable
// ("idempotency_keys"). The name must match ^[A-Za-z_][A-Za-z0-9_]{0,63}$
// and not start with "sqlite_"; it is always double-quoted.
func WithTable(name string) Option {
	return func(o *sqlbase.Options) { o.Table = name }
}

// WithSweepInterval sets how often the background sweeper deletes expired
// records (DeleteExpired with time.Now). The default is
// DefaultSweepInterval (one minute); 0 runs no sweeper (call
// DeleteExpired or Sweep yourself). Expired records are never replayed
// either way; sweeping only reclaims space. Close stops the sweeper.
func WithSweepInterval(d time.Duration) Option {
	return func(o *sqlbase.Options) { o.SweepInterval = d }
}

// WithLogger sets where the background sweeper reports errors it cannot
// return. The default is slog.Default(); nil discards them.
func WithLogger(l *slog.Logger) Option {
	return func(o *sqlbase.Options) { o.Logger = l }
}

// Store is a store.Store in a table of an SQLite database. It implements
// store.Getter, store.Deleter, store.ExpiredDeleter, store.Extender,
// store.Evicter and store.Notifier; ExactlyOnce returns a view of it that
// also implements store.TxBeginner.
//
// Reads (a replay, a 409, a 422, Get) run on any pooled connection and
// never wait: in WAL mode readers do not block the writer nor it them.
// Writes (a new claim, Complete, Release, Extend, Delete, Evict, a sweep
// batch, an exactly-once transaction) take the store's write lock first,
// one at a time, so they never meet each other at SQLite's lock and never
// see SQLITE_BUSY; waiting for the write lock honours ctx. Writes that
// queue for the lock together commit together (group commit): one
// transaction, one fsync.
type Store struct {
	db    *sql.DB
	table string
	q     queries

	sem   chan struct{} // the store's write lock; see lock
	batch batch         // writes waiting for it; see write

	heldMu sync.Mutex
	held   map[store.Ref]struct{} // records an exactly-once transaction holds

	base  *sqlbase.Base   // options and sweeper
	watch sqlbase.Watches // this process's waiters, by scope and key
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.Getter         = (*Store)(nil)
	_ store.Deleter        = (*Store)(nil)
	_ store.ExpiredDeleter = (*Store)(nil)
	_ store.Extender       = (*Store)(nil)
	_ store.Evicter        = (*Store)(nil)
	_ store.Notifier       = (*Store)(nil)
)

// New returns a Store that keeps its records in db, best opened with Open.
// New checks, on one connection, that the database runs in WAL mode (it
// switches a file database in another mode to WAL, which is persistent)
// and that the connection has a busy timeout; otherwise it fails with an
// error wrapping ErrBadOption, as it does for a bad argument or option.
// It does not create the table: call CreateSchema or run Schema's SQL.
// The background sweeper starts at once; Close stops it. Close does not
// close db.
//
//	db, _ := sqlitestore.Open("app.db")
//	store, err := sqlitestore.New(db)
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrBadOption)
	}
	o := sqlbase.Options{Table: DefaultTable, SweepInterval: DefaultSweepInterval, Logger: slog.Default()}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := o.Check(ErrBadOption, maxTable); err != nil {
		return nil, err
	}
	if err := validTable(o.Table); err != nil {
		return nil, err
	}
	if err := checkDB(db); err != nil {
		return nil, err
	}
	s := &Store{db: db, table: o.Table, q: newQueries(o.Table),
		sem: make(chan struct{}, 1), held: map[store.Ref]struct{}{},
		base: sqlbase.NewBase("sqlitestore", o, ErrClosed)}
	s.base.StartSweeper(s.Sweep)
	return s, nil
}

// checkDB checks that the connection has a busy timeout and puts the
// database in WAL mode if it is not, within 5 seconds.
func checkDB(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var busy int
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return fmt.Errorf("sqlitestore: reading busy_timeout: %w", err)
	}
	if busy <= 0 {
		return fmt.Errorf("%w: the connection has no busy timeout, so a write would fail at once with SQLITE_BUSY when another connection writes: open the DB with Open, or add _pragma=busy_timeout(10000) to the DSN", ErrBadOption)
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("sqlitestore: reading journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		if err := db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
			return fmt.Errorf("sqlitestore: setting journal_mode to WAL: %w", err)
		}
		if !strings.EqualFold(mode, "wal") {
			return fmt.Errorf("%w: the database cannot run in WAL mode (journal_mode is %s; an in-memory database cannot): open a file, with Open", ErrBadOption, mode)
		}
	}
	return nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// Close stops the background sweeper and waits for it. It does not close
// the DB. The store's other methods keep working; Watch and Sweep return
// ErrClosed. Close is safe to call more than once.
func (s *Store) Close() error {
	s.base.Close(nil)
	return nil
}

// lock takes the store's write lock, waiting at most until ctx ends. One
// writer at a time is SQLite's rule; keeping it here means the store's
// writers queue in Go, in order, instead of polling SQLite's lock.
func (s *Store) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the write lock: %w", context.Cause(ctx))
	}
}

func (s *Store) unlock() { <-s.sem }

// Claim implements store.Store. It reads the row first, without the write
// lock: a live record (a replay, a 409, a 422) is answered from that read,
// writing nothing, as is an in-progress record whose lease has ended but
// that a live exactly-once transaction of this store holds. Otherwise it
// writes one INSERT ... ON CONFLICT DO UPDATE under the write lock that
// takes the key only if it is still free or takeable. When that changes no
// row, another claim got there between the read and the write, and Claim
// starts over: its read returns the winner's record.
func (s *Store) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	scope, key := []byte(c.Scope), []byte(c.Key)
	now := sqlbase.FloorMicro(c.Now)
	for range maxClaimAttempts {
		rec, found, err := s.read(ctx, scope, key)
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("sqlitestore: claim: %w", err)
		}
		if found && (!rec.Takeable(now) || rec.State == store.InProgress && s.isHeld(c.Ref())) {
			return store.ClaimResult{Existing: &rec}, nil
		}
		n, err := s.write(ctx, s.q.claim, scope, key, []byte(c.Fingerprint), []byte(c.Token),
			now.UnixMicro(), sqlbase.CeilMicro(c.LeaseEnd).UnixMicro())
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("sqlitestore: claim: %w", err)
		}
		if n == 1 {
			return store.ClaimResult{Acquired: true}, nil
		}
	}
	return store.ClaimResult{}, fmt.Errorf("sqlitestore: claim: still racing with concurrent writers after %d attempts", maxClaimAttempts)
}

// read returns the row of (scope, key), expired or not.
func (s *Store) read(ctx context.Context, scope, key []byte) (store.Record, bool, error) {
	var r sqlbase.MicroRow
	found, err := r.Scan(s.db.QueryRowContext(ctx, s.q.read, scope, key))
	if err != nil || !found {
		return store.Record{}, false, err
	}
	rec, err := r.Record()
	if err != nil {
		return store.Record{}, false, fmt.Errorf("key %q: %w", key, err)
	}
	return rec, true, nil
}

// Complete implements store.Store in one statement under the write lock,
// and wakes the key's watchers.
func (s *Store) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	args, err := completion(h, c)
	if err != nil {
		return err
	}
	n, err := s.write(ctx, s.q.complete, args...)
	if err := sqlbase.WriteResult("sqlitestore", "complete", n, err); err != nil {
		return err
	}
	s.wake(h.Ref)
	return nil
}

// completion returns the parameters of the complete statement for c: the
// result's Head in the headers column, its Body (NULL when omitted), and
// a NULL status, which only rows written before results were opaque have.
// It refuses an empty Head, which would read back as a corrupt record.
func completion(h store.Hold, c store.Completion) ([]any, error) {
	res := c.Result
	if len(res.Head) == 0 {
		return nil, errors.New("sqlitestore: complete: the result has no head")
	}
	var body []byte // NULL for nil
	if !res.BodyOmitted && res.Body != nil {
		body = res.Body
		if len(body) == 0 {
			body = []byte{} // an empty, not a NULL, body
		}
	}
	return []any{[]byte(h.Scope), []byte(h.Key), []byte(h.Token), res.Head, body,
		res.BodyOmitted, sqlbase.CeilMicro(c.ExpiresAt).UnixMicro()}, nil
}

// Release implements store.Store in one statement under the write lock.
func (s *Store) Release(ctx context.Context, h store.Hold) error {
	n, err := s.write(ctx, s.q.release, []byte(h.Scope), []byte(h.Key), []byte(h.Token))
	if err := sqlbase.WriteResult("sqlitestore", "release", n, err); err != nil {
		return err
	}
	s.wake(h.Ref)
	return nil
}

// Get implements store.Getter in one read.
func (s *Store) Get(ctx context.Context, ref store.Ref, now time.Time) (store.Record, bool, error) {
	var r sqlbase.MicroRow
	found, err := r.Scan(s.db.QueryRowContext(ctx, s.q.get, []byte(ref.Scope), []byte(ref.Key), sqlbase.FloorMicro(now).UnixMicro()))
	if err != nil {
		return store.Record{}, false, fmt.Errorf("sqlitestore: get: %w", err)
	}
	if !found {
		return store.Record{}, false, nil
	}
	rec, err := r.Record()
	if err != nil {
		return store.Record{}, false, fmt.Errorf("sqlitestore: get, key %q: %w", ref.Key, err)
	}
	return rec, true, nil
}

// Delete implements store.Deleter in one statement under the write lock.
// It reports whether a row was there, expired or not, and wakes watchers
// of the key.
func (s *Store) Delete(ctx context.Context, ref store.Ref) (bool, error) {
	n, err := s.write(ctx, s.q.delete, []byte(ref.Scope), []byte(ref.Key))
	if err != nil {
		return false, fmt.Errorf("sqlitestore: delete: %w", err)
	}
	if n > 0 {
		s.wake(ref)
	}
	return n > 0, nil
}

// Evict implements store.Evicter in one statement under the write lock.
func (s *Store) Evict(ctx context.Context, h store.Hold) error {
	n, err := s.write(ctx, s.q.evict, []byte(h.Scope), []byte(h.Key), []byte(h.Token))
	if err := sqlbase.WriteResult("sqlitestore", "evict", n, err); err != nil {
		return err
	}
	s.wake(h.Ref)
	return nil
}

// Extend implements store.Extender in one statement under the write lock.
// Like Complete, it moves the lease of a claim its token still holds, even
// once the lease has ended.
func (s *Store) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	n, err := s.write(ctx, s.q.extend, []byte(h.Scope), []byte(h.Key), []byte(h.Token), sqlbase.CeilMicro(leaseEnd).UnixMicro())
	if err := sqlbase.WriteResult("sqlitestore", "extend", n, err); err != nil {
		return err
	}
	return nil
}

// isHeld reports whether a live exactly-once transaction holds the record.
func (s *Store) isHeld(r store.Ref) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	_, ok := s.held[r]
	return ok
}

func (s *Store) setHeld(r store.Ref, on bool) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if on {
		s.held[r] = struct{}{}
	} else {
		delete(s.held, r)
	}
}
