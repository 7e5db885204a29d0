// Package conformance holds the shared test suites that define how idem's
// parts must behave. A store or adapter passes its suite, or it is not done.
//
// [RunStore] checks an [idem.Store], and every optional capability it
// implements, against the store contract: atomic claims, token checks on
// Complete, Release and Extend, exact response round trips, scope
// isolation, expiry on the caller's clock and concurrency. The memory,
// Redis and PostgreSQL stores run it from their tests, and a store written
// outside this repository should too.
//
// RunHTTP, in http.go, is the HTTP behaviour suite: it mounts the fixture
// routes through an adapter in-process and checks what clients see
// (replays, conflicts, mismatches, errors).
//
// The package depends only on the core module and the standard library, so
// importing it from a test adds nothing else to a module's graph.
package conformance
