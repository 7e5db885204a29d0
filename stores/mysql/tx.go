package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	idem "github.com/idemkit/idem/core"
)

// ExactlyOnceStore is a Store whose engine runs each claimed request in a
// database transaction (idem.TxBeginner): the handler's writes, made
// through Tx(r.Context()), and the completed record commit together or not
// at all. Get one with Store.ExactlyOnce; it has every method of Store.
// Transactions run at READ COMMITTED unless WithTxOptions says otherwise.
// Each request in flight holds one pooled connection, and its rows stay
// locked, until the commit. The flow, the isolation level and the costs
// are in the package docs ("Exactly-once mode").
type ExactlyOnceStore struct {
	*Store
	txOptions sql.TxOptions
}

var (
	_ idem.Store      = (*ExactlyOnceStore)(nil)
	_ idem.TxBeginner = (*ExactlyOnceStore)(nil)
	_ idem.Getter     = (*ExactlyOnceStore)(nil)
	_ idem.Deleter    = (*ExactlyOnceStore)(nil)
	_ idem.Notifier   = (*ExactlyOnceStore)(nil)
	_ idem.Extender   = (*ExactlyOnceStore)(nil)
	_ idem.Tx         = (*txn)(nil)
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
// record. Its Commit would commit the writes without the record, so a
// retry runs them again. A transaction ended otherwise (ROLLBACK or COMMIT
// as SQL, an implicit commit such as DDL, a deadlock, which InnoDB resolves
// by rolling the whole transaction back) leaves the connection outside a
// transaction and the record would commit on its own: answer 5xx when a
// statement fails, and the engine rolls back and releases the key. After
// its Rollback an answer of 400 or more is stored on its own and one
// below 400 fails.
func Tx(ctx context.Context) *sql.Tx {
	if t, ok := ctx.Value(txKey{}).(*txn); ok {
		return t.tx
	}
	return nil
}

// BeginTx implements idem.TxBeginner: it starts a transaction on the
// store's DB. ctx bounds only acquiring a connection and starting; the
// transaction outlives it (database/sql would otherwise roll it back when
// the engine's store timeout ends).
func (s *ExactlyOnceStore) BeginTx(ctx context.Context, scope, key, token string) (idem.Tx, error) {
	// Prepare the completion before taking a connection: preparing takes
	// one of its own (see lazyStmt.get).
	st, done, err := s.complete.get(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: begin: %w", err)
	}
	txCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	var opts *sql.TxOptions
	if s.txOptions != (sql.TxOptions{}) {
		opts = &s.txOptions
	}
	tx, err := s.db.BeginTx(txCtx, opts)
	if !stop() {
		// ctx ended while starting: database/sql rolls the transaction
		// back, if it started at all.
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		done()
		return nil, fmt.Errorf("mysqlstore: begin: %w", err)
	}
	return &txn{s: s.Store, tx: tx, cancel: cancel, stmt: st, stmtDone: done, scope: scope, key: key, token: token}, nil
}

// txn is the idem.Tx an ExactlyOnceStore hands the engine.
type txn struct {
	s                 *Store
	tx                *sql.Tx
	cancel            context.CancelFunc // ends the transaction's context
	stmt              *sql.Stmt          // completeSQL, prepared on the pool
	stmtDone          func()
	scope, key, token string
	done              bool
}

// Context returns parent carrying the transaction, for Tx.
func (t *txn) Context(parent context.Context) context.Context {
	return context.WithValue(parent, txKey{}, t)
}

// Commit completes the record inside the transaction, with the same token
// check as Store.Complete, and commits. A response larger than
// MaxResponseSize is stored without its body. On idem.ErrLeaseLost it rolls back
// and commits nothing. A transaction the handler ended with Commit or
// Rollback is failed: an answer of 400 or more is then stored on its own
// (token-checked), one below 400 is refused.
func (t *txn) Commit(ctx context.Context, resp idem.Response, now, expiresAt time.Time) error {
	if t.done {
		return errors.New("mysqlstore: commit: transaction already finished")
	}
	t.done = true
	defer t.cancel()
	defer t.stmtDone()
	args, err := t.s.completion(t.scope, t.key, t.token, resp, expiresAt)
	if err != nil {
		t.end(ctx, t.tx.Rollback) //nolint:errcheck // the error above is the one to report
		return err
	}
	st := t.tx.StmtContext(ctx, t.stmt)
	res, err := st.ExecContext(ctx, args...)
	st.Close()
	if errors.Is(err, sql.ErrTxDone) {
		if resp.Status < 400 {
			return fmt.Errorf("mysqlstore: commit: %w", errTxFailed)
		}
		// The handler rolled back and answered an error: none of its
		// writes remain, which is what the answer says, so it is stored.
		return t.s.Complete(ctx, t.scope, t.key, t.token, resp, now, expiresAt)
	}
	if err == nil {
		if n, _ := res.RowsAffected(); n != 1 {
			err = idem.ErrLeaseLost
		}
	}
	if err != nil {
		rbErr := t.end(ctx, t.tx.Rollback)
		if errors.Is(err, idem.ErrLeaseLost) {
			return err
		}
		if ctx.Err() != nil {
			rbErr = nil // the rollback ran out of time too; the error says why
		}
		return errors.Join(fmt.Errorf("mysqlstore: commit: %w", err), ignoreDone(rbErr))
	}
	if err := t.end(ctx, t.tx.Commit); err != nil {
		return fmt.Errorf("mysqlstore: commit: %w", err)
	}
	t.s.wake(t.scope, t.key)
	return nil
}

// Rollback rolls the transaction back. It is a no-op after Commit or a
// previous Rollback.
func (t *txn) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.cancel()
	defer t.stmtDone()
	if err := ignoreDone(t.end(ctx, t.tx.Rollback)); err != nil {
		return fmt.Errorf("mysqlstore: rollback: %w", err)
	}
	return nil
}

// end runs the transaction's Commit or Rollback, which database/sql and
// the driver do not bound by a context, and returns when it is done or
// when ctx ends, whichever comes first: a hung server must not hold the
// request past the store timeout. An abandoned COMMIT finishes (or fails)
// in the background; its outcome is then unknown, as for a connection
// lost during COMMIT.
func (t *txn) end(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

var errTxFailed = errors.New("the handler ended its transaction, but its response reports success")
