// Package mysqlstore is an idem store (a store.Store, from package
// github.com/idemkit/idem/core/store) on MySQL 8.0+ and MariaDB 10.6+
// (InnoDB), built on database/sql and github.com/go-sql-driver/mysql:
// durable, shared by every instance of a service, and able to commit a
// handler's own writes together with the idempotency record (exactly-once
// mode).
//
// # Setup
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	store, err := mysqlstore.New(db)            // table "idempotency_keys"
//	err = store.CreateSchema(ctx)               // or ship mysqlstore.Schema(...) as a migration
//	engine, err := idem.New(store)
//	defer store.Close()
//
// New asks the server for its max_allowed_packet (see "Large responses")
// and checks that the connection's character_set_client and
// character_set_connection agree; it waits at most 5 seconds, and a server
// that does not answer makes it fail with an error that says so. It does
// not need the table.
//
// The DSN needs no particular parameter: times are stored as integers
// (parseTime does not matter), interpolateParams does not matter (the
// statements that carry values as parameters are prepared on the server,
// which the driver never interpolates; every other value is sent as a
// hexadecimal literal), the SQL mode does not matter, and clientFoundRows
// is allowed. The connection must run in autocommit mode, the default
// (CreateSchema checks it), and its character_set_client and
// character_set_connection must be the same (SET NAMES and the DSN's
// charset set both; New checks it): the driver sends a response body as a
// string parameter, which the server would otherwise convert. Options:
// WithTable, WithSweepInterval, WithWatchInterval and WithLogger.
//
// # Schema
//
// One table: binary columns for everything the application supplies,
// primary key (scope, key), an index on expires_at, times in microseconds
// since the Unix epoch, and tx_mark, which an exactly-once transaction
// writes when it starts (see "Exactly-once mode"). A scope longer than 512
// bytes is kept as its first 512 bytes and its SHA-256, so the primary key
// stays within InnoDB's limit. Schema returns the CREATE TABLE IF NOT
// EXISTS for a table name; CreateSchema runs it, and adds tx_mark to a
// table created before the column existed.
//
// A completed record keeps the engine's result as opaque bytes, its head
// in the headers column and its body in body, with a NULL status. Rows
// that earlier versions completed kept an HTTP status, the header bytes
// and the body instead; they keep reading as they did (the head is built
// with store.LegacyHead) until they expire, with no migration.
//
// # Round trips and locks
//
// Every statement of a plain store commits on its own; no transaction and
// no row lock is held while a handler runs. A claim reads first and
// writes only when it must:
//
//	SELECT ... FROM t WHERE scope = ? AND `key` = ?           -- always
//	SELECT IS_USED_LOCK(...) IS NOT NULL                       -- only to take over an in-progress claim whose lease ended
//	INSERT INTO t ... VALUES (...) ON DUPLICATE KEY UPDATE     -- only when the key is free or takeable
//	    col = IF(LAST_INSERT_ID(IF(<takeable>, 2, 1)) = 2, <new>, col), ...
//
// A replay, a 409 and a 422 are the SELECT alone: one statement, a
// consistent non-locking read, which neither takes nor waits for a lock,
// writes no row, undo or redo, and leaves the binary log alone, so retries
// of a hot key never queue on its row. A first request costs three
// statements (read, insert, complete) and two commits. MySQL has neither
// data-modifying CTEs nor RETURNING on upserts; the alternatives cost
// more where it matters: a stored procedure makes every claim one round
// trip but every replay pays for the CALL (and needs CREATE ROUTINE, which
// some MySQL services lack), an upsert first locks the row of every replay.
// Complete, Release, Extend, Evict, Get, Delete and Now are one statement
// each. Complete is a server-side prepared statement (prepared once per
// connection, one round trip after that); the others are plain queries.
//
// Races are settled by InnoDB row locks:
//
//   - Two claims of a new key both read no row and both upsert. The first
//     inserts; the second finds the duplicate, waits for the first's row
//     lock, and evaluates its UPDATE clause on the committed row, which is
//     live, so it changes nothing; the insert id says so (1), and Claim
//     reads again and returns the winner's record.
//   - Two claims of an expired or abandoned row both read it as takeable
//     and both upsert: the first takes it over (insert id 2); the second
//     waits for its lock, sees the new claim, changes nothing, and returns
//     it after reading again. A row deleted meanwhile is inserted anew.
//
// The upsert takes an exclusive lock for its duplicate check where a plain
// INSERT takes a shared one: two plain INSERTs racing for a key whose row
// was just deleted (released, swept) both hold the shared lock and
// deadlock upgrading it. Every other statement locks at most the one row
// it names, except the sweeper's, which lock their batch through the
// primary key and skip rows others hold; none locks through the expires_at
// index (a range scan there would lock index entries before rows, the
// opposite order of a takeover moving its entry). So claims should not
// deadlock with each other or with the sweeper; yet under load a claim
// racing with the sweeper was, rarely, picked as a deadlock victim (7
// times in one test run of 7,120 claims, none in others), for a reason
// not found yet. Whenever InnoDB picks one of the store's statements as a
// victim (that, or another application's transaction on the table), it
// is run again.
//
// Claim thus never returns a record that was expired at its now (except
// an in-progress record a live exactly-once transaction holds past its
// lease end), and at most one caller holds a key at a time, at READ
// COMMITTED, REPEATABLE READ (the default) or SERIALIZABLE; READ
// UNCOMMITTED is not supported.
//
// # Time
//
// Every comparison uses the now the engine passes, as a literal. The
// store implements store.Clock: Now reads the server's time, so the engine
// aligns that now with the server's clock, and instances whose clocks
// disagree judge leases alike. Now reads UTC_TIMESTAMP(6), the start of
// its one-statement SELECT: it is microseconds from the call time
// (SYSDATE(6)), well within the round trip whose midpoint the engine
// takes, and needs no time-zone conversion, where SYSDATE(6) is in the
// session's time zone and turning it back into UTC is ambiguous in the
// hour a daylight-saving zone falls back. A session that fixes its clock
// with SET timestamp would freeze it: do not do that on the store's pool.
// The sweeper deletes by the server's time too. The table keeps
// microseconds: the engine's now is rounded down and the deadlines it
// sets are rounded up, so every method judges a deadline the same way.
//
// # Notifications
//
// For the engine's wait mode the store implements store.Notifier without
// LISTEN/NOTIFY, which MySQL lacks: a Complete, Release, Evict or Delete
// through the same Store wakes that process's waiters at once, and one
// poller per Store reads the watched keys every 100ms (WithWatchInterval)
// to wake waiters in other processes, so a waiter on another instance
// replays within about one interval. The poller runs only while there are
// watches, takes no lock and never waits for one; a lease that ends wakes
// nobody (the waiter's own polling takes an abandoned claim over).
//
// # Exactly-once mode
//
// Store.ExactlyOnce returns a view that implements store.TxClaimer (and
// store.TxBeginner): the engine claims the key inside a transaction, the
// handler writes through Tx(r.Context()) (with Gin, Tx(c.Request.Context());
// with Echo, Tx(c.Request().Context())), and the completed record is
// written in the same transaction, by the same token-checked UPDATE as
// Complete, and committed before the response is sent. The claim, the
// handler's writes and the record commit together, in one durable commit:
// InnoDB flushes its redo log once per first request (plain mode flushes
// twice, for the claim and for the completion). When the commit happens
// (a streaming response commits when it starts) is the engine's rule: see
// "Exactly-once" in package idem.
//
// ClaimTx first reads the record, with the primary-key SELECT of a plain
// claim: a replay, or a 409 or 422 for a committed claim, is that
// statement alone. For a free key (or one whose record expired, or whose
// claim was abandoned) it takes one pooled connection for the request
// and, on it, turns autocommit off and takes a user-level lock named
// after the record (GET_LOCK, which never waits), starts the transaction,
// and inserts the claim (or takes the record over) with a random mark, if
// it got the lock. The claim's row stays locked, and uncommitted, until
// the transaction ends. So:
//
//   - Nobody takes the key over while the transaction lives. Another
//     claim, on any instance, finds the lock held, claims nothing and
//     rolls back; it then reads the record with READ UNCOMMITTED, on a
//     connection of its own (two statements: the level, for that read
//     alone, and the read): the claim's fingerprint, state and expiry,
//     never a result, since an uncommitted completion may yet roll back.
//     It answers with the record in progress at once: 409, or 422 for
//     another payload. Should the holder's row not show yet (it is between
//     its lock and its insert), the claim tries again, up to five times,
//     then answers 409 (with the holder's fingerprint if it saw a
//     completion not yet committed). Should that read fail, it answers
//     409 all the same: the key is known to be held, and an error could
//     make a caller with fail open run beside it. Get sees the claim in
//     progress from the lock (IS_USED_LOCK) and the same read; the watch
//     poller from the lock alone. A duplicate on the
//     instance that runs the request never gets this far: it waits on, or
//     answers from, that instance's own flight. A waiter on another
//     instance, in wait mode, claims again at each of its polls: each
//     such claim is the full conflict below, not one statement.
//   - The engine sends no heartbeat for the request, and the request
//     needs no connection but its own, however long the handler runs.
//   - A transaction that ends without its commit takes the claim with it,
//     and the handler's writes: a rollback (the engine's, after a 5xx or a
//     panic; InnoDB's; the handler's), a lost connection, a crash of the
//     process or of the server. The key is free at once. A retry, on
//     another instance, may then run while the first handler still runs:
//     only what the handler writes in the transaction is exactly once,
//     here as in every exactly-once mode.
//   - Nothing waits for the row lock: replays, conflicts, Get, Release
//     (it reads first, and leaves a record another session is taking over
//     alone), the watch poller and the sweeper (which skips locked rows).
//     Delete (admin) waits for the transaction.
//   - The completion requires the mark. If InnoDB rolled the transaction
//     back on its own, which it does to a deadlock victim (error 1213), and
//     to a lock wait timeout (1205) when innodb_rollback_on_timeout is ON,
//     the claim went with the handler's writes, the completion matches
//     nothing, and Commit returns an error wrapping ErrRolledBack (not
//     store.ErrLeaseLost): the engine answers 500, and the retry runs the
//     handler again. With autocommit off, what the handler ran after the
//     rollback (it ignored the error, or retried the statement) is in a
//     new transaction, which Commit rolls back too. With
//     innodb_rollback_on_timeout OFF (the default), a lock wait timeout
//     rolls back the one statement: the transaction lives, and commits
//     with the handler's other writes if it answers a success. A handler
//     answers 5xx when a statement fails; either way no record says a
//     success whose writes are gone.
//   - A handler that ends the transaction itself splits it: a COMMIT
//     commits what came before, the claim with it; a ROLLBACK takes the
//     claim. Commit then stores a failed outcome (an HTTP 4xx, a final
//     error) on its own, claiming the key again if it must (unless
//     another request claimed it since), and refuses any other.
//
// BeginTx, the older way in, begins a transaction for a claim Claim has
// committed, and marks its row (checking the claim's token: a lost claim
// fails it with store.ErrLeaseLost): two durable commits per request. The
// engine uses it for a store that is a store.TxBeginner alone. Engines of
// earlier releases claim that way: during a rolling upgrade their claims
// (and their heartbeats, for a claim taken over) do not see a claim not
// yet committed, and wait for its row lock, within their store timeout,
// until it commits (then they replay it) or ends. A claim whose caller
// gave up waits on in the server and may land after the other rolled
// back, holding the key until its lease ends. Nothing runs twice; upgrade
// every instance to end the waits.
//
// Commit and Rollback turn autocommit back on and release the user-level
// lock, in one statement, before the connection goes back to the pool; a
// connection whose transaction may still be open is discarded instead. If
// COMMIT fails, both committed or neither did (a connection lost during
// COMMIT leaves which one unknown); the engine answers 500 and releases
// the key, Release never deletes a completed record, and the client's
// retry learns the real outcome. A host that vanishes without closing its
// connections (power loss, a partition) keeps its transactions, their
// locks and so its keys, until the server drops the connection
// (wait_timeout, or TCP keepalive); so it does for the handler's own rows.
//
// Costs: a first request is four statements to claim (the read, the
// session and lock, START TRANSACTION, the claim; five with an isolation
// level) and three to commit (the completion, COMMIT, and restoring the
// session), with one durable commit and no heartbeat. A replay, and a
// conflict with a committed claim, is one statement; a conflict with a
// claim not yet committed is nine (eight at the server's default level:
// the read, the four or three of a claim that gets no lock, rolling back
// and restoring the session, then the uncommitted read's two). The user-level lock is
// local to a server: with Galera or group replication writing on several
// primaries, point the store at one.
//
// Isolation: transactions run at READ COMMITTED unless WithTxOptions says
// otherwise; REPEATABLE READ, SERIALIZABLE and the session's default work
// alike, since nothing else writes the record while the transaction
// lives (MariaDB's innodb_snapshot_isolation refuses no completion). READ
// COMMITTED cannot write when binlog_format is STATEMENT.
//
// Pool sizing: each request in flight holds one pooled connection from
// its claim to its commit or rollback, and its business rows stay locked
// until then; nothing else needs a connection while it runs. A pool
// (db.SetMaxOpenConns) as large as the requests in flight is enough: a
// duplicate's claim, a waiter's poll and the sweeper each borrow a
// connection for one statement or a short transaction, and wait for one
// within their own deadlines when the pool is full. Run every query of the
// handler on the transaction.
//
// # Large responses
//
// Complete sends the result's body and head (the status and headers as
// the engine encodes them) as binary parameters of a prepared statement,
// byte for byte (the driver sends a large one in COM_STMT_SEND_LONG_DATA
// packets), so a response as large as max_allowed_packet allows is
// stored: MaxResponseSize, the server's max_allowed_packet read by New,
// less 4 KiB for the rest of the statement, for the body and the head
// together (the tests store exactly that much on the real server, with
// the largest scope, key and token). A larger result is stored as the
// engine stores one over its cap: its head alone, marked as without body
// (store.Result.BodyOmitted), so that retries replay its status and
// headers instead of running the handler again; the store logs a warning.
// The completion never fails for its size. To keep every body the middleware keeps, give it
// idem.WithMaxResponseBody below MaxResponseSize, less room for headers,
// and an idem.WithStoreTimeout that covers writing the largest body (a
// small server took seconds to write 16 MiB). A max_allowed_packet the
// server lowers later takes effect at the store's next New.
//
// # Expiry
//
// Expired records are never replayed, and a claim takes an expired row
// over in place. A background sweeper, on by default (WithSweepInterval),
// deletes completed records from their expiry and in-progress ones a
// lease after their lease end (LeaseEnd + (LeaseEnd - CreatedAt)), so that
// a late completion of a claim nobody took over still lands. It finds them
// in batches of at most 1000 with a consistent read of the expires_at
// index, which locks nothing, and deletes them in a short transaction
// that locks them by primary key with SKIP LOCKED, re-checking expiry: a
// row a claim took over meanwhile stays, and a row a live transaction
// holds is left for a later sweep, never waited for. DeleteExpired and
// Sweep run the same by hand.
//
// # Timeouts
//
// Every call honours its context: the driver closes a connection whose
// statement outlives it, so a hung server costs a caller at most its store
// timeout, and database/sql dials new connections when the server is back.
package mysqlstore
