// Package e2e holds the end-to-end tests of the example programs: each is
// built, started as a real process on a loopback port, and driven over
// HTTP, on the memory store and, when the servers are reachable, on Redis
// and PostgreSQL, including two processes sharing one store, a process
// killed mid-request, and a store that goes away and comes back. The
// client tests send requests through idemclient over a fault proxy
// (examples/internal/flaky) and across a killed process. The NATS tests
// run examples/natsconsumer against the real JetStream server and count
// the side effects after lost acks, kills and duplicates.
package e2e
