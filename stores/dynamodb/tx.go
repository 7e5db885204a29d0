package dynamostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idem/core/store"
)

// MaxTxItems is how many writes a handler may collect for one request:
// DynamoDB's TransactWriteItems takes 100 items, and the record's
// completion is one of them.
const MaxTxItems = 99

// ExactlyOnceStore is a Store whose engine commits the handler's own
// DynamoDB writes, collected through Tx(r.Context()), and the record's
// completion in one TransactWriteItems: both happen or neither does. Get
// one with Store.ExactlyOnce; it has every method of Store. The flow and
// its limits are in the package docs ("Exactly-once").
type ExactlyOnceStore struct {
	*Store
}

var (
	_ store.Store      = (*ExactlyOnceStore)(nil)
	_ store.TxBeginner = (*ExactlyOnceStore)(nil)
	_ store.Tx         = (*txn)(nil)
)

// ExactlyOnce returns s in exactly-once mode: pass it to idem.New instead
// of s. Both use the same table.
func (s *Store) ExactlyOnce() *ExactlyOnceStore { return &ExactlyOnceStore{Store: s} }

// BeginTx implements store.TxBeginner. It sends nothing: the transaction
// is the list of writes the handler collects, sent with the completion by
// Commit, whose condition on the record's token decides whether the claim
// is still held. The claim is kept alive meanwhile by the engine's
// heartbeat, as in plain mode (the Tx is no store.ClaimHolder).
func (s *ExactlyOnceStore) BeginTx(ctx context.Context, h store.Hold) (store.Tx, error) {
	return &txn{s: s.Store, hold: h, w: &TxWriter{}}, nil
}

type txKey struct{}

// Tx returns the writer that collects the handler's writes for the
// request whose context is ctx, and true; or nil and false when there is
// none (the store is not in exactly-once mode, or the request was not
// claimed). The writes are sent when the engine stores the response, in
// one TransactWriteItems with the record: a condition of theirs that
// fails, or any other failure, commits nothing, answers 503 and releases
// the key, so the client's retry runs the handler again.
//
//	w, _ := dynamostore.Tx(r.Context())
//	err := w.Put(types.Put{TableName: aws.String("orders"), Item: item,
//		ConditionExpression: aws.String("attribute_not_exists(id)")})
func Tx(ctx context.Context) (*TxWriter, bool) {
	t, ok := ctx.Value(txKey{}).(*txn)
	if !ok {
		return nil, false
	}
	return t.w, true
}

// TxWriter collects a handler's writes for its request's transaction. Its
// methods are safe for concurrent use. They return ErrTxFull past
// MaxTxItems writes and ErrTxDone once the transaction was committed or
// rolled back (a handler that streams its response: the commit happens
// when streaming starts). DynamoDB checks the writes themselves at
// commit: no two on one item (nor on the idempotency record), at most 4
// MB in all.
type TxWriter struct {
	mu    sync.Mutex
	items []types.TransactWriteItem
	done  bool
}

// Put adds a PutItem to the transaction.
func (w *TxWriter) Put(p types.Put) error { return w.add(types.TransactWriteItem{Put: &p}) }

// Update adds an UpdateItem to the transaction.
func (w *TxWriter) Update(u types.Update) error { return w.add(types.TransactWriteItem{Update: &u}) }

// Delete adds a DeleteItem to the transaction.
func (w *TxWriter) Delete(d types.Delete) error { return w.add(types.TransactWriteItem{Delete: &d}) }

// ConditionCheck adds a condition on an item that the transaction does
// not write: the commit fails unless it holds.
func (w *TxWriter) ConditionCheck(c types.ConditionCheck) error {
	return w.add(types.TransactWriteItem{ConditionCheck: &c})
}

// Len reports how many writes the transaction holds.
func (w *TxWriter) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.items)
}

func (w *TxWriter) add(item types.TransactWriteItem) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.done:
		return ErrTxDone
	case len(w.items) >= MaxTxItems:
		return ErrTxFull
	}
	w.items = append(w.items, item)
	return nil
}

// close ends the collection and returns the writes.
func (w *TxWriter) close() ([]types.TransactWriteItem, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, false
	}
	w.done = true
	return w.items, true
}

// txn is the store.Tx an ExactlyOnceStore hands the engine.
type txn struct {
	s    *Store
	hold store.Hold
	w    *TxWriter
}

// Context returns parent carrying the transaction, for Tx.
func (t *txn) Context(parent context.Context) context.Context {
	return context.WithValue(parent, txKey{}, t)
}

// Rollback drops the collected writes; nothing was sent. It is a no-op
// after Commit or a previous Rollback.
func (t *txn) Rollback(context.Context) error {
	t.w.close()
	return nil
}

// Commit sends the handler's writes and the record's completion in one
// TransactWriteItems (only the completion, as Store.Complete, when the
// handler collected none). The completion's condition on the token makes
// it store.ErrLeaseLost, writing nothing, when the claim is no longer
// held; a failed condition of the handler's writes returns an error
// wrapping ErrTxConflict. The call carries a ClientRequestToken derived
// from the claim's, so the SDK's retries of it are idempotent. The
// handler cannot end the transaction (it only collects writes, which
// Commit alone sends), so c.Failed changes nothing here.
func (t *txn) Commit(ctx context.Context, c store.Completion) error {
	items, ok := t.w.close()
	if !ok {
		return errors.New("dynamostore: commit: transaction already finished")
	}
	return t.s.complete(ctx, "commit", t.hold, &c, items)
}

// requestToken derives the TransactWriteItems ClientRequestToken (at most
// 36 characters) from the table, the record's key, the claim's token, the
// expiry and the encoding level: DynamoDB keeps client tokens
// account-wide, the same token may complete records in other tables or
// under other keys, and a later attempt of the same completion (the
// engine's background retry, with a new expiry) must not be refused as
// an IdempotentParameterMismatch: its token check answers it.
func (s *Store) requestToken(rec map[string]types.AttributeValue, token string, expiresAt time.Time, attempt int) string {
	h := sha256.New()
	exp := strconv.FormatInt(expiresAt.UnixNano(), 10)
	for _, part := range []string{s.table, keyString(rec[s.pk]), keyString(rec[s.sk]), token, exp} {
		h.Write(strconv.AppendInt(nil, int64(len(part)), 10))
		h.Write([]byte{':'})
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil)[:16]) + "-" + strconv.Itoa(attempt)
}

func keyString(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

// reasons returns the cancellation reasons of a cancelled transaction of
// n items, or nil.
func reasons(err error, n int) []types.CancellationReason {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) && len(tce.CancellationReasons) == n {
		return tce.CancellationReasons
	}
	return nil
}

func code(r types.CancellationReason) string {
	if r.Code == nil {
		return ""
	}
	return *r.Code
}

// ownTooLarge reports a transaction of n handler writes (of all in all)
// cancelled because the record's completion or a chunk of its body made
// an item too large.
func ownTooLarge(err error, n, all int) bool {
	rs := reasons(err, all)
	if rs == nil {
		return false
	}
	for _, r := range rs[n:] {
		if code(r) == "ValidationError" && r.Message != nil && strings.Contains(*r.Message, "exceeded the maximum allowed size") {
			return true
		}
	}
	return false
}

// commitError turns a failed TransactWriteItems of n handler writes (of
// all in all, the record's completion last) into the Store's error.
func commitError(op string, err error, n, all int) error {
	rs := reasons(err, all)
	if rs == nil {
		return fmt.Errorf("dynamostore: %s: %w", op, err)
	}
	if code(rs[all-1]) == "ConditionalCheckFailed" {
		return store.ErrLeaseLost
	}
	for i, r := range rs[:n] {
		if code(r) == "ConditionalCheckFailed" {
			return fmt.Errorf("dynamostore: %s: %w (write %d of %d): %w", op, ErrTxConflict, i+1, n, err)
		}
	}
	return fmt.Errorf("dynamostore: %s: %w", op, err)
}
