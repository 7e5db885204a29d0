package pgxstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Errors the store returns besides those of package store. Callers test
// with errors.Is.
var (
	// ErrBadOption is wrapped by the error New (or Schema) returns for an
	// option it cannot use: a table name that does not match
	// ^[A-Za-z_][A-Za-z0-9_]{0,62}$, a negative sweep interval. It wraps idem.ErrBadOption.
	ErrBadOption = fmt.Errorf("pgxstore: %w", idem.ErrBadOption)
	// ErrClosed means Watch or Sweep was called after Close.
	ErrClosed = errors.New("pgxstore: store closed")
	// ErrTxManaged is returned when a handler calls Commit on the
	// transaction it got from Tx: the engine commits it with the record.
	ErrTxManaged = errors.New("pgxstore: the transaction is committed by the idempotency engine, not the handler")
)

// maxClaimAttempts bounds how often Claim re-runs its statement after
// losing a race (see claimSQL). A re-run needs a concurrent writer to
// change the row between one statement's snapshot and its write, so a
// second attempt practically always settles it.
const maxClaimAttempts = 5

// claimRetries counts Claim statements re-run after a lost race, for tests.
var claimRetries atomic.Int64

// DefaultSweepInterval is how often the background sweeper runs unless
// WithSweepInterval says otherwise; each run reads sweepPages pages.
const DefaultSweepInterval = 10 * time.Second

// sweepPages is how many of the table's pages (8 KiB each) one sweep
// statement reads, so a large backlog never becomes one long transaction.
const sweepPages = 1024

// DB is what a Store runs its statements on. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it.
//
// Use a *pgxpool.Pool in production: it is safe for concurrent use, each
// statement commits on its own, and the store's listener for Watch takes a
// dedicated connection from it. A *pgx.Conn is not safe for concurrent use,
// so a Store on one may only be used by one goroutine at a time (its
// listener dials a second connection with the same config). A pgx.Tx runs
// every statement inside that transaction and nothing commits until its
// owner commits: useful in tests, never for serving traffic; Watch on such
// a store never fires (the engine polls).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Option configures a Store.
type Option func(*config)

type config struct {
	sqlbase.Options
	sweepSet bool // WithSweepInterval was given
	notify   bool
	async    bool // WithAsyncClaims
}

// WithTable sets the table the store uses. The default is DefaultTable
// ("idempotency_keys"). The name must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$,
// otherwise New returns an error wrapping ErrBadOption; it is always
// quoted, so it is case-sensitive. Put the table in another schema with the
// connection's search_path.
func WithTable(name string) Option {
	return func(c *config) { c.Table = name }
}

// WithSweepInterval sets how often the background sweeper runs until
// Close; 0 runs none. The default is DefaultSweepInterval (10s) on a
// *pgxpool.Pool, and no sweeper on a *pgx.Conn or pgx.Tx, which are not
// safe for concurrent use. Each run deletes the expired records in the
// next 1024 pages (8 MiB) of the table, going round it, so a record is
// gone at most one full round after it expires (see "Expiry" in the
// package doc). Expired records are never replayed either way; sweeping
// only reclaims space.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.SweepInterval, c.sweepSet = d, true }
}

// WithNotify turns notifications for the engine's wait mode on or off. It
// is on by default: Watch listens on one dedicated connection per Store
// and marks the record it waits for, and Complete, Release and Delete call
// pg_notify in the same statement for a marked record only, so requests
// nobody waits for cost nothing more (see "Notifications" in the package
// doc). With notifications off, Watch returns a channel that never fires
// and the engine falls back to polling.
func WithNotify(enabled bool) Option {
	return func(c *config) { c.notify = enabled }
}

// WithAsyncClaims makes a plain store's claims commit without waiting for
// their WAL flush (synchronous_commit off for the claim's statement
// alone), so that a first request flushes WAL once, at its completion,
// not twice: WAL is flushed in order, so the completion's flush makes the
// claim durable too. It is off by default, because it changes what a
// crash of the database server allows: a claim taken within about three
// wal_writer_delay (600 ms by default) before the crash may be lost, and
// a retry after the server is back then runs the handler again even though
// the first run may still be going on (on a live instance that outlived
// the database), or, when the first run's completion failed in the crash
// and was being retried, after it finished: that completion then finds
// no claim and never lands. Replays and conflicts are unaffected. With
// synchronous replication the standby does not wait for such a claim: a
// failover loses the claims its replay lag had not reached, and, while
// the synchronous standby is unreachable, every claim taken meanwhile
// (completions wait for it; claims do not). It takes effect on a
// *pgxpool.Pool and on a *pgx.Conn outside a transaction; on any other DB
// (a pgx.Tx, a wrapper) claims flush as usual, since they may run in a
// transaction the caller began, whose commit must keep its durability.
// Exactly-once mode (ExactlyOnce) always claims so, on the same DBs, since
// there the crash also ends the handler's transaction. See "Durability"
// in README.
func WithAsyncClaims() Option {
	return func(c *config) { c.async = true }
}

// WithLogger sets where the background sweeper and the listener report
// errors they cannot return. The default is slog.Default(); nil discards
// them.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.Logger = l }
}

// Store is a store.Store on PostgreSQL. It implements store.Getter,
// store.Deleter, store.ExpiredDeleter, store.Extender, store.BatchExtender,
// store.Evicter, store.Clock and store.Notifier; ExactlyOnce returns a view
// of it that also implements store.TxBeginner.
//
// A completed record keeps the engine's store.Result byte for byte: its
// Head in the headers column, its Body in body, BodyOmitted in
// body_omitted, and NULL in status. A row completed by an earlier version
// of this package, with an HTTP status in status and that version's header
// bytes in headers, reads back with store.LegacyHead as its Head, and the
// engine replays it as before.
//
// Claim, Complete, Release, Get, Delete, Evict, Extend and Now each run one
// statement, which commits on its own (Claim runs its statement a second
// time only after losing a race with a concurrent writer, or to look again
// at a claim a live transaction holds; DeleteExpired runs one per 1024
// pages of the table). In plain mode no transaction or row lock is held
// while a handler runs. A replay, a 409 and a 422 read the row without
// locking or writing it.
type Store struct {
	db      DB
	table   string
	channel string
	q       queries
	cfg     config
	batch   batcher     // db, when it can send a batch that begins a transaction
	strict  atomic.Bool // a session defaults to an isolation stricter than READ COMMITTED

	base *sqlbase.Base // options, sweeper and listener's lifetime

	lmu      sync.Mutex // guards listener and orders starting it with Close
	listener *listener  // started by the first Watch
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.Getter         = (*Store)(nil)
	_ store.Deleter        = (*Store)(nil)
	_ store.ExpiredDeleter = (*Store)(nil)
	_ store.Extender       = (*Store)(nil)
	_ store.BatchExtender  = (*Store)(nil)
	_ store.Evicter        = (*Store)(nil)
	_ store.Clock          = (*Store)(nil)
	_ store.Notifier       = (*Store)(nil)
)

// New returns a Store that keeps its records in db. It does not touch the
// database: create the table with CreateSchema or with the SQL from Schema.
// New fails only on an invalid option. Call Close to stop the sweeper and
// the listener; Close does not close db.
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("pgxstore: nil DB")
	}
	cfg := config{Options: sqlbase.Options{Table: DefaultTable, Logger: slog.Default()}, notify: true}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.Check(ErrBadOption, maxTable); err != nil {
		return nil, err
	}
	if !cfg.sweepSet {
		switch db.(type) {
		case *pgx.Conn, pgx.Tx:
		default:
			cfg.SweepInterval = DefaultSweepInterval
		}
	}
	s := &Store{
		db:      db,
		table:   cfg.Table,
		channel: channelName(cfg.Table),
		q:       newQueries(cfg.Table),
		cfg:     cfg,
		batch:   batcherOf(db),
		base:    sqlbase.NewBase("pgxstore", cfg.Options, ErrClosed),
	}
	s.base.StartSweeper(s.Sweep)
	return s, nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// Close stops the background sweeper and the listener and waits for them.
// It does not close the DB. The store's other methods keep working; Watch
// and Sweep return ErrClosed. Close is safe to call more than once.
func (s *Store) Close() error {
	s.base.Close(nil)
	return nil
}

// Claim implements store.Store in one statement (see the package doc for
// the SQL and why it is race-safe and writes nothing unless it takes the
// key; with WithAsyncClaims, without waiting for its WAL flush). An
// in-progress record whose lease has ended is not taken over
// while a live exactly-once transaction holds it: Claim returns it, in
// progress, after a second look, without waiting for that transaction.
func (s *Store) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if s.cfg.async && s.ownTx() {
		return s.claim(ctx, s.q.claimNoSync, c)
	}
	return s.claim(ctx, s.q.claim, c)
}

// claim runs the claim statement sql (claimSQL in one of its two forms).
func (s *Store) claim(ctx context.Context, sql string, c store.Claim) (store.ClaimResult, error) {
	now := sqlbase.FloorMicro(c.Now)
	leaseEnd := sqlbase.CeilMicro(c.LeaseEnd)
	scope := []byte(c.Scope)
	fp := []byte(c.Fingerprint)
	token := []byte(c.Token)
	held := false // the last look found the claim held by a transaction
	for range maxClaimAttempts {
		var (
			acquired, found, isHeld bool
			r                       rawRecord
		)
		var strict bool
		err := s.queryRow(ctx, sql, []any{scope, c.Key, fp, token, now, leaseEnd},
			&acquired, &found, &r.fingerprint, &r.state, &r.status, &r.headers, &r.body,
			&r.bodyOmitted, &r.createdAt, &r.leaseEnd, &r.expiresAt, &isHeld, &strict)
		if strict && !s.strict.Load() {
			// The session's default isolation is stricter than READ
			// COMMITTED: from now on every statement of the store runs in a
			// READ COMMITTED transaction of its own (see readCommitted).
			s.strict.Store(true)
		}
		if serializationFailure(err) {
			claimRetries.Add(1)
			continue
		}
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("pgxstore: claim: %w", err)
		}
		if acquired {
			return store.ClaimResult{Acquired: true}, nil
		}
		if found {
			rec, err := r.record()
			if err != nil {
				return store.ClaimResult{}, fmt.Errorf("pgxstore: claim, key %q: %w", c.Key, err)
			}
			if !rec.Takeable(now) || (isHeld && held) {
				return store.ClaimResult{Existing: &rec}, nil
			}
			// A row locked FOR UPDATE is a live transaction's claim, or a
			// DELETE in flight: a second look tells them apart, since the
			// DELETE has committed by then.
			held = isHeld
		}
		// Lost a race: a concurrent writer inserted the row after this
		// statement's snapshot, or took over or deleted the expired row the
		// snapshot showed. A fresh statement sees the outcome.
		claimRetries.Add(1)
	}
	return store.ClaimResult{}, fmt.Errorf("pgxstore: claim: still racing with concurrent writers after %d attempts", maxClaimAttempts)
}

// Complete implements store.Store in one statement. The result's Head
// goes in the headers column, its Body in body (NULL for a nil Body), and
// status is left NULL.
func (s *Store) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	n, err := retry(func() (int64, error) { return s.complete(ctx, nil, h, c) })
	if err := sqlbase.WriteResult("pgxstore", "complete", n, err); err != nil {
		return err
	}
	s.wakeLocal(h.Ref)
	return nil
}

var errNoHead = errors.New("the result has no head")

// complete runs completeSQL in the transaction in, or on its own when in
// is nil. c.Now plays no part: a claim is its token's until another claim
// takes the key over and changes the token. pgx has sent c.Result's bytes
// by the time it returns, so the caller may reuse them.
func (s *Store) complete(ctx context.Context, in *txn, h store.Hold, c store.Completion) (int64, error) {
	if len(c.Result.Head) == 0 {
		return 0, errNoHead // it would read back as corrupt
	}
	args := []any{[]byte(h.Scope), h.Key, []byte(h.Token), c.Result.Head, c.Result.Body,
		c.Result.BodyOmitted, sqlbase.CeilMicro(c.ExpiresAt)}
	sql := s.q.complete
	if s.cfg.notify {
		sql = s.q.completeNotify
		args = append(args, s.channel, payload(h.Ref))
	}
	if in == nil {
		return s.exec(ctx, sql, args...)
	}
	sql = s.q.completeTx
	if s.cfg.notify {
		sql = s.q.completeTxNotify
	}
	return execCount(ctx, in.tx, sql, append(args, in.xact)...)
}

// Release implements store.Store in one statement.
func (s *Store) Release(ctx context.Context, h store.Hold) error {
	var (
		n   int64
		err error
	)
	if s.cfg.notify {
		n, err = retry(func() (int64, error) {
			return s.exec(ctx, s.q.releaseNotify, []byte(h.Scope), h.Key, []byte(h.Token), s.channel, payload(h.Ref))
		})
	} else {
		n, err = retry(func() (int64, error) { return s.exec(ctx, s.q.release, []byte(h.Scope), h.Key, []byte(h.Token)) })
	}
	if err := sqlbase.WriteResult("pgxstore", "release", n, err); err != nil {
		return err
	}
	s.wakeLocal(h.Ref)
	return nil
}

// Get implements store.Getter in one statement.
func (s *Store) Get(ctx context.Context, r store.Ref, now time.Time) (store.Record, bool, error) {
	var row rawRecord
	err := s.queryRow(ctx, s.q.get, []any{[]byte(r.Scope), r.Key, sqlbase.FloorMicro(now)},
		&row.fingerprint, &row.state, &row.status, &row.headers, &row.body, &row.bodyOmitted,
		&row.createdAt, &row.leaseEnd, &row.expiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Record{}, false, nil
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("pgxstore: get: %w", err)
	}
	rec, err := row.record()
	if err != nil {
		return store.Record{}, false, fmt.Errorf("pgxstore: get, key %q: %w", r.Key, err)
	}
	return rec, true, nil
}

// Delete implements store.Deleter in one statement. It reports whether a
// row was there, expired or not, and wakes watchers of the key. A record
// that an exactly-once transaction holds is deleted once that transaction
// ends (the DELETE waits for its lock, within ctx).
func (s *Store) Delete(ctx context.Context, r store.Ref) (bool, error) {
	var (
		n   int64
		err error
	)
	if s.cfg.notify {
		n, err = retry(func() (int64, error) {
			return s.exec(ctx, s.q.deleteNotify, []byte(r.Scope), r.Key, s.channel, payload(r))
		})
	} else {
		n, err = retry(func() (int64, error) { return s.exec(ctx, s.q.delete, []byte(r.Scope), r.Key) })
	}
	if err != nil {
		return false, fmt.Errorf("pgxstore: delete: %w", err)
	}
	if n > 0 {
		s.wakeLocal(r)
	}
	return n > 0, nil
}

// Evict implements store.Evicter in one statement: it deletes the record,
// in progress or completed, only while it holds h.Token, and wakes
// watchers of the key.
func (s *Store) Evict(ctx context.Context, h store.Hold) error {
	var (
		n   int64
		err error
	)
	if s.cfg.notify {
		n, err = retry(func() (int64, error) {
			return s.exec(ctx, s.q.evictNotify, []byte(h.Scope), h.Key, []byte(h.Token), s.channel, payload(h.Ref))
		})
	} else {
		n, err = retry(func() (int64, error) { return s.exec(ctx, s.q.evict, []byte(h.Scope), h.Key, []byte(h.Token)) })
	}
	if err := sqlbase.WriteResult("pgxstore", "evict", n, err); err != nil {
		return err
	}
	s.wakeLocal(h.Ref)
	return nil
}

// Now implements store.Clock: the database server's clock_timestamp(), the
// time of the call (now() would be the start of its transaction). Every
// instance that shares the database then judges leases on one clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.db.QueryRow(ctx, s.q.clock).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("pgxstore: clock: %w", err)
	}
	return t, nil
}

// DeleteExpired implements store.ExpiredDeleter. It reads the whole table,
// 1024 pages per statement, and returns how many rows it removed: the
// completed records expired at now, and the in-progress ones whose lease
// ended at least a lease (lease end minus creation) before now, so that a
// late Complete, Extend or Release still finds them. An in-progress row
// that a live exactly-once transaction holds is left alone, without
// waiting for it.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for page, pages := uint32(0), uint32(1); page < pages; page += sweepPages {
		n, size, err := s.sweep(ctx, now, page)
		total += int(n)
		if err != nil {
			return total, fmt.Errorf("pgxstore: delete expired: %w", err)
		}
		pages = size
	}
	return total, nil
}

// sweep deletes the rows expired at now in the sweepPages pages from page
// on, and returns how many it deleted and the table's size in pages.
func (s *Store) sweep(ctx context.Context, now time.Time, page uint32) (deleted int64, pages uint32, err error) {
	from := pgtype.TID{BlockNumber: page, Valid: true}
	to := pgtype.TID{BlockNumber: uint32(min(uint64(page)+sweepPages, 1<<32-1)), Valid: true}
	var size int64
	for i := 1; ; i++ {
		err = s.queryRow(ctx, s.q.deleteExpired, []any{from, to, sqlbase.FloorMicro(now), pgx.Identifier{s.table}.Sanitize()}, &deleted, &size)
		if err == nil || i == maxClaimAttempts || !serializationFailure(err) {
			break
		}
	}
	return deleted, uint32(min(size, 1<<32-1)), err
}

// Extend implements store.Extender in one statement. now plays no part:
// a claim is its token's until another claim takes the key over.
func (s *Store) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	return s.extend(ctx, s.q.extend, h, leaseEnd)
}

func (s *Store) extend(ctx context.Context, sql string, h store.Hold, leaseEnd time.Time) error {
	n, err := retry(func() (int64, error) {
		return s.exec(ctx, sql, []byte(h.Scope), h.Key, []byte(h.Token), sqlbase.CeilMicro(leaseEnd))
	})
	if err := sqlbase.WriteResult("pgxstore", "extend", n, err); err != nil {
		return err
	}
	return nil
}

// ExtendBatch implements store.BatchExtender: Extend's statement for every
// claim at once (an UPDATE over unnest), so the heartbeat's beat is one
// round trip and one commit however many claims it extends. A claim the
// statement did not extend gets store.ErrLeaseLost.
func (s *Store) ExtendBatch(ctx context.Context, now time.Time, xs []store.Extension) []error {
	return s.extendBatch(ctx, s.q.extendBatch, xs)
}

func (s *Store) extendBatch(ctx context.Context, sql string, xs []store.Extension) []error {
	scopes, keys := make([][]byte, len(xs)), make([]string, len(xs))
	tokens, ends := make([][]byte, len(xs)), make([]time.Time, len(xs))
	for i, x := range xs {
		scopes[i], keys[i], tokens[i], ends[i] = []byte(x.Scope), x.Key, []byte(x.Token), sqlbase.CeilMicro(x.LeaseEnd)
	}
	args := []any{scopes, keys, tokens, ends}
	extended := make(map[store.Hold]bool, len(xs)) // by token: two claims on one record are two answers
	read := func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var scope, token []byte
			var key string
			if err := rows.Scan(&scope, &key, &token); err != nil {
				return err
			}
			extended[store.Hold{Ref: store.Ref{Scope: string(scope), Key: key}, Token: string(token)}] = true
		}
		return rows.Err()
	}
	_, err := retry(func() (int64, error) {
		clear(extended)
		if !s.strict.Load() || s.batch == nil {
			rows, err := s.db.Query(ctx, sql, args...)
			if err != nil {
				return 0, err
			}
			return 0, read(rows)
		}
		return 0, s.readCommitted(ctx, sql, args, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			return read(rows)
		})
	})
	errs := make([]error, len(xs))
	for i, x := range xs {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("pgxstore: extend: %w", err)
		case !extended[x.Hold]:
			errs[i] = store.ErrLeaseLost
		}
	}
	return errs
}

// Sweep deletes, every interval, the records expired at the wall clock in
// the next 1024 pages of the table, going round it, until ctx is cancelled
// or the store is closed, logging errors and carrying on. It returns
// ctx.Err() or ErrClosed. The background sweeper (WithSweepInterval) is a
// Sweep; call it yourself to tie one to your own context.
func (s *Store) Sweep(ctx context.Context, interval time.Duration) error {
	var page uint32
	return s.base.Sweep(ctx, interval, func(ctx context.Context) (slog.Attr, error) {
		attr := slog.Any("page", page)
		_, pages, err := s.sweep(ctx, time.Now(), page)
		if err != nil {
			return attr, err
		}
		if page += sweepPages; page >= pages {
			page = 0
		}
		return attr, nil
	})
}

// serializationFailure reports SQLSTATE 40001. Under READ COMMITTED a
// single statement re-checks a row a concurrent writer changed; when the
// server's default isolation is REPEATABLE READ or SERIALIZABLE it fails
// with 40001 instead. Every statement of the store commits on its own, so
// running it again, on a fresh snapshot, is safe.
func serializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40001"
}

// retry runs f again after a serialization failure, a few times at most.
func retry(f func() (int64, error)) (int64, error) {
	for i := 1; ; i++ {
		n, err := f()
		if err == nil || i == maxClaimAttempts || !serializationFailure(err) {
			return n, err
		}
	}
}

// execCount runs a statement and returns the rows its command tag reports.
func execCount(ctx context.Context, db DB, sql string, args ...any) (int64, error) {
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// batcher is a DB that sends batches that begin a transaction
// (pgx.Batch.BeginTx): *pgxpool.Pool and *pgx.Conn.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ownTx reports whether each statement of the store runs in a transaction
// of its own, so that a setting local to that transaction (the statements
// that skip their WAL flush: see claimNoSyncValues) ends with it: on a
// *pgxpool.Pool, or a *pgx.Conn outside a transaction block. On any other
// DB (a pgx.Tx, or a wrapper that may run in a transaction its caller
// began) those statements flush as usual, so the caller's commit keeps
// its durability.
func (s *Store) ownTx() bool {
	switch db := s.db.(type) {
	case *pgxpool.Pool:
		return true
	case *pgx.Conn:
		return db.PgConn().TxStatus() == 'I'
	}
	return false
}

// batcherOf returns db as a batcher, or nil when it is a pgx.Tx (a batch
// cannot begin a transaction inside one) or cannot send batches.
func batcherOf(db DB) batcher {
	if _, inTx := db.(pgx.Tx); inTx {
		return nil
	}
	b, _ := db.(batcher)
	return b
}

// exec runs one of the store's statements on its own (see readCommitted)
// and returns the rows its command tag reports.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if !s.strict.Load() || s.batch == nil {
		return execCount(ctx, s.db, sql, args...)
	}
	var n int64
	err := s.readCommitted(ctx, sql, args, func(br pgx.BatchResults) error {
		tag, err := br.Exec()
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// queryRow runs one of the store's statements on its own (see
// readCommitted) and scans its one row into dest.
func (s *Store) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	if !s.strict.Load() || s.batch == nil {
		return s.db.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	return s.readCommitted(ctx, sql, args, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(dest...)
	})
}

// readCommitted runs sql in a READ COMMITTED transaction of its own:
// BEGIN, the statement and COMMIT in one batch, one round trip, with read
// taking the statement's result. The store does so once a claim has found
// the session's default isolation stricter (default_transaction_isolation
// of the server, the database or the role). Its statements are written
// for READ COMMITTED, where a statement that finds a row changed by a
// concurrent writer re-checks the newest version; under REPEATABLE READ
// it fails with a serialization failure instead, and under SERIALIZABLE
// its reads would also enter the predicate locking of the handlers'
// serializable transactions, which then fail for conflicts that exist
// only between the store's statements and theirs (a waiter polling the
// record an exactly-once handler is about to complete). A statement at
// READ COMMITTED takes no part in it.
func (s *Store) readCommitted(ctx context.Context, sql string, args []any, read func(pgx.BatchResults) error) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	b.Queue(sql, args...)
	b.Queue("COMMIT")
	br := s.batch.SendBatch(ctx, b)
	tx := br.Tx()
	_, err := br.Exec()
	if err == nil {
		err = read(br)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	// After a failed statement the transaction is still open (aborted):
	// roll it back so the connection is clean. After COMMIT it is closed,
	// and this only hands a pooled connection back.
	if rerr := ignoreClosed(tx.Rollback(context.WithoutCancel(ctx))); err == nil {
		err = rerr
	}
	return err
}

// payload is the notification payload for the record r names: 16 hex
// digits of a 64-bit FNV-1a hash of its scope, length-prefixed, and key.
// It is short whatever the scope, and a collision only wakes a waiter
// spuriously.
func payload(r store.Ref) string {
	h := fnv.New64a()
	var n [20]byte
	h.Write(strconv.AppendInt(n[:0], int64(len(r.Scope)), 10))
	h.Write([]byte{':'})
	h.Write([]byte(r.Scope))
	h.Write([]byte(r.Key))
	var out [16]byte
	const hexdigits = "0123456789abcdef"
	v := h.Sum64()
	for i := 15; i >= 0; i-- {
		out[i] = hexdigits[v&0xf]
		v >>= 4
	}
	return string(out[:])
}

// rawRecord is a row as scanned, nullable columns included.
type rawRecord struct {
	fingerprint []byte
	state       pgtype.Int2
	status      pgtype.Int4
	headers     []byte
	body        []byte
	bodyOmitted pgtype.Bool
	createdAt   pgtype.Timestamptz
	leaseEnd    pgtype.Timestamptz
	expiresAt   pgtype.Timestamptz
}

// record converts a row to a record (sqlbase.Row.Record), checking that
// it is one this package can have written, now or before results were
// opaque (a status and the header bytes: store.LegacyHead); otherwise it
// returns an error wrapping store.ErrCorruptRecord.
func (r *rawRecord) record() (store.Record, error) {
	row := sqlbase.Row{
		Fingerprint: r.fingerprint,
		State:       sql.NullInt64{Int64: int64(r.state.Int16), Valid: r.state.Valid},
		Status:      sql.NullInt64{Int64: int64(r.status.Int32), Valid: r.status.Valid},
		Header:      r.headers,
		Body:        r.body,
		BodyOmitted: r.bodyOmitted.Bool,
		CreatedAt:   sql.NullTime{Time: r.createdAt.Time, Valid: r.createdAt.Valid},
		LeaseEnd:    sql.NullTime{Time: r.leaseEnd.Time, Valid: r.leaseEnd.Valid},
		ExpiresAt:   sql.NullTime{Time: r.expiresAt.Time, Valid: r.expiresAt.Valid},
	}
	return row.Record()
}

// pool returns db as a *pgxpool.Pool when it is one.
func (s *Store) pool() (*pgxpool.Pool, bool) {
	p, ok := s.db.(*pgxpool.Pool)
	return p, ok
}
