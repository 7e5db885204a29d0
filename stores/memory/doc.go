// Package memstore is an in-memory [store.Store] for a single process: tests,
// development, and services that run one replica.
//
// Records live in a map guarded by one mutex, with two min-heaps on
// ExpiresAt beside it: one holds the in-progress claims (whose ExpiresAt is
// their lease end), the other the completed records. The heaps let a full
// store choose a record to evict in O(log n) and let a background sweeper
// reclaim expired records without scanning. Records are lost when the
// process exits, and two processes never see each other's keys: behind a
// load balancer, use the Redis or PostgreSQL store instead.
//
// # Size limits
//
// A store holds at most [DefaultMaxEntries] records ([WithMaxEntries]) and
// [DefaultMaxBytes] of results, heads and bodies ([WithMaxBytes]), so
// 100,000 responses of 1 MiB cannot take 100 GiB. When a claim on a new key
// would pass the first, or a completion the second, the store makes room
// by evicting, with expiry judged at the caller's now:
//
//  1. an expired record if there is one (a completed record at or past its
//     ExpiresAt, or an abandoned claim at or past its lease end), the one
//     that expired first;
//  2. otherwise the completed record closest to its ExpiresAt. Its key's
//     next retry runs the request again instead of replaying it.
//
// A live in-progress claim is never evicted: the request that holds it is
// still running, and a duplicate would run beside it. When every record is
// a live in-progress claim, Claim returns [ErrFull], which the engine
// answers with 503 Service Unavailable (unless it fails open): the process
// has more requests in flight than the store may hold. Evicting a record
// wakes its watchers, as deleting it does. A result larger than the whole
// byte budget is stored without its body (its Head is kept and
// BodyOmitted set: the engine replays the status and headers, marked
// Idempotent-Body-Omitted), rather than evicting everything.
//
// The budget counts what the store keeps, not what the process uses: Go's
// collector lets the heap grow to about twice the live data (GOGC=100).
// Flooded with 120,000 responses of 64 KiB, a process measured 537 MiB of
// peak RSS for the 256 MiB budget, and 320 MiB with GOMEMLIMIT set to the
// budget plus 64 MiB: set GOMEMLIMIT to bound the process.
//
// # Expiry
//
// Claim and Get treat a record that has expired at the caller's time as
// absent. It stays in memory until a claim on its key takes it over,
// eviction picks it, [Store.DeleteExpired] runs, or the background sweeper
// (see [WithSweepInterval]) removes it by the store's clock ([WithClock]).
//
// The store implements [store.Getter], [store.Deleter],
// [store.ExpiredDeleter], [store.Extender], [store.Evicter] and
// [store.Notifier]. It does not implement [store.TxBeginner]: there is no
// transaction to join.
//
// # Shared results
//
// Complete keeps a copy of the Result's Head and Body it is handed: the
// caller reuses that memory once Complete returns. Every
// Record the store hands out afterwards (as ClaimResult.Existing or from
// Get) is a fresh copy of the record, but its Result's Head and Body share
// the one stored copy, which is never changed again. Callers must treat
// them as read-only; the idem engine does. This keeps a replay to one
// allocation however large the body is.
package memstore
