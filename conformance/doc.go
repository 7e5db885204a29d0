// Package conformance holds the shared test suites that define how idem's
// parts must behave. A store or adapter passes its suite, or it is not done.
//
// [RunStore] checks a [store.Store], and every optional capability it
// implements, against the store contract. The memory, Redis, PostgreSQL,
// MySQL, SQLite and DynamoDB stores run it from their tests, and a store written outside this
// repository should too. Each rule is a subtest of its own:
//
//   - Claim takes a key that has no record, whose record has expired
//     (now at or past ExpiresAt), or whose in-progress claim's lease has
//     ended (now at or past LeaseEnd); otherwise it returns the record as
//     Existing in the same call, with the right fingerprint, state,
//     CreatedAt, LeaseEnd, ExpiresAt and, once completed, Result.
//   - Complete and Release act only for the token that holds the claim
//     (Complete also after the lease ended, while nobody took the key
//     over), Release never on a completed record; otherwise they return
//     [store.ErrLeaseLost] and change nothing.
//   - Results are opaque bytes and round-trip exactly: Heads of one byte,
//     of every byte value (0 bytes, bytes that are not UTF-8) and of
//     exactly [store.MaxHead] bytes; nil, empty, binary and 1 MiB bodies;
//     BodyOmitted with its Head kept. Completion.Failed is not stored. The
//     caller may reuse the memory of the Result it passed once Complete
//     (or Tx.Commit) returns.
//   - (scope, key) pairs are independent, even when scopes hold ':', '{',
//     '}', spaces, NUL or bytes that are not UTF-8 and a naive
//     concatenation of scope and key would collide.
//   - 64 goroutines racing for one key get exactly one claim; 200 keys
//     claimed and completed from 8 goroutines all succeed; concurrent
//     takeovers of an abandoned or expired record leave one owner.
//   - The Existing record is a copy: changing its fields does not change
//     the store. The suite does not modify the bytes Existing.Result's
//     slices hold, so a store may share one immutable copy between
//     readers.
//   - Each optional capability the store implements, in its own subtests.
//
// Time: every time comes from the now values the suite passes; nothing
// sleeps waiting for a record to expire. The suite uses a base time taken
// from the wall clock when a subtest starts, truncated to the millisecond,
// plus offsets, so a store that also sets a server-side TTL from the times
// it is given never loses a record during a subtest. The now values are
// not monotonic across calls: to prove that a record was removed the suite
// may claim it again at an earlier now. Times read back are compared with a
// tolerance of 1 ms, so a store keeps at least millisecond precision; the
// zero time (LeaseEnd of a completed record) reads back as the zero time.
// Keys are printable ASCII, as the engine sends them.
//
// [RunTxEnded] checks, for a store with exactly-once transactions, Commit
// after the handler ended its transaction: a Failed completion is stored
// on its own, any other is refused.
//
// RunHTTP, in http.go, is the HTTP behaviour suite: it mounts the fixture
// routes through an adapter in-process and checks what clients see
// (replays, conflicts, mismatches, errors).
//
// The package depends only on the core module and the standard library, so
// importing it from a test adds nothing else to a module's graph.
package conformance
