// Package loadhdr names the header loadgen marks its replays with, which
// the fixture's -floor server reads: the one thing they share.
package loadhdr

// Replay is set to "true" on a request whose Idempotency-Key loadgen sent
// before and got an answer for: a replay, for a server that must tell.
const Replay = "Loadgen-Replay"
