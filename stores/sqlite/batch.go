package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// batchTimeout bounds one batch of writes (see write). It is not the
// callers' context: a batch runs the writes of many callers.
const batchTimeout = 30 * time.Second

// writeOp is one statement a caller of write waits on.
type writeOp struct {
	q    string
	args []any
	n    int64 // rows changed, once done
	err  error
	done chan struct{}
}

// batch is the writes waiting for the write lock, guarded by mu.
type batch struct {
	mu      sync.Mutex
	pending []*writeOp
	runs    int // batches run, for tests
}

// write runs one statement under the write lock and returns how many rows
// it changed. Writes that arrive while another holds the lock wait
// together: the next caller to take the lock runs every waiting statement
// in one transaction, one commit and one fsync for all of them (group
// commit), and each caller gets its own statement's outcome. A caller
// whose ctx ends before its statement is taken into a batch withdraws it
// and returns the context's error; once taken, it waits for the batch.
func (s *Store) write(ctx context.Context, q string, args ...any) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("before writing: %w", context.Cause(ctx))
	}
	op := &writeOp{q: q, args: args, done: make(chan struct{})}
	s.batch.mu.Lock()
	s.batch.pending = append(s.batch.pending, op)
	s.batch.mu.Unlock()
	select {
	case s.sem <- struct{}{}:
		// Nobody else runs a batch now: op is either done or pending.
		select {
		case <-op.done:
		default:
			s.runBatch()
		}
		s.unlock()
	case <-op.done:
	case <-ctx.Done():
		if s.withdraw(op) {
			return 0, fmt.Errorf("waiting for the write lock: %w", context.Cause(ctx))
		}
	}
	<-op.done
	return op.n, op.err
}

// withdraw removes op from the pending writes; false when a batch has
// taken it already.
func (s *Store) withdraw(op *writeOp) bool {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	for i, p := range s.batch.pending {
		if p == op {
			s.batch.pending = append(s.batch.pending[:i], s.batch.pending[i+1:]...)
			return true
		}
	}
	return false
}

// runBatch runs every pending write; the caller holds the write lock. One
// write runs on its own (autocommit); several run in one transaction.
// A statement that fails leaves the others alone (SQLite undoes only that
// statement), unless SQLite rolled the whole transaction back for it
// (SQLITE_FULL, IOERR, NOMEM, an interrupt): then every write runs again
// on its own, so each reports what became of it. A COMMIT that fails
// fails them all, having written nothing.
func (s *Store) runBatch() {
	s.batch.mu.Lock()
	ops := s.batch.pending
	s.batch.pending = nil
	s.batch.runs++
	s.batch.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	defer func() {
		for _, op := range ops {
			close(op.done)
		}
	}()
	if len(ops) == 1 {
		ops[0].exec(s.db.ExecContext(ctx, ops[0].q, ops[0].args...))
		return
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		for _, op := range ops {
			op.err = err
		}
		return
	}
	for _, op := range ops {
		op.exec(tx.ExecContext(ctx, op.q, op.args...))
		if op.err == nil {
			continue
		}
		if live, err := inTx(ctx, tx); err != nil || !live {
			tx.Rollback() //nolint:errcheck // gone already; this frees the connection
			for _, op := range ops {
				op.n, op.err = 0, nil
				op.exec(s.db.ExecContext(ctx, op.q, op.args...))
			}
			return
		}
	}
	if err := tx.Commit(); err != nil {
		for _, op := range ops {
			op.n, op.err = 0, err
		}
	}
}

func (op *writeOp) exec(res interface{ RowsAffected() (int64, error) }, err error) {
	if err != nil {
		op.err = err
		return
	}
	op.n, op.err = res.RowsAffected()
}
