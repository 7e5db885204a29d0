// Package pgxstore is an idem.Store on PostgreSQL, built on
// github.com/jackc/pgx/v5: durable, shared by every instance of a service,
// and able to commit a handler's own writes together with the idempotency
// record (exactly-once mode).
//
// # Setup
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
//	store, err := pgxstore.New(pool)            // table "idempotency_keys"
//	err = store.CreateSchema(ctx)               // or ship pgxstore.Schema(...) as a migration
//	engine, err := idem.New(store)
//	defer store.Close()
//
// New accepts anything with pgx's Exec, Query, QueryRow and Begin: a
// *pgxpool.Pool (what production code wants), a *pgx.Conn or a pgx.Tx
// (see DB for what each gives up). Options: WithTable, WithSweepInterval,
// WithNotify and WithLogger.
//
// # Schema
//
// One table, primary key (scope, key), an index on expires_at. Schema
// returns the SQL for a table name, for Flyway, Atlas, goose or psql;
// CreateSchema runs the same SQL under an advisory lock, so it is safe at
// every start-up of every instance.
//
// # Round trips and locks
//
// Claim, Complete, Release, Get, Delete and Extend are one statement each,
// committed on its own: no transaction and no row lock is held while a
// handler runs. A first request costs two statements (claim, complete); a
// replay, a 409 and a 422 cost one claim, which reads the row and writes
// nothing (no row lock, no transaction id, no WAL, no fsync), so retries of
// a hot key never queue on its row.
//
// The claim is one statement with three data-modifying CTEs that share a
// snapshot:
//
//	WITH cur AS (SELECT ... WHERE scope = $1 AND key = $2),
//	ins AS (INSERT ... SELECT ... WHERE NOT EXISTS (SELECT 1 FROM cur)
//	        ON CONFLICT (scope, key) DO NOTHING RETURNING 1),
//	upd AS (UPDATE ... WHERE scope = $1 AND key = $2
//	          AND (expires_at <= $now OR (state = 1 AND lease_end <= $now))
//	          AND EXISTS (SELECT 1 FROM cur WHERE <the same condition>)
//	        RETURNING 1)
//	SELECT acquired, cur.* FROM (VALUES (1)) one LEFT JOIN cur ON true
//
// A live row only ever reaches cur: ins is cut off by a one-time filter,
// and upd's scan is never run, so nothing is locked or written. This is
// why the store does not use INSERT ... ON CONFLICT DO UPDATE ... WHERE,
// which locks the conflicting row (a transaction id and a WAL record per
// replay) even when its WHERE is false.
//
// Races are settled by PostgreSQL, and the loser learns the outcome by
// running the statement once more on a fresh snapshot:
//
//   - Two claims of a new key: ON CONFLICT DO NOTHING lets one insert. The
//     other inserts nothing and its snapshot has no row to return; Claim
//     runs the statement again and returns the winner's record.
//   - Two claims of an expired or abandoned row: both snapshots show it
//     takeable and both UPDATEs target it. Under READ COMMITTED the second
//     waits for the first's row lock, then re-checks upd's WHERE against
//     the new row version, which is live, and updates nothing. Its cur
//     still shows the old, takeable row, so Claim runs the statement again
//     and returns the winner's record; had the row been deleted meanwhile,
//     the second run inserts.
//
// Claim thus never returns a record that was expired at its now, and at
// most one caller holds a key at a time. Where the server's default
// isolation is REPEATABLE READ or SERIALIZABLE, PostgreSQL reports these
// races as serialization failures instead; every statement of the store
// commits on its own, so it simply runs again.
//
// # Time
//
// Every comparison uses the engine's now, passed as a parameter; the
// server's clock is never read. PostgreSQL keeps microseconds: the
// engine's now is rounded down and the deadlines it sets are rounded up to
// the microsecond, so every method judges a deadline the same way.
//
// # Notifications
//
// For the engine's wait mode the store implements idem.Notifier with
// LISTEN/NOTIFY. Complete, Release and Delete call pg_notify in the same
// statement; one listener connection per Store (taken from the pool and
// hijacked, so it does not count against MaxConns) fans notifications out
// in-process. If it drops, waiters are woken to poll and it reconnects with
// backoff; Watch never waits for it, and watches taken while it is down are
// woken when it is back. It stops for good when the pool it came from is
// closed. Notifying commits take a database-wide lock in PostgreSQL; turn
// notifications off with WithNotify(false) if no engine uses wait mode and
// the completion rate is high.
//
// # Exactly-once mode
//
// Store.ExactlyOnce returns a view that implements idem.TxBeginner: the
// engine begins a transaction before the handler, the handler writes
// through Tx(r.Context()) (with Gin, Tx(c.Request.Context()); with Echo,
// Tx(c.Request().Context())), and the completed record is written in the
// same transaction and committed before the response is sent. It costs one
// pooled connection per in-flight request; see ExactlyOnceStore.
//
// The commit happens when the response is stored: after the handler
// returns, or, for a response that streams, at the handler's first Flush
// or when its body outgrows the engine's response cap. The handler's
// statements on the transaction after that point fail.
//
// If COMMIT fails, the handler's writes and the record either both
// committed or neither did; a connection lost during COMMIT leaves which
// one unknown. The engine answers 500 and releases the key. Release is
// token-checked and never deletes a completed record, so a retry with the
// same key gets the real outcome: a replay if the transaction committed,
// a fresh run if it did not.
//
// # Expiry
//
// Expired records are never replayed, and a claim takes an expired row
// over in place. To reclaim space, call DeleteExpired (batched, skips rows
// a claim holds), run Sweep, or start a background sweeper with
// WithSweepInterval.
package pgxstore
