// Package memstore is an in-memory [idem.Store] for a single process: tests,
// development, and services that run one replica.
//
// Records live in a map guarded by one mutex, with a min-heap on ExpiresAt
// beside it. The heap lets a full store evict the record closest to expiry
// in O(log n) and lets a background sweeper reclaim expired records without
// scanning. Records are lost when the process exits, and two processes never
// see each other's keys: behind a load balancer, use the Redis or PostgreSQL
// store instead.
//
// The store implements [idem.Getter], [idem.Deleter], [idem.ExpiredDeleter],
// [idem.Extender] and [idem.Notifier]. It does not implement
// [idem.TxBeginner]: there is no transaction to join.
//
// # Shared responses
//
// Complete keeps a copy of the response body and the header map it is handed
// (the engine never modifies that map afterwards). Every Record the store
// hands out afterwards (as ClaimResult.Existing or from Get) is a fresh copy
// of the record, but its Response field points to the one stored Response,
// which is never changed again. Callers must treat the Response, its Header
// and its Body as read-only; the idem engine does. This keeps a replay to
// one allocation however large the body is.
package memstore
