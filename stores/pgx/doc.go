// Package pgxstore is a store for idem (a store.Store, package
// github.com/idemkit/idem/core/store) on PostgreSQL, built on
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
// WithNotify and WithLogger. Needs PostgreSQL 14 or later (the sweeper
// reads page ranges with TID range scans; earlier versions work, reading
// the whole table per batch).
//
// # Schema
//
// One table with the primary key (scope, key) as its only index. Schema
// returns the SQL for a table name, for Flyway, Atlas, goose or psql;
// CreateSchema runs it under an advisory lock, so it is safe at every
// start-up of every instance.
//
// A completion changes no indexed column, so it is a HOT update: the
// completed row goes on the same page, the index gets no new entry, and
// the WAL record leaves out the leading bytes the new version shares with
// the old (the columns a completion never changes come first). That needs
// room on the page, which the table's fillfactor of 90 keeps for the
// requests in flight; a store whose responses run to kilobytes, or with
// many slow requests at once, keeps more completions HOT with a lower one
// (ALTER TABLE idempotency_keys SET (fillfactor = 70)).
//
// Measured with pg_waldump over 2,000 plain first requests (UUID keys, a
// small JSON body): 6.0 WAL records and 715 bytes each, the claim's
// insert, its index entry and commit, and the HOT completion and its
// commit; schema version 1 wrote 9.2 records and 1,015 bytes (four index
// entries).
//
// A completed record keeps the engine's result (store.Result) as opaque
// bytes: its Head in the headers column, its Body in body, BodyOmitted in
// body_omitted, and NULL in status. Rows completed by earlier versions of
// this package kept an HTTP status in status and their header bytes in
// headers; they still replay, their head built with store.LegacyHead, so
// upgrading needs no migration of the rows, and the columns are the same.
//
// This is version 2 of the schema. Version 1 (before the waiters column)
// had an index on expires_at, which made every completion a non-HOT update.
// CreateSchema upgrades such a table in one short transaction (it adds the
// waiters column, which only changes the catalog, sets the fillfactor for
// pages filled from then on, and drops the index), and on an up-to-date
// table it only reads the catalog, taking no lock on the table. Schema's
// script carries the same idempotent statements: apply it as a new
// migration, before this version serves traffic, since its statements name
// the waiters column (CreateSchema at start-up does it by itself).
// Instances of the previous version keep working on the upgraded table
// while the new one rolls out (their completions always notify; their
// waiters do not mark, so they poll).
//
// # Round trips and locks
//
// Claim, Complete, Release, Get, Delete, Evict and Extend are one
// statement each, committed on its own; in plain mode no transaction and
// no row lock is held while a handler runs. A first request costs two
// statements (claim, complete), each a commit that waits for its WAL
// flush; in exactly-once mode the claim, BEGIN with the lock of the record
// (one round trip), the handler's statements, the completion and COMMIT,
// with one flush (see below). A replay, a 409 and a 422 cost one claim,
// which reads the row and writes nothing (no row lock, no transaction id,
// no WAL, no flush), so retries of a hot key never queue on its row.
//
// The claim is one statement with data-modifying CTEs that share a
// snapshot:
//
//	WITH cur AS (SELECT ... WHERE scope = $1 AND key = $2),
//	ins AS (INSERT ... SELECT ... WHERE NOT EXISTS (SELECT 1 FROM cur)
//	        ON CONFLICT (scope, key) DO NOTHING RETURNING 1),
//	free AS (SELECT 1 ... WHERE scope = $1 AND key = $2
//	           AND EXISTS (SELECT 1 FROM cur WHERE <in progress, lease ended>)
//	         FOR KEY SHARE SKIP LOCKED),
//	upd AS (UPDATE ... WHERE scope = $1 AND key = $2
//	          AND (expires_at <= $now OR (state = 1 AND lease_end <= $now))
//	          AND EXISTS (SELECT 1 FROM cur WHERE <the same condition>)
//	          AND (<cur is completed> OR EXISTS (SELECT 1 FROM free))
//	        RETURNING 1)
//	SELECT acquired, cur.*, held FROM (VALUES (1)) one LEFT JOIN cur ON true
//
// A live row only ever reaches cur: ins, free and upd are cut off by
// one-time filters before they scan anything, so nothing is locked or
// written. This is why the store does not use INSERT ... ON CONFLICT DO
// UPDATE ... WHERE, which locks the conflicting row (a transaction id and
// a WAL record per replay) even when its WHERE is false.
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
//   - A claim of an in-progress row whose lease has ended while an
//     exactly-once transaction still holds it (locked FOR UPDATE, see
//     below): free skips the row at once (FOR KEY SHARE conflicts with FOR
//     UPDATE only, not with the FOR NO KEY UPDATE of the short statements
//     that change rows), upd does nothing, and held is true. Claim looks a
//     second time and returns the in-progress record: the claim is alive,
//     and nothing waits for the handler. A DELETE in flight (a late
//     Release, Delete, Evict, or the sweeper's removal of a claim a lease
//     past its end) also holds FOR UPDATE; the second look finds it
//     committed, unless it is still running, when the claim answers with
//     the record being deleted (a 409, or a 422 for another request)
//     instead of waiting for the DELETE; the next try finds the key free.
//
// Claim thus never returns a record that was expired at its now (but
// for such a held claim), never takes over a claim a live transaction
// holds, and at most one caller
// holds a key at a time.
//
// # Isolation
//
// The store's statements are written for READ COMMITTED, where a statement
// that meets a row changed by a concurrent writer re-checks the newest
// version. Where the session's default isolation is stricter
// (default_transaction_isolation set for the server, the database or the
// role, or by the application for its connections), the first claim
// notices, and from then on each statement of the store runs in a READ
// COMMITTED transaction of its own: BEGIN, the statement and COMMIT in one
// batch, still one round trip (on a pgx.Tx, where that is impossible,
// statements run at the outer transaction's level, and a serialization
// failure, SQLSTATE 40001, runs them again). So the store's reads never
// take part in the predicate locking of SERIALIZABLE transactions: a
// waiter polling a record cannot make the handler that is about to
// complete it fail. The exactly-once transaction itself runs at the
// level asked for (WithTxOptions) or the session's default.
//
// # Notifications
//
// For the engine's wait mode the store implements store.Notifier with
// LISTEN/NOTIFY, paid for only when someone waits. Watch marks the
// in-progress record (its waiters column; only the first waiter of a
// claim writes, and the mark's commit does not wait for its flush), and
// Complete, Release and Delete call pg_notify, in the same statement, only
// for a marked record. This matters because a transaction that notifies
// takes a database-wide lock from its commit until the commit is flushed:
// if every completion notified, commits would queue one behind the other
// and lose group commit (measured with 16 connections: 0.42 times the
// throughput without notifications; with marks, the same within noise).
// The mark and the completion serialize on the row lock, and the engine
// looks at the record again after Watch returns, so no wake-up is lost:
// see markSQL.
//
// A record that an exactly-once transaction holds is not marked (the mark
// would wait for the handler, and the completion, bound to its snapshot,
// could not see it): waiters in other processes poll it, with the
// engine's backoff (up to half a second), and those in the process whose
// transaction commits are woken in-process. Every statement of a Store
// that ends a claim (Complete, a transaction's commit, Release, Delete,
// Evict) also wakes that Store's own waiters of the key directly.
//
// One listener connection per Store (taken from the pool and hijacked, so
// it does not count against MaxConns) fans notifications out in-process.
// If it drops, waiters are woken to poll and it reconnects with backoff;
// Watch never waits for it (it marks nothing while the listener is down,
// and watches taken then are woken when it is back). It stops for good
// when the pool it came from is closed. WithNotify(false) turns all of it
// off; the engine then polls.
//
// # Exactly-once mode
//
// Store.ExactlyOnce returns a view that implements store.TxBeginner: the
// engine begins a transaction before the handler, the handler writes
// through Tx(r.Context()) (with Gin, Tx(c.Request.Context()); with Echo,
// Tx(c.Request().Context())), and the completed record is written in the
// same transaction, by the same token-checked update as Complete, and
// committed before the response is sent. When the commit happens (a
// streaming response commits when it starts) is the engine's rule: see
// "Exactly-once" in package idem.
//
// The transaction's first statement locks the record's row FOR UPDATE,
// with the token check (sent with BEGIN, one round trip; a claim taken
// over meanwhile fails BeginTx with store.ErrLeaseLost and the handler
// never runs), and the lock lasts until COMMIT or ROLLBACK. So the
// transaction holds the claim by itself (store.ClaimHolder): the engine
// sends no heartbeat for it, a duplicate past the lease end gets the
// in-progress record at once instead of taking the key over or waiting,
// waiters do not write the row, and the sweeper skips it. Nothing but the
// transaction writes the record while it lives, so its completion never
// meets a row version newer than its snapshot: READ COMMITTED, REPEATABLE
// READ and SERIALIZABLE all work, set with WithTxOptions or inherited from
// default_transaction_isolation, and the snapshot, taken by the lock,
// always sees the claim. A crash of the application ends the transaction
// and the lock with the connection; the key is free again at the claim's
// lease end, which no heartbeat moved. A serialization failure of the
// handler's own statements, or at COMMIT, is a failed commit: the engine
// answers 500 and releases the key, and the retry runs again. A
// read-only transaction (WithTxOptions with pgx.ReadOnly, or
// default_transaction_read_only) cannot hold the claim: BeginTx refuses
// it with an error that says so.
//
// Pool sizing: each request in flight holds at most one pooled
// connection at a time. A request that runs its handler holds one from
// BeginTx to the commit or rollback (its claim before and a release after
// take one briefly, never while it holds the transaction's); a duplicate,
// waiting or not, takes one briefly per claim or poll. No heartbeat needs
// one, and the listener's is hijacked from the pool and does not count.
// So MaxConns at least the requests in flight (first requests and
// duplicates alike) is enough; the sweeper and the engine's clock
// measurement take one for a moment now and then. When the pool is
// exhausted, a new request waits for a connection for its claim, or for
// BeginTx, up to the engine's store timeout and then answers 503 with
// Retry-After, having claimed nothing or released its claim: its handler
// never runs without the transaction. The requests already running are
// not affected: they need no further connection until they commit. Do
// every query of the handler through the transaction: a handler that
// takes a second connection from the same pool can deadlock once the pool
// is exhausted. Use a *pgxpool.Pool as the DB; on a pgx.Tx, BeginTx makes
// a savepoint and nothing commits until the outer transaction does.
//
// Handlers never run transaction control (BEGIN, COMMIT, ROLLBACK) as
// SQL; use tx.Begin for savepoints. A transaction ended by such a
// statement is treated as failed, and the record is never written outside
// a transaction; but writes already committed by it stay committed. To
// abort, answer 5xx: the engine rolls back and releases the key. When a
// statement fails in the transaction (PostgreSQL then refuses everything
// until ROLLBACK), or the handler rolls it back, the transaction can no
// longer commit: an answer that says nothing happened (the engine marks it
// store.Completion.Failed: an HTTP 4xx) is then stored on its own and
// replayed, with none of the handler's writes (which is what such an
// answer means), while any other fails the commit (the client gets 500 and
// the key is released). Run a statement that may fail, when
// the handler wants to carry on after it, in a savepoint.
//
// A first request flushes WAL once, not twice: the claim commits without
// waiting for its flush (synchronous_commit off for that statement alone),
// and the transaction's durable commit flushes the claim with it, since
// WAL is written and flushed in order. The claim's own flush would buy
// nothing. If the server crashes before the transaction commits, the
// handler's writes are lost with it, and a lost claim only lets the retry
// run again at once, which is right (with a durable claim the retry would
// wait for the lease, then run again all the same); the WAL writer flushes
// an unflushed claim within about three wal_writer_delay (600 ms by
// default) anyway. With synchronous replication the transaction's commit
// waits for the standby to have all WAL up to it, the claim's included.
// The heartbeat's lease extensions, which the engine sends only for a
// transaction that does not hold its claim (a user's own TxBeginner
// wrapper, say), skip the flush for the same reason (a crash that loses
// one ends the handler's transaction too); plain mode keeps both durable,
// since there a handler may outlive a server crash.
// What exactly-once mode does not cover, claim durable or not, is a side
// effect outside the database (a call to a payment provider, a message
// sent): after a crash before the commit, the retry runs the handler
// again and repeats it.
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
// over in place. A completed record can be deleted from its expiry on; an
// in-progress one is kept a lease longer, until lease end + (lease end -
// creation), so that a late Complete, Extend or Release still finds it,
// and a row an exactly-once transaction holds is kept for as long as it
// lives (the sweeper leaves it alone, without waiting for it).
// To reclaim space, a background sweeper runs by default
// every 10 seconds on a pool (WithSweepInterval changes it, 0 turns it
// off), so a table of keys that are never retried does not grow forever.
// There is no index on expires_at (it would make completions non-HOT):
// each run deletes the expired rows in the next 1024 pages (8 MiB) of the
// table, one statement that reads just those pages, and goes round the
// table, so a record is deleted at most one round after it expires. A
// table of 10 million small records is about 435,000 pages (3.4 GB): a
// round of some 70 minutes, reading 0.8 MB/s. Each instance runs its own
// sweeper; with many, turn it off on all but a few. DeleteExpired reads the
// whole table at once, and Sweep runs a sweeper on your own context.
package pgxstore
