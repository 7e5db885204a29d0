package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ExactlyOnceStore is a Store whose engine runs each claimed request in a
// database transaction (store.TxBeginner): the handler's writes, made
// through Tx(r.Context()), and the completed record commit together or not
// at all. Get one with Store.ExactlyOnce; it has every method of Store.
// The transaction locks the record's row first and so holds the claim by
// itself (store.ClaimHolder): no heartbeat, at any isolation level. Each
// request in flight holds one pooled connection, and its rows stay
// locked, until the commit. The flow, the isolation levels, the pool
// sizing rule, what a failed COMMIT means, and the costs are in the
// package docs ("Exactly-once mode").
type ExactlyOnceStore struct {
	*Store
	txOptions pgx.TxOptions
}

var (
	_ store.Store         = (*ExactlyOnceStore)(nil)
	_ store.TxBeginner    = (*ExactlyOnceStore)(nil)
	_ store.Getter        = (*ExactlyOnceStore)(nil)
	_ store.Deleter       = (*ExactlyOnceStore)(nil)
	_ store.Notifier      = (*ExactlyOnceStore)(nil)
	_ store.Extender      = (*ExactlyOnceStore)(nil)
	_ store.BatchExtender = (*ExactlyOnceStore)(nil)
	_ store.Tx            = (*txn)(nil)
	_ store.ClaimHolder   = (*txn)(nil)
	_ pgx.Tx              = handlerTx{}
)

// ExactlyOnce returns s in exactly-once mode: pass it to idem.New instead
// of s. Both share the same table, listener and sweeper; closing either
// closes both. Handlers reach their transaction with Tx. It commits with
// the record when the response is stored: when the handler returns, or
// earlier, at its first Flush or once its body outgrows the engine's
// response cap (the response then streams), after which the handler's
// statements on it fail; see ExactlyOnceStore.
func (s *Store) ExactlyOnce() *ExactlyOnceStore { return &ExactlyOnceStore{Store: s} }

// Claim implements store.Store like Store.Claim, in the same one statement,
// except that a claim that takes the key commits without waiting for its
// WAL flush (synchronous_commit off for that statement alone): the
// transaction that later commits the record flushes it too. See "Exactly-
// once mode" in the package doc for why that loses nothing. On a DB other
// than a *pgxpool.Pool or a *pgx.Conn outside a transaction (a pgx.Tx, a
// wrapper) the claim is the plain one, so a transaction the caller began
// keeps its own durability.
func (s *ExactlyOnceStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if !s.ownTx() {
		return s.Store.Claim(ctx, c)
	}
	return s.claim(ctx, s.q.claimNoSync, c)
}

// Extend implements store.Extender like Store.Extend, except that the
// heartbeat's commit does not wait for its WAL flush, for the claim's
// reason: a crash that loses it ends the handler's transaction too (on
// another DB than a pool or an idle connection it is the plain one).
func (s *ExactlyOnceStore) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	if !s.ownTx() {
		return s.Store.Extend(ctx, h, now, leaseEnd)
	}
	return s.extend(ctx, s.q.extendNoSync, h, leaseEnd)
}

// ExtendBatch implements store.BatchExtender like Store.ExtendBatch, with
// Extend's commit that does not wait for its WAL flush.
func (s *ExactlyOnceStore) ExtendBatch(ctx context.Context, now time.Time, xs []store.Extension) []error {
	if !s.ownTx() {
		return s.Store.ExtendBatch(ctx, now, xs)
	}
	return s.extendBatch(ctx, s.q.extendBatchNoSync, xs)
}

// WithTxOptions returns a copy of s whose transactions start with opts,
// for example pgx.TxOptions{IsoLevel: pgx.Serializable}. The default is
// the server's default_transaction_isolation (of the server, the database
// or the role; READ COMMITTED unless configured otherwise). READ
// COMMITTED, REPEATABLE READ and SERIALIZABLE all work: the transaction's
// first statement locks the record, so its snapshot sees the claim and
// nothing else writes the record until it ends. A serialization failure
// of the handler's own statements, or at COMMIT, is a failed commit: the
// engine answers 500 and releases the key, and the client's retry runs
// again. A read-only transaction cannot hold the claim: BeginTx refuses
// AccessMode pgx.ReadOnly with an error wrapping ErrBadOption. On a DB
// that is a pgx.Tx, where BeginTx makes a savepoint, options other than
// the zero value are refused.
func (s *ExactlyOnceStore) WithTxOptions(opts pgx.TxOptions) *ExactlyOnceStore {
	return &ExactlyOnceStore{Store: s.Store, txOptions: opts}
}

type txKey struct{}

// Tx returns the transaction an exactly-once engine started for the
// request whose context is ctx, and true; or nil and false when there is
// none (the store is not in exactly-once mode, or the request was not
// claimed). Run the handler's queries on it and never commit it (Commit
// returns ErrTxManaged): the engine commits it with the record. Pass the
// request's context: r.Context(), or with Gin c.Request.Context(), with
// Echo c.Request().Context(). The rules for handlers (streaming, errors,
// savepoints) are in the package docs ("Exactly-once mode").
//
//	tx, _ := pgxstore.Tx(r.Context())
//	_, err := tx.Exec(r.Context(), "INSERT INTO payments (order_id) VALUES ($1)", id)
func Tx(ctx context.Context) (pgx.Tx, bool) {
	t, ok := ctx.Value(txKey{}).(*txn)
	if !ok {
		return nil, false
	}
	return handlerTx{t.tx, t}, true
}

// BeginTx implements store.TxBeginner: it starts a transaction on the
// store's DB and, as its first statement, locks the record's row FOR
// UPDATE while the claim h holds it (see lockSQL); ctx bounds only
// acquiring a connection, BEGIN and the lock. The transaction then holds
// the claim until it ends (store.ClaimHolder). When the key was taken over
// or the record is gone, BeginTx rolls back and returns
// store.ErrLeaseLost. A
// serialization failure of the lock (REPEATABLE READ or SERIALIZABLE, when
// a waiter marked the row between the snapshot and the lock) starts the
// transaction again. The engine hands the handler the context from the
// returned Tx's Context method, where Tx finds the transaction.
func (s *ExactlyOnceStore) BeginTx(ctx context.Context, h store.Hold) (store.Tx, error) {
	if s.txOptions.AccessMode == pgx.ReadOnly {
		return nil, fmt.Errorf("pgxstore: begin: %w: WithTxOptions asks for a read-only transaction, which cannot lock the record and commit it", ErrBadOption)
	}
	args := []any{[]byte(h.Scope), h.Key, []byte(h.Token)}
	for attempt := 1; ; attempt++ {
		tx, xact, err := s.beginLocked(ctx, args)
		if err == nil && xact != "" {
			return &txn{s: s.Store, tx: tx, h: h, xact: xact}, nil
		}
		var rbErr error
		if tx != nil {
			rbErr = ignoreClosed(tx.Rollback(context.WithoutCancel(ctx)))
		}
		switch {
		case err == nil:
			return nil, store.ErrLeaseLost
		case serializationFailure(err) && attempt < maxClaimAttempts && rbErr == nil:
			continue
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "25006" {
			err = fmt.Errorf("%w (exactly-once mode needs read-write transactions: check default_transaction_read_only)", err)
		}
		return nil, errors.Join(fmt.Errorf("pgxstore: begin: %w", err), rbErr)
	}
}

// beginLocked starts a transaction with the store's options and runs
// lockSQL in it with args, and returns the transaction (nil when BEGIN
// failed) and its ID, or "" when the lock found no row. On a
// *pgxpool.Pool or a *pgx.Conn, BEGIN and the lock go in one batch: one
// round trip.
func (s *ExactlyOnceStore) beginLocked(ctx context.Context, args []any) (pgx.Tx, string, error) {
	var xact string
	if s.batch == nil {
		tx, err := s.begin(ctx)
		if err != nil {
			return nil, "", err
		}
		return tx, xact, locked(tx.QueryRow(ctx, s.q.lock, args...).Scan(&xact))
	}
	b := &pgx.Batch{}
	b.BeginTx(s.txOptions)
	b.Queue(s.q.lock, args...)
	br := s.batch.SendBatch(ctx, b)
	tx := br.Tx()
	_, err := br.Exec()
	if err == nil {
		err = locked(br.QueryRow().Scan(&xact))
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tx, xact, err
}

// locked is the error of lockSQL's Scan: none when it found no row.
func locked(err error) error {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lock the record: %w", err)
	}
	return nil
}

// begin starts a transaction with the store's options, on a DB that
// cannot send a batch (a pgx.Tx: the transaction is a savepoint).
func (s *ExactlyOnceStore) begin(ctx context.Context) (pgx.Tx, error) {
	if s.txOptions == (pgx.TxOptions{}) {
		return s.db.Begin(ctx)
	}
	if b, ok := s.db.(interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	}); ok {
		return b.BeginTx(ctx, s.txOptions)
	}
	return nil, fmt.Errorf("%T cannot begin a transaction with options", s.db)
}

// txn is the store.Tx an ExactlyOnceStore hands the engine.
type txn struct {
	s          *Store
	tx         pgx.Tx
	h          store.Hold
	xact       string // the transaction's ID, from lockSQL
	done       bool
	rolledBack atomic.Bool // by the handler
}

// HoldsClaim implements store.ClaimHolder: the transaction locked the
// record's row in BeginTx and keeps it locked until it ends, so no other
// request takes the key over meanwhile and the engine sends no heartbeat.
// (When the handler ends the transaction itself, the lock goes with it;
// Commit then fails, or stores an error answer token-checked.)
func (t *txn) HoldsClaim() bool { return true }

// failed reports that the transaction can no longer commit: the handler
// rolled it back, one of its statements failed (status 'E': the server
// ignores everything until ROLLBACK), or the connection is not in a
// transaction block at all (the handler ran COMMIT or ROLLBACK as SQL). In
// the last case the record must not be written on the connection: it would
// commit on its own, apart from the handler's writes.
func (t *txn) failed() bool {
	return t.rolledBack.Load() || t.tx.Conn().PgConn().TxStatus() != 'T'
}

// Context returns parent carrying the transaction, for Tx.
func (t *txn) Context(parent context.Context) context.Context {
	return context.WithValue(parent, txKey{}, t)
}

// Commit completes the record inside the transaction, with the same token
// check as Store.Complete, and commits. On store.ErrLeaseLost it rolls
// back and commits nothing. When the transaction can no longer commit (see
// failed), a c.Failed outcome is stored on its own and any other is
// refused (sqlbase.CommitEnded). When COMMIT itself fails, the handler's
// writes and the record either both committed or neither did (a
// connection lost during COMMIT leaves which one unknown); the engine
// releases the claim, which never deletes a completed record, so a retry
// learns the outcome.
func (t *txn) Commit(ctx context.Context, c store.Completion) error {
	if t.done {
		return errors.New("pgxstore: commit: transaction already finished")
	}
	t.done = true
	if t.failed() {
		t.tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // may be closed already
		// A failed outcome after the transaction failed: nothing of its
		// writes remains (unless the handler committed them itself with
		// a COMMIT statement), which is what the outcome says.
		return sqlbase.CommitEnded("pgxstore", c.Failed, func() error {
			return t.s.Complete(ctx, t.h, c)
		})
	}
	n, err := t.s.complete(ctx, t, t.h, c)
	if err == nil && n == 0 {
		// The row is locked by the transaction that began with BeginTx,
		// so it did not change hands: the handler ended that transaction
		// with SQL and began another (see lockSQL), and what it wrote
		// before may be gone.
		t.tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the connection is reset either way
		return sqlbase.CommitEnded("pgxstore", c.Failed, func() error {
			return t.s.Complete(ctx, t.h, c)
		})
	}
	if err != nil {
		rbErr := t.tx.Rollback(context.WithoutCancel(ctx))
		return sqlbase.CommitFailed("pgxstore", err, ignoreClosed(rbErr))
	}
	if err := t.tx.Commit(ctx); err != nil {
		// pgx rolls back a transaction whose COMMIT fails; this makes sure
		// the connection goes back to the pool clean either way.
		t.tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // ErrTxClosed after a failed COMMIT
		return fmt.Errorf("pgxstore: commit: %w", err)
	}
	t.s.wakeLocal(t.h.Ref)
	return nil
}

// Rollback rolls the transaction back. It is a no-op after Commit or a
// previous Rollback.
func (t *txn) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	if err := ignoreClosed(t.tx.Rollback(ctx)); err != nil {
		return fmt.Errorf("pgxstore: rollback: %w", err)
	}
	return nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// handlerTx is the transaction as the handler sees it: everything but
// Commit, which the engine owns.
type handlerTx struct {
	pgx.Tx
	t *txn
}

// Commit refuses: the engine commits the transaction with the record.
func (handlerTx) Commit(context.Context) error { return ErrTxManaged }

// Rollback rolls the transaction back and remembers it for Commit.
func (h handlerTx) Rollback(ctx context.Context) error {
	h.t.rolledBack.Store(true)
	return h.Tx.Rollback(ctx)
}
