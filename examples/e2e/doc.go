// Package e2e holds the end-to-end tests of the example programs: each is
// built, started as a real process on a loopback port, and driven over
// HTTP, on the memory store and, when the servers are reachable, on Redis
// and PostgreSQL, including two processes sharing one store, a process
// killed mid-request, and a store that goes away and comes back.
package e2e
