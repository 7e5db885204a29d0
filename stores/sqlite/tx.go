package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// ExactlyOnceStore is a Store whose engine runs each claimed request in a
// transaction on the same database (store.TxBeginner): the handler's
// writes, made through Tx(r.Context()), and the completed record commit
// together or not at all. Get one with Store.ExactlyOnce; it has every
// method of Store.
//
// The transaction holds SQLite's write lock, and the store's, from BeginTx
// until it ends: while a handler runs, no other write happens, so
// exactly-once requests run one at a time and a new key's claim waits for
// the running one (at most the engine's store timeout, see
// idem.WithStoreTimeout; set it above your slowest handler). Replays,
// 409s and 422s are reads and do not wait. The transaction holds the
// claim by itself (store.ClaimHolder): no heartbeat. See "Exactly-once
// mode" in the package doc.
type ExactlyOnceStore struct {
	*Store
}

var (
	_ store.Store          = (*ExactlyOnceStore)(nil)
	_ store.TxBeginner     = (*ExactlyOnceStore)(nil)
	_ store.Getter         = (*ExactlyOnceStore)(nil)
	_ store.Deleter        = (*ExactlyOnceStore)(nil)
	_ store.ExpiredDeleter = (*ExactlyOnceStore)(nil)
	_ store.Notifier       = (*ExactlyOnceStore)(nil)
	_ store.Extender       = (*ExactlyOnceStore)(nil)
	_ store.Evicter        = (*ExactlyOnceStore)(nil)
	_ store.Tx             = (*txn)(nil)
	_ store.ClaimHolder    = (*txn)(nil)
)

// ExactlyOnce returns s in exactly-once mode: pass it to idem.New instead
// of s. Both share the same table, write lock, watchers and sweeper;
// closing either closes both. Handlers reach their transaction with Tx.
//
//	engine, err := idem.New(store.ExactlyOnce())
func (s *Store) ExactlyOnce() *ExactlyOnceStore { return &ExactlyOnceStore{Store: s} }

type txKey struct{}

// Tx returns the transaction an exactly-once engine started for the
// request whose context is ctx, and true; or nil and false when there is
// none (the store is not in exactly-once mode, or the request was not
// claimed). Pass r.Context() (with Gin c.Request.Context(), with Echo
// c.Request().Context()). Run the handler's statements on it and never
// end it: the engine commits it with the record, or rolls it back when
// the handler answers 5xx or 429 or panics. Do not write through the
// *sql.DB while it is open: the transaction holds the database's write
// lock, so such a write waits for the busy timeout and fails.
//
//	tx, _ := sqlitestore.Tx(r.Context())
//	_, err := tx.ExecContext(r.Context(), "INSERT INTO orders (ref) VALUES (?)", ref)
func Tx(ctx context.Context) (*sql.Tx, bool) {
	t, ok := ctx.Value(txKey{}).(*txn)
	if !ok {
		return nil, false
	}
	return t.tx, true
}

// BeginTx implements store.TxBeginner. It takes the store's write lock, a
// connection of its own and starts a transaction on it whose first
// statement checks that h.Token still holds the in-progress record (a
// no-op UPDATE, which also takes SQLite's write lock at once); when it
// does not, BeginTx rolls back and returns store.ErrLeaseLost. ctx bounds only the
// wait for the lock, the connection and the start: the transaction
// outlives it.
func (s *ExactlyOnceStore) BeginTx(ctx context.Context, h store.Hold) (store.Tx, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("sqlitestore: begin: %w", err)
	}
	t := &txn{s: s.Store, h: h}
	if err := t.begin(ctx); err != nil {
		t.abandon()
		if errors.Is(err, store.ErrLeaseLost) {
			return nil, err
		}
		return nil, fmt.Errorf("sqlitestore: begin: %w", err)
	}
	s.setHeld(h.Ref, true)
	return t, nil
}

// txn is the store.Tx an ExactlyOnceStore hands the engine. It owns the
// store's write lock from BeginTx until end.
type txn struct {
	s      *Store
	conn   *sql.Conn
	tx     *sql.Tx
	cancel context.CancelFunc // ends the transaction's context
	h      store.Hold
	done   bool
}

func (t *txn) begin(ctx context.Context) error {
	var err error
	if t.conn, err = t.s.db.Conn(ctx); err != nil {
		return err
	}
	// database/sql rolls a transaction back when the context given to
	// BeginTx ends; this one must outlive ctx.
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.cancel = cancel
	if t.tx, err = t.conn.BeginTx(txCtx, nil); err != nil {
		return err
	}
	res, err := t.tx.ExecContext(ctx, t.s.q.hold, []byte(t.h.Scope), []byte(t.h.Key), []byte(t.h.Token))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return store.ErrLeaseLost
	}
	return nil
}

// HoldsClaim implements store.ClaimHolder: from BeginTx until it ends the
// transaction holds the write lock, so nothing else writes the record,
// and the store's Claim answers with the record past its lease end too.
func (t *txn) HoldsClaim() bool { return true }

// Context returns parent carrying the transaction, for Tx.
func (t *txn) Context(parent context.Context) context.Context {
	return context.WithValue(parent, txKey{}, t)
}

// Commit completes the record inside the transaction, with the same token
// check as Store.Complete, and commits. When the record is not held by the
// token any more it rolls back and returns store.ErrLeaseLost. A COMMIT
// that fails (a deferred foreign key the handler's writes violate, a full
// disk) rolls everything back, the record's completion too, and returns
// the error; the engine then answers 503 and releases the key. When the
// handler ended the transaction itself, a c.Failed outcome is then stored
// on its own (token-checked) and any other is refused, since its writes
// may be gone.
func (t *txn) Commit(ctx context.Context, c store.Completion) error {
	if t.done {
		return errors.New("sqlitestore: commit: transaction already finished")
	}
	t.done = true
	args, err := completion(t.h, c)
	if err != nil {
		t.end(t.tx.Rollback) //nolint:errcheck // the error above is the one to report
		return err
	}
	live, err := inTx(ctx, t.tx)
	if err == nil && !live {
		// SQLite rolled the transaction back by itself (a statement was
		// interrupted, or failed with SQLITE_FULL, IOERR or NOMEM): the
		// record must not complete on its own, apart from writes that are
		// gone.
		err = sql.ErrTxDone
	}
	var res sql.Result
	if err == nil {
		res, err = t.tx.ExecContext(ctx, t.s.q.complete, args...)
	}
	if errors.Is(err, sql.ErrTxDone) {
		t.end(func() error { return nil }) //nolint:errcheck // gives the lock back
		return sqlbase.CommitEnded("sqlitestore", c.Failed, func() error {
			return t.s.Complete(ctx, t.h, c)
		})
	}
	if err == nil {
		if n, _ := res.RowsAffected(); n != 1 {
			err = store.ErrLeaseLost
		}
	}
	if err != nil {
		return sqlbase.CommitFailed("sqlitestore", err, sqlbase.IgnoreTxDone(t.end(t.tx.Rollback)))
	}
	if err := t.end(t.tx.Commit); err != nil {
		return fmt.Errorf("sqlitestore: commit: %w", err)
	}
	t.s.wake(t.h.Ref)
	return nil
}

// inTx reports whether tx's connection is still inside its transaction.
// SQLite rolls a transaction back by itself when a statement is
// interrupted or fails with SQLITE_FULL, IOERR or NOMEM, and database/sql
// does not know: the connection is then in autocommit mode, where each
// statement commits on its own. BEGIN fails inside a transaction; outside
// one it starts one, which inTx rolls back at once.
func inTx(ctx context.Context, tx *sql.Tx) (bool, error) {
	_, err := tx.ExecContext(ctx, "BEGIN")
	if err == nil {
		_, err = tx.ExecContext(ctx, "ROLLBACK")
		return false, err
	}
	if strings.Contains(err.Error(), "within a transaction") {
		return true, nil
	}
	return false, err
}

// Rollback rolls the transaction back. It is a no-op after Commit or a
// previous Rollback.
func (t *txn) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	if err := sqlbase.IgnoreTxDone(t.end(t.tx.Rollback)); err != nil {
		return fmt.Errorf("sqlitestore: rollback: %w", err)
	}
	return nil
}

// end runs the transaction's Commit or Rollback, then gives back the
// connection, the claim and the write lock, in that order.
func (t *txn) end(f func() error) error {
	err := f()
	t.s.setHeld(t.h.Ref, false)
	t.abandon()
	return err
}

// abandon gives back what begin took: the transaction (rolled back if it
// is still open), the connection and the write lock.
func (t *txn) abandon() {
	if t.tx != nil {
		t.tx.Rollback() //nolint:errcheck // a no-op (ErrTxDone) once it ended
	}
	if t.cancel != nil {
		t.cancel()
	}
	if t.conn != nil {
		t.conn.Close()
	}
	t.s.unlock()
}
