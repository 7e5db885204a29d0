// Package store is the contract between the idem engine and the stores
// that keep its records: read it to write a store, not to use one.
//
// A store keeps one [Record] per (scope, key). The engine claims a key
// with [Store.Claim], then settles the claim with [Store.Complete] (the
// outcome is kept and replayed to every retry) or [Store.Release] (the key
// is free again). Everything that must be atomic happens inside one store
// call; everything else (leases, fingerprints, what to store and when)
// is the engine's.
//
// A completed record holds a [Result]: two byte strings the transport
// encoded (an HTTP status, headers and body; a gRPC message; a value
// returned by idem's Engine.Do) that the store keeps byte for byte and
// never reads. A store that cannot keep a Body (it is larger than the
// store allows) drops it and sets BodyOmitted; it always keeps the Head.
//
// Optional capabilities are interfaces a store may also implement:
// [Getter], [Deleter], [ExpiredDeleter], [Extender], [BatchExtender],
// [Evicter], [Clock], [FailoverBound], [Notifier] and, for exactly-once
// execution, [TxBeginner] with [Tx] and [ClaimHolder], and [TxClaimer] to
// claim inside the transaction. The engine finds them with a type
// assertion.
//
// The conformance module's RunStore checks the rules stated here against
// a real server; every store must pass it. A few it does not check yet:
// that every method honours its context's end, FailoverBound, the grace
// past the lease end of a store that expires records by a relative TTL
// (the suite cannot wait it out), and a Notifier firing on Evict or
// DeleteExpired.
//
// # Records written before results were opaque
//
// Stores written for idem before this package kept a response as an HTTP
// status, a header blob (bytes starting with 1, the engine's header format) and a body.
// A store that finds such a record builds its Head with [LegacyHead] and
// returns it as usual: the engine replays it as before.
package store
