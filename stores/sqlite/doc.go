// Package sqlitestore is an idem store (a store.Store, of package
// github.com/idemkit/idem/core/store) in an SQLite database file, built on
// database/sql and modernc.org/sqlite (pure Go, no cgo): durable across
// restarts, with no server to run, and able to commit a handler's own
// writes together with the idempotency record (exactly-once mode).
//
// # When to pick it
//
// Pick it for a service that runs as one instance (one process, or a few
// on one host) and wants its idempotency records to survive a restart or
// a crash without running Redis or a database server: a small API on one
// VM, an edge box, a desktop or embedded backend, a service whose data
// already lives in SQLite (then exactly-once mode commits the handler's
// writes and the record together).
//
// Do not pick it for several instances behind a load balancer on
// different hosts: each would have its own file, and a retry that reaches
// another instance would run again. Use a shared store (stores/pgx,
// stores/mysql, stores/redis). SQLite's WAL mode also needs the file on a
// local disk, not a network file system. For a single instance that can
// lose its records on restart, stores/memory is faster still.
//
// # Setup
//
//	db, err := sqlitestore.Open("app.db")   // WAL, busy_timeout, synchronous=FULL, foreign_keys
//	store, err := sqlitestore.New(db)       // table "idempotency_keys"
//	err = store.CreateSchema(ctx)           // or ship sqlitestore.Schema(...) as a migration
//	engine, err := idem.New(store)
//	defer store.Close()
//
// Open is a convenience: New accepts any *sql.DB of the "sqlite" driver
// whose connections have a busy timeout (New fails otherwise) on a file
// database (New switches it to WAL mode, which the file keeps; an
// in-memory database is refused). Do not limit the pool to one connection
// (db.SetMaxOpenConns(1)): reads run beside the writer, and an
// exactly-once transaction keeps one connection for as long as its
// handler runs. Options: WithTable, WithSweepInterval and WithLogger.
//
// # Schema
//
// One table: BLOB columns for everything the application supplies (scope,
// key, fingerprint, token, and a completed record's result: its Head in
// headers and its Body in body, which the store never reads), compared
// byte for byte; primary key (scope, key); an index on expires_at; times
// as integers, microseconds since the Unix epoch (the engine's now
// rounded down, the deadlines it sets rounded up). Schema returns the two IF NOT EXISTS
// statements for a table name; CreateSchema runs them.
//
// Rows completed before results were opaque kept an HTTP status in the
// status column and core's header bytes in headers; they still read, and
// replay as before (sqlbase.Row.Record turns them into a legacy head).
// New rows leave status NULL: no migration is needed.
//
// # One writer at a time
//
// SQLite allows one writer per database. The store keeps that rule
// itself: every write it makes (a new claim, Complete, Release, Extend,
// Delete, Evict, a sweep batch, an exactly-once transaction) first takes
// the store's write lock, a Go semaphore whose wait honours the context,
// so the store's writers queue instead of polling SQLite's lock and never
// see SQLITE_BUSY (TestEngineConcurrentFirstRequests sends 64 first
// requests at once). The writes that queued while the lock was held run
// together when it is free, in one transaction: one commit and one fsync
// for all of them (group commit), each caller getting its own
// statement's outcome. A lone write runs on its own, with no BEGIN. A
// caller whose context ends while its write waits for the lock withdraws
// the write and returns the context's error; once the write runs, the
// caller waits for its batch to commit (at most 30 s), so that it never
// reports a failure for a write that committed. Reads take no lock: in WAL mode they run beside
// the writer and see the last commit. A claim reads first and writes only
// when the key is free or takeable:
//
//	SELECT ... FROM t WHERE scope = ? AND "key" = ?            -- always
//	INSERT INTO t ... ON CONFLICT (scope, "key") DO UPDATE ...  -- only for a free or takeable key,
//	    WHERE <expired> OR <in progress and lease ended>        -- under the write lock
//
// so a replay, a 409 and a 422 are one read that writes nothing. When the
// upsert changes no row, another claim won between the read and the lock;
// Claim reads the winner's record, under the lock, and returns it.
// Complete, Release, Extend, Evict and Delete are one token-checked
// statement each, as in the other SQL stores.
//
// The application's own writes to the same file (outside exactly-once
// mode) meet the store's at SQLite's lock and wait for it up to the busy
// timeout (10 s with Open). Open begins transactions with BEGIN IMMEDIATE
// (_txlock=immediate), so one that reads and then writes waits for the
// lock at BEGIN instead of failing with SQLITE_BUSY_SNAPSHOT. Several
// processes may share the file on one host: their writes then meet at
// SQLite's lock too, and the busy timeout bounds the wait.
//
// # Durability and cost
//
// With Open's synchronous=FULL every commit fsyncs the WAL before it
// returns, so a completed record survives a crash of the process and of
// the machine. A first request writes twice (the claim, the completion),
// two commits and two fsyncs, which concurrent requests share (group
// commit); a replay, a 409 and a 422 write nothing; a
// heartbeat (Extend) writes once. In exactly-once mode a first request
// writes twice too: the claim, and one transaction holding the handler's
// writes and the completion. synchronous=NORMAL (open the DB yourself)
// skips the fsync at commit: records then survive a crash of the process
// but the last ones may be lost with the machine's power, and a lost
// record means a retry runs again.
//
// # Exactly-once mode
//
// Store.ExactlyOnce returns a view whose engine runs each claimed request
// in a transaction on the store's database (store.TxBeginner). The handler
// gets it with Tx(r.Context()) and runs its statements on it; the engine
// completes the record inside it and commits, so the handler's writes and
// the stored response commit together or not at all. A handler that
// answers 5xx or 429, or panics, has its transaction rolled back and its
// key released. A COMMIT that fails (a DEFERRABLE INITIALLY DEFERRED
// foreign key the handler's writes violate, a full disk) rolls everything
// back, and the engine answers 503 commit-failed and releases the key, as
// with the other SQL stores; a statement of the handler that fails at
// once is the handler's to answer (5xx: rolled back and released). A
// statement that SQLite answers by rolling the whole transaction back (it
// was interrupted when the request's context ended, or failed with
// SQLITE_FULL, IOERR or NOMEM) ends the transaction under the handler:
// the engine then stores a failed outcome (4xx) on its own and refuses any
// other (500, key released), and what the handler ran after it, outside
// any transaction, committed statement by statement.
//
// The transaction holds SQLite's write lock, and the store's, from
// BeginTx until it ends, so it holds its claim by itself
// (store.ClaimHolder; no heartbeat): a duplicate gets the in-progress
// record at once, past its lease end too. It also means that exactly-once
// handlers run one at a time: a new key's claim waits for the running
// handler, at most the engine's store timeout (idem.WithStoreTimeout,
// 2 s by default), and answers 503 after that. Set the store timeout
// above your slowest handler. Replays, 409s and 422s are reads and never
// wait. Inside the handler, write only through the transaction: a write
// through the *sql.DB would wait for the transaction's own lock and fail
// with SQLITE_BUSY after the busy timeout.
//
// # Expiry, waiting, time
//
// A sweeper deletes expired records every minute (WithSweepInterval; 0
// turns it off, and DeleteExpired or Sweep do it on demand); Close stops
// it. Completed records go from their expiry, in-progress ones a lease
// later, so a late completion still lands. Expired records are never
// replayed, swept or not.
//
// Watch (store.Notifier) wakes the engine's waiters in this process at
// once when a record is completed, released or deleted through this
// Store; waiters in another process sharing the file rely on the engine's
// own poll. The store has no clock of its own (no store.Clock): every
// instance that shares the file runs on the same host's clock.
package sqlitestore
