package mysqlstore

import (
	"context"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// watchChunk is how many keys one poll statement reads at most.
const watchChunk = 100

// Watch implements store.Notifier for the engine's wait mode. MySQL has no
// LISTEN/NOTIFY, so a waiter is woken in one of two ways:
//
//   - A Complete, Release or Delete through this Store wakes the waiters of
//     its key in this process at once, without a statement.
//   - One poller per Store reads the state of every watched key with one
//     consistent read per 100 keys, every watch interval (default 100ms),
//     and wakes the waiters of a key whose row is gone, completed, or held
//     by another claim than when the poller first saw it. That is how a
//     waiter learns about another process's completion: within one
//     interval plus one query. An in-progress record whose lease ended
//     does not wake it: an exactly-once transaction may hold it past its
//     lease (the waiter would only find it held again), and a waiter
//     polls by itself as well, so it takes an abandoned claim over
//     within its own poll interval.
//
// The poller runs only while there are watches, and stops on Close; a
// failing poll wakes the waiters of its keys (so the engine polls itself)
// and is retried on the next tick. Wake-ups may be spurious: a key with no
// record at all is reported at once. After Close, Watch returns ErrClosed.
func (s *Store) Watch(ctx context.Context, r store.Ref) (<-chan struct{}, func(), error) {
	return s.watch.Watch(ctx, s.base, sqlbase.WatchKey{Scope: scopeKey(r.Scope), Key: r.Key})
}

// wake fires the waiters of (scope, key) in this process.
func (s *Store) wake(scope, key string) {
	s.watch.Wake(sqlbase.WatchKey{Scope: scopeKey(scope), Key: key})
}

// readWatched reads the rows of keys with one consistent read, for the
// poller (see Watch).
func (s *Store) readWatched(ctx context.Context, keys []sqlbase.WatchKey) (map[sqlbase.WatchKey]sqlbase.WatchRow, error) {
	scopes := make([]string, len(keys))
	names := make([]string, len(keys))
	for i, k := range keys {
		scopes[i], names[i] = k.Scope, k.Key
	}
	rows, err := s.db.QueryContext(ctx, s.q.watch.render(pairList(scopes, names)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[sqlbase.WatchKey]sqlbase.WatchRow, len(keys))
	for rows.Next() {
		var scope, key, token []byte
		var r sqlbase.WatchRow
		if err := rows.Scan(&scope, &key, &token, &r.State); err != nil {
			return nil, err
		}
		r.Token = string(token)
		out[sqlbase.WatchKey{Scope: string(scope), Key: string(key)}] = r
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, s.readHeld(ctx, keys, out)
}

// heldToken is the token readWatched reports for a claim an exactly-once
// transaction holds but has not committed (ClaimTx): the poller sees it
// in progress, and sees its commit or its end as a change.
const heldToken = "\x00held"

// readHeld completes a poll's rows: a key whose committed row is missing
// or not in progress may be held by a claim not yet committed (ClaimTx),
// which the user-level lock tells; such a key is reported in progress.
// It costs one statement, and only when the poll found such a key.
func (s *Store) readHeld(ctx context.Context, keys []sqlbase.WatchKey, rows map[sqlbase.WatchKey]sqlbase.WatchRow) error {
	var ask []sqlbase.WatchKey
	for _, k := range keys {
		if r, ok := rows[k]; !ok || r.State != int64(1) {
			ask = append(ask, k)
		}
	}
	if len(ask) == 0 {
		return nil
	}
	q := make([]byte, 0, 7+len(ask)*200)
	q = append(q, "SELECT "...)
	held := make([]any, len(ask))
	dst := make([]bool, len(ask))
	for i, k := range ask {
		if i > 0 {
			q = append(q, ", "...)
		}
		q = append(q, s.q.isHeld.render(s.table, k.Scope, k.Key)...)
		held[i] = &dst[i]
	}
	if err := s.db.QueryRowContext(ctx, string(q)).Scan(held...); err != nil {
		return err
	}
	for i, k := range ask {
		if dst[i] {
			rows[k] = sqlbase.WatchRow{Token: heldToken, State: 1}
		}
	}
	return nil
}
