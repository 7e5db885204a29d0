package mysqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// Errors the store returns besides those of package store. Callers test
// with errors.Is.
var (
	// ErrBadOption is wrapped by the error New returns for a bad
	// argument or option (a nil *sql.DB, a table name that does not match
	// ^[A-Za-z_][A-Za-z0-9_]{0,63}$, a negative interval), and by Schema's
	// error for a bad table name. It wraps idem.ErrBadOption.
	ErrBadOption = fmt.Errorf("mysqlstore: %w", idem.ErrBadOption)
	// ErrClosed means Watch or Sweep was called after Close.
	ErrClosed = errors.New("mysqlstore: store closed")
	// ErrRolledBack is wrapped by the error an exactly-once Commit returns
	// when the server had rolled the request's transaction back on its
	// own (InnoDB's answer to a deadlock, or to a lock wait timeout with
	// innodb_rollback_on_timeout): the handler's writes are gone, so the
	// record is not completed, and the engine answers 500 and releases
	// the key, as for any failed commit.
	ErrRolledBack = errors.New("mysqlstore: the server rolled the transaction back (a deadlock, or a lock wait timeout with innodb_rollback_on_timeout); the handler's writes are gone")
)

// Defaults of the options.
const (
	// DefaultSweepInterval is how often the background sweeper deletes
	// expired records unless WithSweepInterval says otherwise.
	DefaultSweepInterval = time.Minute
	// DefaultWatchInterval is how often Watch polls the table for the keys
	// being waited on unless WithWatchInterval says otherwise.
	DefaultWatchInterval = 100 * time.Millisecond
)

// Column limits, checked before anything is sent: the store never relies
// on the server's SQL mode to refuse a value that does not fit.
const (
	maxKey         = 255       // VARBINARY(255)
	maxToken       = 255       // VARBINARY(255)
	maxFingerprint = 1<<16 - 1 // BLOB
	// maxScope is the longest scope kept as it is in the scope column; a
	// longer one is kept as its first maxScope bytes and its SHA-256.
	maxScope = 512
)

// packetReserve is what a completion's statement needs besides the body
// and the head: the scope (at most 544 bytes as stored), key and token
// (255 each), the transaction's mark, the other values and the protocol's
// framing, about 1.2 KiB at most, with room to spare.
const packetReserve = 4 << 10

// startTimeout bounds New's questions to the server.
const startTimeout = 5 * time.Second

// maxClaimAttempts bounds how often Claim starts over after losing a race
// (see the package doc). Each new attempt needs a concurrent writer to
// change the row between Claim's read and its write.
const maxClaimAttempts = 5

// sweepBatch is how many rows one DeleteExpired statement removes at most.
const sweepBatch = 1000

// Counters for tests: claims started over after a lost race, and
// statements run again after InnoDB chose them as a deadlock victim.
var (
	claimRetries    atomic.Int64
	deadlockRetries atomic.Int64
)

// Option configures a Store. A nil Option is ignored.
type Option func(*config)

type config struct {
	sqlbase.Options
	watchInterval time.Duration
}

// WithTable sets the table the store uses. The default is DefaultTable
// ("idempotency_keys"). The name must match ^[A-Za-z_][A-Za-z0-9_]{0,63}$;
// it is always backquoted. Put the table in another database by opening
// the *sql.DB on it.
func WithTable(name string) Option {
	return func(c *config) { c.Table = name }
}

// WithSweepInterval sets how often the background sweeper deletes expired
// records (DeleteExpired with the server's time, see Now). The default is
// DefaultSweepInterval; 0 runs no sweeper (call DeleteExpired or Sweep
// yourself). Expired records are never replayed either way; sweeping only
// reclaims space.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) { c.SweepInterval = d }
}

// WithWatchInterval sets how often Watch polls the table for the keys
// that requests in the engine's wait mode are waiting on. The default is
// DefaultWatchInterval. A Complete, Release or Delete through the same
// Store wakes its waiters at once; only waiters in other processes depend
// on the poll.
func WithWatchInterval(d time.Duration) Option {
	return func(c *config) { c.watchInterval = d }
}

// WithLogger sets where the background sweeper and the watch poller
// report errors they cannot return. The default is slog.Default(); nil
// discards them.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.Logger = l }
}

// Store is a store.Store on MySQL 8.0+ or MariaDB 10.6+ (InnoDB). It
// implements store.Getter, store.Deleter, store.ExpiredDeleter,
// store.Extender, store.BatchExtender, store.Evicter, store.Clock and
// store.Notifier;
// ExactlyOnce returns a view of it that also implements store.TxBeginner.
//
// Every method but the sweeper's runs single statements that commit on
// their own: no transaction or row lock is held while a handler runs. A
// replay, a 409 and a 422 are one consistent read that locks and writes
// nothing; a new claim adds one write. See the package doc for the
// statements and the race argument.
type Store struct {
	db     *sql.DB
	table  string
	q      queries
	cfg    config
	packet int // the server's max_allowed_packet, read by New

	complete, commit lazyStmt

	base  *sqlbase.Base   // options, sweeper and poller
	watch sqlbase.Watches // by table key (scopeKey)
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

// New returns a Store that keeps its records in db, which must run in
// autocommit mode (the default). New asks the server, once, for its
// max_allowed_packet (see MaxResponseSize) and checks that the
// connection's character_set_client and character_set_connection agree
// (they do unless a session sets one without the other; otherwise the
// server would convert the bytes of stored bodies). It waits at most 5
// seconds: a server that does not answer makes New fail with an error
// that says so. It does not need the table: create it with CreateSchema
// or with the SQL from Schema. A bad argument or option makes it fail
// with an error wrapping ErrBadOption, before it touches the database.
// The background sweeper starts at once; call Close to stop it and the
// watch poller. Close does not close db.
//
//	db, _ := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	store, err := mysqlstore.New(db, mysqlstore.WithTable("idem_keys"))
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *sql.DB", ErrBadOption)
	}
	cfg := config{
		Options:       sqlbase.Options{Table: DefaultTable, SweepInterval: DefaultSweepInterval, Logger: slog.Default()},
		watchInterval: DefaultWatchInterval,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.Check(ErrBadOption, maxTable); err != nil {
		return nil, err
	}
	if cfg.watchInterval <= 0 {
		return nil, fmt.Errorf("%w: watch interval %v is not positive", ErrBadOption, cfg.watchInterval)
	}
	packet, err := serverSettings(db)
	if err != nil {
		return nil, err
	}
	q := newQueries(cfg.Table)
	s := &Store{db: db, table: cfg.Table, q: q, cfg: cfg, packet: packet,
		complete: lazyStmt{query: q.complete}, commit: lazyStmt{query: q.commit},
		base: sqlbase.NewBase("mysqlstore", cfg.Options, ErrClosed)}
	s.watch.Read, s.watch.Interval, s.watch.Chunk = s.readWatched, cfg.watchInterval, watchChunk
	s.base.StartSweeper(s.Sweep)
	return s, nil
}

// serverSettings reads max_allowed_packet and checks the character sets,
// waiting at most startTimeout.
func serverSettings(db *sql.DB) (packet int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var client, conn string
	err = db.QueryRowContext(ctx, "SELECT @@max_allowed_packet, @@character_set_client, @@character_set_connection").Scan(&packet, &client, &conn)
	switch {
	case ctx.Err() != nil:
		return 0, fmt.Errorf("mysqlstore: the server did not answer within %v when asked for max_allowed_packet: %w", startTimeout, err)
	case err != nil:
		return 0, fmt.Errorf("mysqlstore: asking the server for max_allowed_packet: %w", err)
	case client != conn:
		return 0, fmt.Errorf("%w: character_set_client is %s but character_set_connection is %s, so the server would convert the bytes the store sends as parameters (response bodies); set both, with SET NAMES or the DSN's charset parameter", errCharset, client, conn)
	}
	return packet, nil
}

var errCharset = errors.New("mysqlstore: the connection's character sets disagree")

// MaxResponseSize returns the largest result the store keeps in full: its
// body and its head (for HTTP, the status and headers as the engine
// encodes them) together. It is the server's max_allowed_packet, read by
// New, less 4 KiB for the rest of the statement. A larger result is
// stored as the engine stores one over its cap: its head alone, marked
// as without body (store.Result.BodyOmitted), so that retries replay it
// instead of running the handler again; the store logs a warning. To
// keep every body the middleware keeps, give it idem.WithMaxResponseBody below
// it, less room for headers. A server whose max_allowed_packet is lowered
// later takes effect for the store at its next New.
func (s *Store) MaxResponseSize() int { return max(s.packet-packetReserve, 0) }

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// Close stops the background sweeper and the watch poller and waits for
// them, and closes the store's prepared statements. It does not close the
// DB. The store's other methods keep working;
// Watch and Sweep return ErrClosed. Close is safe to call more than once.
func (s *Store) Close() error {
	s.base.Close(func() {
		s.complete.close()
		s.commit.close()
	})
	return nil
}

// Claim implements store.Store. It reads the row with one consistent,
// non-locking SELECT; only when there is no row, or the row is takeable,
// does it write, with one INSERT ... ON DUPLICATE KEY UPDATE that takes
// the key or leaves a live row alone. Before it takes over an in-progress
// record whose lease has ended it asks whether a live exactly-once
// transaction holds it (heldSQL), and if so answers with the record. See
// the package doc for why this is race-safe and deadlock-free.
func (s *Store) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if err := checkLen("key", c.Key, maxKey); err != nil {
		return store.ClaimResult{}, err
	}
	if err := checkLen("token", c.Token, maxToken); err != nil {
		return store.ClaimResult{}, err
	}
	if err := checkLen("fingerprint", c.Fingerprint, maxFingerprint); err != nil {
		return store.ClaimResult{}, err
	}
	scope := scopeKey(c.Scope)
	now := sqlbase.FloorMicro(c.Now)
	read := s.q.selectRecord.render(scope, c.Key)
	var take string
	for range maxClaimAttempts {
		var r sqlbase.MicroRow
		found, err := r.Scan(s.db.QueryRowContext(ctx, read))
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("mysqlstore: claim: %w", err)
		}
		if found {
			rec, err := r.Record()
			if err != nil {
				return store.ClaimResult{}, fmt.Errorf("mysqlstore: claim, key %q: %w", c.Key, err)
			}
			if !rec.Takeable(now) {
				return store.ClaimResult{Existing: &rec}, nil
			}
			if rec.State == store.InProgress {
				held, err := s.held(ctx, scope, c.Key)
				if err != nil {
					return store.ClaimResult{}, fmt.Errorf("mysqlstore: claim: %w", err)
				}
				if held {
					return store.ClaimResult{Existing: &rec}, nil
				}
			}
		}
		if take == "" {
			take = s.q.take.render(scope, c.Key, c.Fingerprint, c.Token, now.UnixMicro(), sqlbase.CeilMicro(c.LeaseEnd).UnixMicro(), nil)
		}
		res, err := s.db.ExecContext(ctx, take)
		if deadlock(err) {
			deadlockRetries.Add(1)
			continue
		}
		if err != nil {
			return store.ClaimResult{}, fmt.Errorf("mysqlstore: claim: %w", err)
		}
		id, _ := res.LastInsertId()
		n, _ := res.RowsAffected()
		switch {
		case id == takeTaken, id == takeInserted && n == 1:
			return store.ClaimResult{Acquired: true}, nil
		case id == takeLeft:
			// Lost a race: between the read and the write another claim
			// took the key. The next read returns its record.
			claimRetries.Add(1)
			continue
		}
		return store.ClaimResult{}, fmt.Errorf("mysqlstore: claim: unexpected outcome of the write (insert id %d, %d rows affected)", id, n)
	}
	return store.ClaimResult{}, fmt.Errorf("mysqlstore: claim: still racing with concurrent writers after %d attempts", maxClaimAttempts)
}

// held reports whether a live exactly-once transaction holds the record
// of scope (as stored) and key, without waiting for any lock.
func (s *Store) held(ctx context.Context, scope, key string) (bool, error) {
	var held bool
	err := s.db.QueryRowContext(ctx, s.q.held.render(s.table, scope, key)).Scan(&held)
	return held, err
}

// Complete implements store.Store in one statement, a prepared one whose
// body and head travel as binary parameters. The row keeps the head in
// its headers column and a NULL status (a status marks a row written
// before results were opaque). A result larger than MaxResponseSize is
// stored without its body.
func (s *Store) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	args, err := s.completion(h, c)
	if err != nil {
		return err
	}
	st, done, err := s.complete.get(ctx, s.db)
	if err != nil {
		return fmt.Errorf("mysqlstore: complete: %w", err)
	}
	defer done()
	for i := 1; ; i++ {
		res, err := st.ExecContext(ctx, args...)
		if deadlock(err) && i < maxClaimAttempts {
			deadlockRetries.Add(1)
			continue
		}
		if err != nil {
			return fmt.Errorf("mysqlstore: complete: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return store.ErrLeaseLost
		}
		s.wake(h.Scope, h.Key)
		return nil
	}
}

// completion checks a completion and returns the parameters of
// completeSQL for it; those of commitSQL follow with the mark. A result
// larger than MaxResponseSize loses its body (BodyOmitted), and a warning
// is logged; its head is always kept.
func (s *Store) completion(h store.Hold, c store.Completion) ([]any, error) {
	res := c.Result
	if len(res.Head) == 0 || len(res.Head) > store.MaxHead {
		return nil, fmt.Errorf("mysqlstore: complete: a head of %d bytes is not 1 to %d", len(res.Head), store.MaxHead)
	}
	if room := s.MaxResponseSize(); len(res.Body)+len(res.Head) > room {
		size := len(res.Body) + len(res.Head)
		if len(res.Head) > room {
			return nil, fmt.Errorf("mysqlstore: complete: a head of %d bytes does not fit the %d bytes that max_allowed_packet (%d) leaves", len(res.Head), room, s.packet)
		}
		res.Body, res.BodyOmitted = nil, true
		s.cfg.Logger.Warn("mysqlstore: a result larger than max_allowed_packet allows is stored without its body; retries replay its head (status and headers)",
			"table", s.table, "size", size, "max", room)
	}
	var body []byte
	if !res.BodyOmitted {
		body = res.Body // NULL for a nil body
	}
	return []any{res.Head, body, res.BodyOmitted, sqlbase.CeilMicro(c.ExpiresAt).UnixMicro(),
		scopeKey(h.Scope), h.Key, h.Token}, nil
}

// Release implements store.Store in one statement.
func (s *Store) Release(ctx context.Context, h store.Hold) error {
	n, err := s.exec(ctx, s.q.release.render(scopeKey(h.Scope), h.Key, h.Token))
	if err := sqlbase.WriteResult("mysqlstore", "release", n, err); err != nil {
		return err
	}
	s.wake(h.Scope, h.Key)
	return nil
}

// Get implements store.Getter in one statement, a consistent read. A
// completed row written before results were opaque (with a status) comes
// back with its head built by store.LegacyHead.
func (s *Store) Get(ctx context.Context, r store.Ref, now time.Time) (store.Record, bool, error) {
	var row sqlbase.MicroRow
	found, err := row.Scan(s.db.QueryRowContext(ctx, s.q.get.render(scopeKey(r.Scope), r.Key, sqlbase.FloorMicro(now).UnixMicro())))
	if err != nil {
		return store.Record{}, false, fmt.Errorf("mysqlstore: get: %w", err)
	}
	if !found {
		return store.Record{}, false, nil
	}
	rec, err := row.Record()
	if err != nil {
		return store.Record{}, false, fmt.Errorf("mysqlstore: get, key %q: %w", r.Key, err)
	}
	return rec, true, nil
}

// Delete implements store.Deleter in one statement. It reports whether a
// row was there, expired or not, and wakes watchers of the key.
func (s *Store) Delete(ctx context.Context, r store.Ref) (bool, error) {
	n, err := s.exec(ctx, s.q.delete.render(scopeKey(r.Scope), r.Key))
	if err != nil {
		return false, fmt.Errorf("mysqlstore: delete: %w", err)
	}
	if n > 0 {
		s.wake(r.Scope, r.Key)
	}
	return n > 0, nil
}

// Evict implements store.Evicter in one statement: it deletes the record,
// in progress or completed, while it holds h.Token, and wakes watchers of
// the key.
func (s *Store) Evict(ctx context.Context, h store.Hold) error {
	n, err := s.exec(ctx, s.q.evict.render(scopeKey(h.Scope), h.Key, h.Token))
	if err := sqlbase.WriteResult("mysqlstore", "evict", n, err); err != nil {
		return err
	}
	s.wake(h.Scope, h.Key)
	return nil
}

// Now implements store.Clock: the server's time, UTC, in microseconds, in
// one statement. The engine aligns the now it passes to the store with
// it, so that instances whose clocks disagree judge leases alike; the
// sweeper uses it too. It reads UTC_TIMESTAMP(6), the statement's start
// (see clockSQL), so a session that SET timestamp to a fixed value would
// freeze it: do not do that on the store's pool.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var us int64
	if err := s.db.QueryRowContext(ctx, clockSQL).Scan(&us); err != nil {
		return time.Time{}, fmt.Errorf("mysqlstore: now: %w", err)
	}
	return sqlbase.FromMicro(us), nil
}

// ExtendBatch implements store.BatchExtender in two statements for up to
// extendBatchSize claims with one lease end (the engine's heartbeat gives
// one): a SELECT, without locks, of the claims whose tokens still hold
// their records, then one UPDATE of those, by primary key both. When the
// update moved fewer rows than it was given (a claim taken over between
// the two, a lease end already there), each of them is extended on its
// own, as Extend does.
func (s *Store) ExtendBatch(ctx context.Context, now time.Time, xs []store.Extension) []error {
	errs := make([]error, len(xs))
	groups := map[int64][]int{}
	var order []int64
	for i, x := range xs {
		us := sqlbase.CeilMicro(x.LeaseEnd).UnixMicro()
		if _, ok := groups[us]; !ok {
			order = append(order, us)
		}
		groups[us] = append(groups[us], i)
	}
	for _, us := range order {
		idx := groups[us]
		for len(idx) > 0 {
			n := min(len(idx), extendBatchSize)
			s.extendGroup(ctx, now, us, xs, idx[:n], errs)
			idx = idx[n:]
		}
	}
	return errs
}

// extendBatchSize bounds the claims of one ExtendBatch statement, and so
// its size (well under max_allowed_packet's smallest default, 4 MiB).
const extendBatchSize = 256

// extendGroup extends the claims xs[idx] to the lease end us, setting
// errs[i] for each.
func (s *Store) extendGroup(ctx context.Context, now time.Time, us int64, xs []store.Extension, idx []int, errs []error) {
	fail := func(err error) {
		for _, i := range idx {
			errs[i] = fmt.Errorf("mysqlstore: extend: %w", err)
		}
	}
	holding, err := s.holding(ctx, xs, idx)
	if err != nil {
		fail(err)
		return
	}
	var live []int
	for _, i := range idx {
		if holding[stored(xs[i].Hold)] {
			live = append(live, i)
		} else {
			errs[i] = store.ErrLeaseLost
		}
	}
	if len(live) == 0 {
		return
	}
	update := s.q.extendBatch.render(us, holdList(storedHolds(xs, live)))
	var res sql.Result
	for attempt := 0; ; attempt++ {
		if res, err = s.db.ExecContext(ctx, update); !deadlock(err) || attempt == maxClaimAttempts-1 {
			break
		}
		deadlockRetries.Add(1)
	}
	if err != nil {
		for _, i := range live {
			errs[i] = fmt.Errorf("mysqlstore: extend: %w", err)
		}
		return
	}
	if n, _ := res.RowsAffected(); n == int64(len(live)) {
		return
	}
	for _, i := range live {
		errs[i] = s.Extend(ctx, xs[i].Hold, now, xs[i].LeaseEnd)
	}
}

// holding returns which of the claims xs[idx] still hold their records
// in progress, by stored(hold).
func (s *Store) holding(ctx context.Context, xs []store.Extension, idx []int) (map[store.Hold]bool, error) {
	rows, err := s.db.QueryContext(ctx, s.q.holding.render(holdList(storedHolds(xs, idx))))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	held := make(map[store.Hold]bool, len(idx))
	for rows.Next() {
		var scope, key, token []byte
		if err := rows.Scan(&scope, &key, &token); err != nil {
			return nil, err
		}
		held[store.Hold{Ref: store.Ref{Scope: string(scope), Key: string(key)}, Token: string(token)}] = true
	}
	return held, rows.Err()
}

// stored is h as its record keeps it: the scope as scopeKey stores it.
func stored(h store.Hold) store.Hold {
	h.Scope = scopeKey(h.Scope)
	return h
}

// storedHolds returns the holds of the claims xs[idx], as stored.
func storedHolds(xs []store.Extension, idx []int) []store.Hold {
	hs := make([]store.Hold, len(idx))
	for j, i := range idx {
		hs[j] = stored(xs[i].Hold)
	}
	return hs
}

// Extend implements store.Extender in one statement. Like Complete, it
// moves the lease of a claim its token still holds, even once the lease
// has ended.
func (s *Store) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	q := s.q.extend.render(scopeKey(h.Scope), h.Key, h.Token, sqlbase.CeilMicro(leaseEnd).UnixMicro())
	for range maxClaimAttempts {
		res, err := s.db.ExecContext(ctx, q)
		if deadlock(err) {
			deadlockRetries.Add(1)
			continue
		}
		if err != nil {
			return fmt.Errorf("mysqlstore: extend: %w", err)
		}
		id, _ := res.LastInsertId()
		n, _ := res.RowsAffected()
		if id != 1 && n != 1 {
			return store.ErrLeaseLost
		}
		return nil
	}
	return fmt.Errorf("mysqlstore: extend: chosen as a deadlock victim %d times", maxClaimAttempts)
}

// DeleteExpired implements store.ExpiredDeleter. It removes completed
// records from their expiry, and in-progress ones a lease later (at
// LeaseEnd + (LeaseEnd - CreatedAt)), so that a late completion of a claim
// nobody took over still lands. It works in batches of at most 1000 rows:
// a consistent read of the expires_at index finds them, without locking
// anything, and a short transaction locks those still removable, skipping
// any row another transaction holds (SELECT ... FOR UPDATE SKIP LOCKED: a
// live exactly-once transaction, or a claim taking the row over), and
// deletes them by primary key. It never waits for a lock. It returns how
// many rows it removed.
func (s *Store) DeleteExpired(ctx context.Context, now time.Time) (int, error) {
	nowUS := sqlbase.FloorMicro(now).UnixMicro()
	find := s.q.expired.render(nowUS, sweepBatch)
	total := 0
	for {
		scopes, keys, err := s.expiredBatch(ctx, find)
		if err != nil {
			return total, fmt.Errorf("mysqlstore: delete expired: %w", err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		n, err := s.deleteBatch(ctx, scopes, keys, nowUS)
		total += n
		if err != nil {
			return total, fmt.Errorf("mysqlstore: delete expired: %w", err)
		}
		if len(keys) < sweepBatch || n == 0 {
			// A batch left whole is held by others: the next sweep
			// tries again, rather than this one finding it forever.
			return total, nil
		}
	}
}

// deleteBatch deletes, in one transaction, the listed rows that are still
// removable at nowUS and that no other transaction holds locked.
func (s *Store) deleteBatch(ctx context.Context, scopes, keys []string, nowUS int64) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	rows, err := tx.QueryContext(ctx, s.q.sweepLock.render(pairList(scopes, keys), nowUS))
	if err != nil {
		return 0, err
	}
	scopes, keys, err = scanPairs(rows)
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, s.q.sweepDelete.render(pairList(scopes, keys), len(keys)))
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (s *Store) expiredBatch(ctx context.Context, q string) (scopes, keys []string, err error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	return scanPairs(rows)
}

// scanPairs reads (scope, key) rows and closes them.
func scanPairs(rows *sql.Rows) (scopes, keys []string, err error) {
	defer rows.Close()
	for rows.Next() {
		var scope, key []byte
		if err := rows.Scan(&scope, &key); err != nil {
			return nil, nil, err
		}
		scopes = append(scopes, string(scope))
		keys = append(keys, string(key))
	}
	return scopes, keys, rows.Err()
}

// Sweep calls DeleteExpired with the server's time (Now) every interval
// until ctx is cancelled or the store is closed, logging errors and
// carrying on. It returns ctx.Err() or ErrClosed. New starts it in the
// background unless WithSweepInterval(0) is given; call it yourself to tie
// the sweeper to your own context.
func (s *Store) Sweep(ctx context.Context, interval time.Duration) error {
	return s.base.Sweep(ctx, interval, func(ctx context.Context) (slog.Attr, error) {
		n := 0
		now, err := s.Now(ctx)
		if err == nil {
			n, err = s.DeleteExpired(ctx, now)
		}
		return slog.Int("deleted", n), err
	})
}

// exec runs a statement that changes rows and returns how many it
// changed, running it again if InnoDB chose it as a deadlock victim
// (which rolls it back): another application's transactions on the
// table can cause it, and, rarely, the sweeper (see the package docs,
// "Round trips and locks").
func (s *Store) exec(ctx context.Context, q string) (int64, error) {
	for i := 1; ; i++ {
		res, err := s.db.ExecContext(ctx, q)
		if deadlock(err) && i < maxClaimAttempts {
			deadlockRetries.Add(1)
			continue
		}
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
}

// deadlock reports MySQL error 1213 (ER_LOCK_DEADLOCK): InnoDB rolled the
// statement's transaction back to break a deadlock, and running it again
// is safe because every statement of the store commits on its own.
func deadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

func checkLen(what, v string, limit int) error {
	if len(v) > limit {
		return fmt.Errorf("mysqlstore: a %s of %d bytes is longer than the %d the table holds", what, len(v), limit)
	}
	return nil
}

// scopeKey is the scope column's value for scope: the scope itself, or,
// for one longer than 512 bytes, its first 512 bytes followed by its
// SHA-256. The two forms never meet (a stored value of 544 bytes is always
// a hashed one), so distinct scopes keep distinct keys, and the primary
// key stays far below InnoDB's 3072-byte limit.
func scopeKey(scope string) string {
	if len(scope) <= maxScope {
		return scope
	}
	sum := sha256.Sum256([]byte(scope))
	return scope[:maxScope] + string(sum[:])
}
