// Package mysqlstore is an idem.Store on MySQL 8.0+ and MariaDB 10.6+
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
// The DSN needs no particular parameter: times are stored as integers
// (parseTime does not matter), every value is sent as a hexadecimal
// literal (interpolateParams, the character set and the SQL mode do not
// matter), and clientFoundRows is allowed. The connection must run in
// autocommit mode, the default; CreateSchema checks it. Options:
// WithTable, WithSweepInterval, WithWatchInterval and WithLogger.
//
// # Schema
//
// One table: binary columns for everything the application supplies,
// primary key (scope, key), an index on expires_at, times in microseconds
// since the Unix epoch. A scope longer than 512 bytes is kept as its first
// 512 bytes and its SHA-256, so the primary key stays within InnoDB's
// limit. Schema returns the CREATE TABLE IF NOT EXISTS for a table name;
// CreateSchema runs it.
//
// # Round trips and locks
//
// Every statement commits on its own; no transaction and no row lock is
// held while a handler runs. A claim reads first and writes only when it
// must:
//
//	SELECT ... FROM t WHERE scope = ? AND `key` = ?           -- always
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
// Complete, Release, Extend, Get and Delete are one statement each.
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
// it names, except the sweeper's DELETE, which locks its batch through the
// primary key in key order; none locks through the expires_at index (a
// range scan there would lock index entries before rows, the opposite
// order of a takeover moving its entry). So claims never deadlock with
// each other or with the sweeper. Should another application's
// transaction on the table make InnoDB pick one of the store's statements
// as a deadlock victim, it is run again.
//
// Claim thus never returns a record that was expired at its now, and at
// most one caller holds a key at a time, at READ COMMITTED, REPEATABLE
// READ (the default) or SERIALIZABLE; READ UNCOMMITTED is not supported.
//
// # Time
//
// Every comparison uses the engine's now, passed as a literal; the
// server's clock is never read. The table keeps microseconds: the
// engine's now is rounded down and the deadlines it sets are rounded up,
// so every method judges a deadline the same way.
//
// # Notifications
//
// For the engine's wait mode the store implements idem.Notifier without
// LISTEN/NOTIFY, which MySQL lacks: a Complete, Release or Delete through
// the same Store wakes that process's waiters at once, and one poller per
// Store reads the watched keys every 100ms (WithWatchInterval) to wake
// waiters in other processes, so a waiter on another instance replays
// within about one interval. The poller runs only while there are
// watches.
//
// # Exactly-once mode
//
// Store.ExactlyOnce returns a view that implements idem.TxBeginner: the
// engine begins a transaction before the handler, the handler writes
// through Tx(r.Context()) (with Gin, Tx(c.Request.Context()); with Echo,
// Tx(c.Request().Context())), and the completed record is written in the
// same transaction, by the same token-checked UPDATE as Complete, and
// committed before the response is sent. A request whose lease ran out and
// was taken over never commits its writes. If COMMIT fails, both committed
// or neither did (a connection lost during COMMIT leaves which one
// unknown); the engine answers 500 and releases the key, Release never
// deletes a completed record, and the client's retry learns the real
// outcome. When the commit happens (a streaming response commits when it
// starts) is the engine's rule: see "Exactly-once" in package idem.
//
// Transactions run at READ COMMITTED unless WithTxOptions says otherwise.
// Under REPEATABLE READ, MariaDB with innodb_snapshot_isolation=ON (the
// default from 11.6) refuses the completion with error 1020 whenever the
// engine's heartbeat extended the lease after the handler's first read.
// READ COMMITTED cannot write when binlog_format is STATEMENT.
//
// Each request in flight holds one pooled connection from BeginTx to the
// commit or rollback, and its business rows stay locked until then. Size
// the pool (db.SetMaxOpenConns) for the requests in flight, and run every
// query of the handler on the transaction.
//
// # Expiry
//
// Expired records are never replayed, and a claim takes an expired row
// over in place. A background sweeper, on by default (WithSweepInterval),
// deletes expired rows in batches of at most 1000: it finds them with a
// consistent read of the expires_at index, which locks nothing, and
// deletes them by primary key, re-checking expiry, so a row a claim took
// over meanwhile stays. Each batch is one short statement; a claim waits
// at most for it. DeleteExpired and Sweep run the same by hand.
//
// # Timeouts
//
// Every call honours its context: the driver closes a connection whose
// statement outlives it, so a hung server costs a caller at most its store
// timeout, and database/sql dials new connections when the server is back.
package mysqlstore
