package mysqlstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// ExactlyOnceStore is a Store whose engine runs each claimed request in a
// database transaction (store.TxBeginner, store.TxClaimer): the claim,
// the handler's writes, made through Tx(r.Context()), and the completed
// record commit together or not at all, in one durable commit. Get one
// with Store.ExactlyOnce; it has every method of Store. Transactions run
// at READ COMMITTED unless WithTxOptions says otherwise.
// Each request in flight holds one pooled connection, and its rows and
// its record's row stay locked, until the commit; the transaction holds
// the claim (store.ClaimHolder), so no heartbeat needs a connection of its
// own. The flow, the isolation levels, the deadlock rule, pool sizing and
// the costs are in the package docs ("Exactly-once mode").
type ExactlyOnceStore struct {
	*Store
	txOptions sql.TxOptions
}

var (
	_ store.Store          = (*ExactlyOnceStore)(nil)
	_ store.TxBeginner     = (*ExactlyOnceStore)(nil)
	_ store.TxClaimer      = (*ExactlyOnceStore)(nil)
	_ store.Getter         = (*ExactlyOnceStore)(nil)
	_ store.Deleter        = (*ExactlyOnceStore)(nil)
	_ store.ExpiredDeleter = (*ExactlyOnceStore)(nil)
	_ store.Notifier       = (*ExactlyOnceStore)(nil)
	_ store.Extender       = (*ExactlyOnceStore)(nil)
	_ store.Evicter        = (*ExactlyOnceStore)(nil)
	_ store.Clock          = (*ExactlyOnceStore)(nil)
	_ store.Tx             = (*txn)(nil)
)

// ExactlyOnce returns s in exactly-once mode: pass it to idem.New instead
// of s. Both share the same table, sweeper and poller; closing either
// closes both. Handlers reach their transaction with Tx.
//
//	engine, err := idem.New(store.ExactlyOnce())
func (s *Store) ExactlyOnce() *ExactlyOnceStore {
	return &ExactlyOnceStore{Store: s, txOptions: sql.TxOptions{Isolation: sql.LevelReadCommitted}}
}

// WithTxOptions returns a copy of s whose transactions start with opts,
// for example sql.TxOptions{Isolation: sql.LevelSerializable}; the zero
// value means the server's default (REPEATABLE READ unless configured
// otherwise, and one round trip less per request). A failure at COMMIT is
// a failed commit: the engine answers 500 and releases the key.
func (s *ExactlyOnceStore) WithTxOptions(opts sql.TxOptions) *ExactlyOnceStore {
	return &ExactlyOnceStore{Store: s.Store, txOptions: opts}
}

type txKey struct{}

// Tx returns the transaction an exactly-once engine started for the
// request whose context is ctx (r.Context(); with Gin c.Request.Context(),
// with Echo c.Request().Context()), or nil when there is none. Run the
// handler's queries on it and never end it: the engine commits it with the
// record. Answer 5xx when a statement fails, and the engine rolls back and
// releases the key.
//
// If the transaction ends otherwise, the store sees to it that no record
// says a success whose writes are gone: after a rollback (InnoDB's, to a
// deadlock; ROLLBACK as SQL) the record is not completed, the request gets
// 500 and its key is released, and what the handler ran after the
// rollback is rolled back too (the connection runs with autocommit off).
// After its Rollback method a failed outcome (an HTTP 4xx, a final error)
// is stored on its own and any other fails. A COMMIT, as its Commit method, as SQL or
// implied by DDL, splits the transaction: what came before it commits
// without the record (so a retry runs it again), what comes after commits
// with it.
func Tx(ctx context.Context) *sql.Tx {
	if t, ok := ctx.Value(txKey{}).(*txn); ok {
		return t.tx
	}
	return nil
}

// BeginTx implements store.TxBeginner, for a claim Claim committed: the
// engine calls ClaimTx instead, which claims in the transaction and
// saves the claim's own commit. It takes a connection from the pool for
// the request and, on it:
//
//	SET autocommit = 0, @idem_hold = GET_LOCK(<name of the record>, 0)
//	[SET TRANSACTION ISOLATION LEVEL ...]    -- unless WithTxOptions gave none
//	START TRANSACTION
//	UPDATE <table> SET tx_mark = <random> WHERE <the record> AND token = <token> AND state = 1
//
// The UPDATE checks that the claim is still held (otherwise BeginTx
// rolls back and returns store.ErrLeaseLost) and locks the record's row
// until the transaction ends: the transaction holds the claim by itself
// (store.ClaimHolder), so the engine sends no heartbeat for it, and the
// request needs no connection but this one however long its handler runs.
// Other requests' claims learn that it is held from the user-level lock
// (GET_LOCK, which never waits) and answer with the in-progress record at
// once, past its lease end too, instead of waiting for the row lock. The
// mark lets Commit tell that the server rolled the transaction back (see
// ErrRolledBack); autocommit off makes what the handler runs after such a
// rollback open a new transaction, which Commit rolls back, rather than
// commit on its own. Commit and Rollback restore autocommit and release
// the lock before the connection goes back to the pool.
//
// ctx bounds only acquiring a connection and starting; the transaction
// outlives it (database/sql would otherwise roll it back when the
// engine's store timeout ends).
func (s *ExactlyOnceStore) BeginTx(ctx context.Context, h store.Hold) (store.Tx, error) {
	if err := checkLen("key", h.Key, maxKey); err != nil {
		return nil, err
	}
	if err := checkLen("token", h.Token, maxToken); err != nil {
		return nil, err
	}
	// Prepare the completion before taking a connection: preparing takes
	// one of its own (see lazyStmt.get).
	st, done, err := s.commit.get(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: begin: %w", err)
	}
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	t := &txn{s: s.Store, cancel: cancel, stmtDone: done, stmt: st, scope: scopeKey(h.Scope), hold: h}
	err = t.begin(txCtx, s.txOptions)
	if !stop() && err == nil {
		// ctx ended while starting: database/sql rolls the transaction
		// back, if it started at all.
		err = context.Cause(ctx)
	}
	if err != nil {
		t.abandon()
		if errors.Is(err, store.ErrLeaseLost) {
			return nil, err
		}
		return nil, fmt.Errorf("mysqlstore: begin: %w", err)
	}
	return t, nil
}

// txn is the store.Tx an ExactlyOnceStore hands the engine.
type txn struct {
	s        *Store
	conn     *sql.Conn // the request's connection, from BeginTx to the end
	held     bool      // holdSQL ran: autocommit is off and the lock may be held
	tx       *sql.Tx
	cancel   context.CancelFunc // ends the transaction's context
	stmt     *sql.Stmt          // commitSQL, prepared on the pool
	stmtDone func()
	mark     []byte
	scope    string       // as stored (scopeKey)
	hold     store.Hold   // as the engine gave it
	claim    *store.Claim // the claim made in the transaction (ClaimTx), or nil (BeginTx)
	eo       *ExactlyOnceStore
	done     bool
}

var _ store.ClaimHolder = (*txn)(nil)

// HoldsClaim implements store.ClaimHolder: the transaction holds the
// record's row lock from BeginTx until it ends.
func (t *txn) HoldsClaim() bool { return true }

// begin takes the connection and starts the transaction (see BeginTx).
func (t *txn) begin(ctx context.Context, opts sql.TxOptions) error {
	conn, err := t.s.db.Conn(ctx)
	if err != nil {
		return err
	}
	t.conn = conn
	t.held = true // from here on, end restores the session or discards it
	if _, err := conn.ExecContext(ctx, t.s.q.hold.render(t.s.table, t.scope, t.hold.Key)); err != nil {
		return err
	}
	var o *sql.TxOptions
	if opts != (sql.TxOptions{}) {
		o = &opts
	}
	if t.tx, err = conn.BeginTx(ctx, o); err != nil {
		return err
	}
	t.mark = make([]byte, 16)
	rand.Read(t.mark)
	res, err := t.tx.ExecContext(ctx, t.s.q.mark.render(t.scope, t.hold.Key, t.hold.Token, t.mark))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return store.ErrLeaseLost
	}
	return nil
}

// Context returns parent carrying the transaction, for Tx.
func (t *txn) Context(parent context.Context) context.Context {
	return context.WithValue(parent, txKey{}, t)
}

// Commit completes the record inside the transaction, with the same token
// check as Store.Complete plus the transaction's mark, and commits. A
// result larger than MaxResponseSize is stored without its body. When
// the record was not completed it rolls back, commits nothing and returns
// store.ErrLeaseLost (another request took the key over, which cannot
// happen while the transaction holds it, or the record is gone) or an
// error wrapping ErrRolledBack (the server had rolled the transaction
// back: the handler's writes are gone). A transaction the handler ended
// with Commit or Rollback is failed: a failed outcome (c.Failed: an HTTP
// 4xx, a final error) is then stored on its own (token-checked), any
// other is refused.
func (t *txn) Commit(ctx context.Context, c store.Completion) error {
	if t.done {
		return errors.New("mysqlstore: commit: transaction already finished")
	}
	t.done = true
	defer t.cancel()
	args, err := t.s.completion(t.hold, c)
	if err != nil {
		t.end(ctx, t.tx.Rollback) //nolint:errcheck // the error above is the one to report
		return err
	}
	st := t.tx.StmtContext(ctx, t.stmt)
	res, err := st.ExecContext(ctx, append(args, t.mark)...)
	st.Close()
	if errors.Is(err, sql.ErrTxDone) {
		t.finish(nil) // the handler ended it: give the connection back first
		return sqlbase.CommitEnded("mysqlstore", c.Failed, func() error {
			return t.completeAfterEnd(ctx, c)
		})
	}
	switch {
	case deadlock(err):
		err = fmt.Errorf("%w: %w", ErrRolledBack, err)
	case err == nil:
		if n, _ := res.RowsAffected(); n != 1 {
			err = t.lost(ctx)
		}
	}
	if err != nil {
		rbErr := t.end(ctx, t.tx.Rollback)
		if ctx.Err() != nil {
			rbErr = nil // the rollback ran out of time too; the error says why
		}
		return sqlbase.CommitFailed("mysqlstore", err, sqlbase.IgnoreTxDone(rbErr))
	}
	if err := t.end(ctx, t.tx.Commit); err != nil {
		return fmt.Errorf("mysqlstore: commit: %w", err)
	}
	t.s.wake(t.hold.Scope, t.hold.Key)
	return nil
}

// lost tells why the completion matched no row: the record is not held
// by the token any more (store.ErrLeaseLost), or it is, without the
// transaction's mark, because the server rolled the transaction back.
// After such a rollback this read runs in a new transaction, which Commit
// then rolls back with whatever the handler ran after it.
func (t *txn) lost(ctx context.Context) error {
	var token, mark []byte
	var state int64
	err := t.tx.QueryRowContext(ctx, t.s.q.holder.render(t.scope, t.hold.Key)).Scan(&token, &state, &mark)
	switch {
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("the completion matched no row, and reading why failed: %w", err)
	case t.claim != nil:
		// The claim was made in the transaction: nothing else can take
		// the record while it lives, so a claim that is not there any
		// more, or not with the mark, went with a rollback.
		return ErrRolledBack
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrLeaseLost
	case string(token) == t.hold.Token && state == int64(store.InProgress) && !bytes.Equal(mark, t.mark):
		return ErrRolledBack
	}
	return store.ErrLeaseLost
}

// Rollback rolls the transaction back. It is a no-op after Commit or a
// previous Rollback.
func (t *txn) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.cancel()
	if err := sqlbase.IgnoreTxDone(t.end(ctx, t.tx.Rollback)); err != nil {
		return fmt.Errorf("mysqlstore: rollback: %w", err)
	}
	return nil
}

// end runs the transaction's Commit or Rollback, which database/sql and
// the driver do not bound by a context, then gives the connection back
// (finish), and returns when the first is done or when ctx ends,
// whichever comes first: a hung server must not hold the request past
// the store timeout. An abandoned COMMIT finishes (or fails) in the
// background, and gives the connection back then; its outcome is
// unknown, as for a connection lost during COMMIT.
func (t *txn) end(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() {
		err := f()
		t.finish(err)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// finish gives the connection back to the pool once the transaction has
// ended (ended is what its Commit or Rollback returned): with autocommit
// on again and the user-level lock released, in one statement. When the
// transaction may not have ended (its end failed) or that statement
// fails, the connection is discarded instead: turning autocommit on would
// commit an open transaction, and a closed connection ends the session,
// its transaction and its lock.
func (t *txn) finish(ended error) {
	if t.stmtDone != nil {
		t.stmtDone()
		t.stmtDone = nil
	}
	if t.conn == nil {
		return
	}
	conn := t.conn
	t.conn = nil
	if t.held {
		err := sqlbase.IgnoreTxDone(ended)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), restoreTimeout)
			_, err = conn.ExecContext(ctx, t.s.q.unhold.render(t.s.table, t.scope, t.hold.Key))
			cancel()
		}
		if err != nil {
			conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // marks it for discarding
		}
	}
	conn.Close()
}

// abandon ends a transaction BeginTx could not finish starting.
func (t *txn) abandon() {
	var err error
	if t.tx != nil {
		err = t.tx.Rollback()
		if errors.Is(err, sql.ErrTxDone) {
			// database/sql is rolling it back on its own, its context
			// having ended: a statement sent before that ROLLBACK lands
			// (finish's SET autocommit = 1) would commit it instead.
			// The connection is discarded, which ends it for sure.
			err = errAbandoned
		}
	}
	t.finish(err)
	t.cancel()
}

// errAbandoned marks a transaction whose end abandon cannot vouch for.
var errAbandoned = errors.New("mysqlstore: transaction abandoned while its context ended")

// restoreTimeout bounds giving a connection back (finish).
const restoreTimeout = 5 * time.Second
