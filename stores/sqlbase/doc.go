// Package sqlbase is the part the SQL stores of idem share: the stores in
// stores/pgx (PostgreSQL), stores/mysql (MySQL, MariaDB) and stores/sqlite
// (SQLite) keep their own SQL, driver and transactions, and build on this
// package for what is the same in all of them.
//
// It is for authors of SQL stores, not for applications: an application
// uses a store's own package and never needs this one. Its API follows
// what those stores need, and changes with them.
//
// What it holds:
//
//   - Row and MicroRow: a record's row, NULLs included, and its decoding
//     into a store.Record with the checks that turn a row no store can
//     have written into an error wrapping store.ErrCorruptRecord.
//   - FloorMicro, CeilMicro and FromMicro: the microsecond rounding that
//     keeps a store's SQL comparisons of now and deadlines in step with
//     the engine's.
//   - Options and CheckTable: the options every store takes (table,
//     sweep interval, logger) and the checks of them, with errors that
//     wrap the store's ErrBadOption.
//   - Base: a store's name, options and background work (the sweeper, a
//     watch poller or listener), its Close, and the sweeper's loop.
//   - Watches: the waiters of store.Notifier's Watch, woken in process by
//     the store's own writes and, with a Read function, by a poller for
//     other processes' writes.
//   - CommitEnded, CommitFailed and IgnoreTxDone: the shared
//     decisions of an exactly-once commit with its token check.
//
// It depends on the standard library and idem's core only: no driver.
package sqlbase
