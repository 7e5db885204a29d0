package sqlbase

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem/core/store"
)

// ErrTxFailed is wrapped by the error of an exactly-once commit that
// refuses to store a success: the handler's transaction was ended (by the
// handler, or by the server) or failed before the engine could commit it,
// so its writes may be gone, but its response reports success.
var ErrTxFailed = errors.New("the handler's transaction was ended or failed, but its response reports success")

// CommitEnded is the end of an exactly-once Commit whose transaction the
// handler (or the server) ended or failed before the engine could commit
// the record in it. A failed outcome (store.Completion.Failed: an HTTP
// 4xx, a final error) says that nothing happened, which is what remains,
// so it is stored on its own (complete is the store's token-checked
// Complete); any other is refused with an error wrapping ErrTxFailed, and
// the engine answers 500 and releases the key.
func CommitEnded(name string, failed bool, complete func() error) error {
	if !failed {
		return fmt.Errorf("%s: commit: %w", name, ErrTxFailed)
	}
	return complete()
}

// CommitFailed is the error of an exactly-once Commit whose completion
// failed with err, after which it rolled back with rollbackErr: err itself
// when it is store.ErrLeaseLost (the record is not the claim's any more),
// otherwise err, prefixed with the store's name, joined with rollbackErr.
func CommitFailed(name string, err, rollbackErr error) error {
	if errors.Is(err, store.ErrLeaseLost) {
		return err
	}
	return errors.Join(fmt.Errorf("%s: commit: %w", name, err), rollbackErr)
}

// IgnoreTxDone returns nil for sql.ErrTxDone (the transaction had ended
// already) and err otherwise.
func IgnoreTxDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// WriteResult is the outcome of a token-checked write (a Complete,
// Release, Evict or Extend) that ran as one statement, changed n rows and
// failed with err: err prefixed with the store's name and the operation
// ("release"), store.ErrLeaseLost when it changed no row (the token does
// not hold the record any more, or it is gone), nil when it changed the
// record.
func WriteResult(name, op string, n int64, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %s: %w", name, op, err)
	case n == 0:
		return store.ErrLeaseLost
	}
	return nil
}
