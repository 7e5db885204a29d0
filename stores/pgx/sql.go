package pgxstore

import (
	"strings"

	"github.com/idemkit/idem/stores/sqlbase"
	"github.com/jackc/pgx/v5"
)

// queries holds the store's SQL for one table. Every statement is built
// once, in New, from templates where {{t}} is the quoted table name; nothing
// else is ever interpolated.
type queries struct {
	claim             string
	claimNoSync       string // claim, committed without waiting for its WAL flush
	complete          string
	completeNotify    string
	completeTx        string // complete, in the exactly-once transaction that locked the row
	completeTxNotify  string
	release           string
	releaseNotify     string
	mark              string // skips its WAL flush (see markSQL)
	markSync          string // markSQL flushed as usual, for a DB that may run in its caller's transaction
	get               string
	delete            string
	deleteNotify      string
	deleteExpired     string
	extend            string
	extendNoSync      string // extend, committed without waiting for its WAL flush
	extendBatch       string // extend for many claims at once
	extendBatchNoSync string
	evict             string
	evictNotify       string
	lock              string // the exactly-once transaction's first statement
	clock             string
}

// recordCols are the columns every read returns, in scan order.
const recordCols = sqlbase.RecordColumns

// claimSQL takes (scope, key) or returns the record that blocks it, in one
// statement that commits on its own. Parameters: $1 scope, $2 key,
// $3 fingerprint, $4 token, $5 now, $6 lease end.
//
// All CTEs run on one snapshot:
//
//   - cur reads the row as the snapshot sees it. It is the only thing a
//     replay, a 409 or a 422 executes: ins is skipped by its WHERE, and
//     free and upd are cut off by one-time filters on cur before they scan
//     anything, so no row lock, no transaction id and no WAL.
//   - ins inserts when the snapshot has no row. ON CONFLICT DO NOTHING
//     covers a concurrent inserter that committed after the snapshot; this
//     statement then acquires nothing and sees no row, and the caller runs
//     it again on a fresh snapshot.
//   - free runs only for an in-progress row whose lease has ended: it asks
//     whether a live transaction holds the claim (see lockSQL). Such a
//     transaction locks the row FOR UPDATE, the one lock FOR KEY SHARE
//     conflicts with, so SKIP LOCKED returns nothing for a held row, at
//     once, while the short statements that change rows (a concurrent
//     takeover, a completion, a mark, a heartbeat: FOR NO KEY UPDATE) let
//     it through. A DELETE in flight also takes FOR UPDATE; see held below.
//   - upd takes over a row the snapshot shows expired or abandoned, unless
//     free found it held. Its own WHERE repeats the condition on the
//     table's columns, so under READ COMMITTED PostgreSQL re-checks it
//     against the newest row version after waiting for a concurrent
//     writer's lock: of two takers only one updates. The loser acquires
//     nothing while cur still shows the old, takeable row, and the caller
//     runs the statement again. Taking over an abandoned claim keeps its
//     waiter mark (its waiters still wait, now for the new claim); a
//     completed row's marks are spent.
//
// The final SELECT always returns one row: acquired, then found and the
// record from cur, then held: the row is in progress, its lease has ended,
// and a transaction holds it (free skipped it), so the claim is still
// alive. The caller looks once more before it answers with the held
// record, so that a DELETE that was in flight has committed. Last comes
// whether the statement ran at another isolation level than READ
// COMMITTED (the session's default; see Store.readCommitted). {{one}} is
// the one-row VALUES it selects from; for exactly-once mode it also
// switches synchronous_commit off for this statement's own transaction
// (see claimNoSyncValues).
const claimSQL = `WITH cur AS (
    SELECT ` + recordCols + `
    FROM {{t}} WHERE scope = $1::bytea AND key = $2::text
), ins AS (
    INSERT INTO {{t}} (scope, key, fingerprint, token, state, created_at, lease_end, expires_at)
    SELECT $1::bytea, $2::text, $3::bytea, $4::bytea, 1, $5::timestamptz, $6::timestamptz, $6::timestamptz
    WHERE NOT EXISTS (SELECT 1 FROM cur)
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING 1
), free AS (
    SELECT 1 FROM {{t}} WHERE scope = $1::bytea AND key = $2::text
      AND EXISTS (SELECT 1 FROM cur WHERE cur.state = 1 AND cur.lease_end <= $5::timestamptz)
    FOR KEY SHARE SKIP LOCKED
), upd AS (
    UPDATE {{t}} SET fingerprint = $3::bytea, token = $4::bytea, state = 1, status = NULL,
        headers = NULL, body = NULL, body_omitted = false, created_at = $5::timestamptz,
        lease_end = $6::timestamptz, expires_at = $6::timestamptz, waiters = (state = 1 AND waiters)
    WHERE scope = $1::bytea AND key = $2::text
      AND (expires_at <= $5::timestamptz OR (state = 1 AND lease_end <= $5::timestamptz))
      AND EXISTS (SELECT 1 FROM cur
                  WHERE cur.expires_at <= $5::timestamptz OR (cur.state = 1 AND cur.lease_end <= $5::timestamptz))
      AND (NOT EXISTS (SELECT 1 FROM cur WHERE cur.state = 1) OR EXISTS (SELECT 1 FROM free))
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM upd),
       cur.state IS NOT NULL, cur.fingerprint, cur.state, cur.status, cur.headers, cur.body,
       cur.body_omitted, cur.created_at, cur.lease_end, cur.expires_at,
       CASE WHEN cur.state = 1 AND cur.lease_end <= $5::timestamptz THEN NOT EXISTS (SELECT 1 FROM free) ELSE false END,
       current_setting('transaction_isolation') <> 'read committed'
FROM {{one}} AS one (x) LEFT JOIN cur ON true`

// claimValues and claimNoSyncValues fill {{one}} in claimSQL. The second
// calls set_config(..., true), which is SET LOCAL: it lasts until the end
// of the statement's own (implicit) transaction, so that transaction's
// commit does not wait for its WAL to reach disk, and nothing after it is
// affected. The function is volatile, so it is evaluated, once, even
// though nothing reads its result. A replay, a 409 or a 422 writes
// nothing and has nothing to flush either way.
const (
	claimValues       = `(VALUES (1))`
	claimNoSyncValues = `(VALUES (set_config('synchronous_commit', 'off', true)))`
)

// completeSQL: $1 scope, $2 key, $3 token, $4 the result's head, $5 its
// body, $6 body omitted, $7 expires at. The head goes in the headers
// column, and status stays NULL: a status there marks a row completed
// before results were opaque, whose headers column holds that version's
// header bytes (see rawRecord.record). It changes no column of the primary
// key, so it is a HOT update whenever the page has room. It does not look
// at the lease: a claim whose lease ended still belongs to its token until
// another claim takes the key over, which changes the token. The token
// stays, for Evict. The statements that end a claim are sent with Exec:
// the command tag tells how many rows changed.
const completeSQL = `UPDATE {{t}} SET state = 2, status = NULL, headers = $4::bytea, body = $5::bytea,
    body_omitted = $6::boolean, lease_end = NULL, expires_at = $7::timestamptz
WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea AND state = 1`

// releaseSQL: $1 scope, $2 key, $3 token.
const releaseSQL = `DELETE FROM {{t}}
WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea AND state = 1`

// deleteSQL: $1 scope, $2 key.
const deleteSQL = `DELETE FROM {{t}} WHERE scope = $1::bytea AND key = $2::text`

// evictSQL deletes the record a claim wrote, in either state, while it
// holds the claim's token: $1 scope, $2 key, $3 token.
const evictSQL = `DELETE FROM {{t}} WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea`

// notifying adds to a statement that ends a claim a call of
// pg_notify(chanParam) for the row it changed, in the same statement, made
// only when the row carries a waiter mark (see markSQL). The notification
// is delivered when the statement's transaction commits. A transaction
// that calls pg_notify takes a database-wide lock from its commit until
// the commit is flushed, so commits that notify queue one behind the
// other; one that does not call it takes no such lock, so a completion
// nobody waits for costs what it costs with notifications off.
func notifying(stmt string, chanParam string) string {
	return stmt + `
RETURNING CASE WHEN waiters THEN pg_notify(` + chanParam + `) END`
}

// markSQL sets the waiter mark of an in-progress record, so that the
// statement that ends the claim notifies: $1 scope, $2 key. A row already
// marked is filtered out before anything is locked, so only the first
// waiter of a claim writes. The mark commits without waiting for its WAL
// flush: a mark lost in a crash only costs a wake-up, and the server's
// connections (the listener's among them) drop in a crash anyway, which
// wakes every waiter. The one-row subquery runs set_config for a row that
// is updated; nothing is written, and nothing needs flushing, otherwise.
//
// A row that a live exactly-once transaction holds (locked FOR UPDATE, see
// lockSQL) is not marked: free skips it at once, where the UPDATE would
// wait for the handler to finish. That transaction's own completion cannot
// see a mark made after its snapshot anyway. Its waiters poll, or are
// woken in-process when the transaction commits through this Store (see
// Store.wakeLocal).
//
// Races with the statement that ends the claim are settled by the row
// lock both take (free's FOR KEY SHARE does not conflict with the
// completion's FOR NO KEY UPDATE, so the UPDATE below waits for it): if
// the mark commits first, the ending statement (under READ COMMITTED,
// re-reading the newest row version after waiting for the lock) returns
// waiters = true and notifies; if the claim ends first, the mark finds no
// in-progress row and the waiter's next look at the record (the engine
// always looks after Watch returns) sees the outcome.
const markSQL = `WITH cur AS (
    SELECT 1 FROM {{t}} WHERE scope = $1::bytea AND key = $2::text AND state = 1 AND NOT waiters
), free AS (
    SELECT 1 FROM {{t}} WHERE scope = $1::bytea AND key = $2::text AND EXISTS (SELECT 1 FROM cur)
    FOR KEY SHARE SKIP LOCKED
)
UPDATE {{t}} SET waiters = true` + noSyncFrom + `
WHERE scope = $1::bytea AND key = $2::text AND state = 1 AND NOT waiters
  AND EXISTS (SELECT 1 FROM free)`

// getSQL: $1 scope, $2 key, $3 now.
const getSQL = `SELECT ` + recordCols + ` FROM {{t}}
WHERE scope = $1::bytea AND key = $2::text AND expires_at > $3::timestamptz`

// deleteExpiredSQL deletes the rows that can go at $3 in the table's
// pages $1 up to $2 (TIDs (page, 0)), and returns how many it deleted and
// how many pages the table has; $4 is the quoted table name. PostgreSQL
// reads just those pages (TID range scans). A completed row goes at its
// expiry; an in-progress one a lease later, at lease_end + (lease_end -
// created_at), so that a late Complete, Extend or Release still finds it
// (Claim takes it over from its lease end on all the same).
//
// Such an in-progress row may still be the claim of a live exactly-once
// transaction (a handler that outlasted two leases), which holds it
// locked FOR UPDATE: the hashed subquery locks the in-progress candidates
// FOR KEY SHARE SKIP LOCKED first, so a held row is left alone without
// waiting for its transaction, and only the rows it locked are deleted. It
// runs only when the range holds such a row, and those are rare (crashed
// requests), so the sweep of completed rows, the bulk, writes nothing but
// the deletions. A row a claim took over meanwhile is left alone: under
// READ COMMITTED the DELETE waits for the claim's row lock, then re-checks
// the condition against the new row version. There is no index on
// expires_at: a completion that changed an indexed column could not be a
// HOT update.
const deleteExpiredSQL = `WITH gone AS (
    DELETE FROM {{t}}
    WHERE ctid >= $1::tid AND ctid < $2::tid
      AND ((state = 2 AND expires_at <= $3::timestamptz)
           OR (state = 1 AND lease_end + (lease_end - created_at) <= $3::timestamptz
               AND ctid IN (SELECT ctid FROM {{t}}
                            WHERE ctid >= $1::tid AND ctid < $2::tid
                              AND state = 1 AND lease_end + (lease_end - created_at) <= $3::timestamptz
                            FOR KEY SHARE SKIP LOCKED)))
    RETURNING 1)
SELECT (SELECT count(*) FROM gone), pg_relation_size($4::text::regclass) / current_setting('block_size')::bigint`

// extendSQL: $1 scope, $2 key, $3 token, $4 new lease end. Like
// completeSQL it does not look at the lease: a claim nobody took over is
// still its token's. {{nosync}} is empty, or for exactly-once mode the
// one-row subquery of markSQL, so that the heartbeat's commit does not
// wait for its flush.
const extendSQL = `UPDATE {{t}} SET lease_end = $4::timestamptz, expires_at = $4::timestamptz{{nosync}}
WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea AND state = 1`

// extendBatchSQL is extendSQL for many claims in one statement: $1
// scopes, $2 keys, $3 tokens and $4 new lease ends, one element per
// claim. It returns the claims it extended. {{nosync}} is as in extendSQL.
const extendBatchSQL = `UPDATE {{t}} AS r SET lease_end = b.lease_end, expires_at = b.lease_end
FROM unnest($1::bytea[], $2::text[], $3::bytea[], $4::timestamptz[]) AS b(scope, key, token, lease_end){{nosync}}
WHERE r.scope = b.scope AND r.key = b.key AND r.token = b.token AND r.state = 1
RETURNING r.scope, r.key, r.token`

// lockSQL is the first statement of an exactly-once transaction: it locks
// the claim's row FOR UPDATE while the claim still holds it ($1 scope,
// $2 key, $3 token), and the lock lasts until the transaction ends. While
// it lives nothing else writes the row: a claim past the lease end finds
// it held (see claimSQL), a waiter does not mark it (markSQL), the
// sweeper skips it (deleteExpiredSQL), and the engine sends no heartbeat
// (the Tx is a store.ClaimHolder). So the completion the transaction
// writes at its end never meets a row version newer than its snapshot, at
// any isolation level, and needs no pooled connection besides its own. A
// crash ends the transaction, and the lock, with its connection.
//
// It returns the transaction's ID, which completeSQL then requires
// (inLockingTx): a handler that ends the transaction with SQL and begins
// another (ROLLBACK; BEGIN, ROLLBACK AND CHAIN) leaves the connection in a
// transaction that never locked the row, and whose earlier writes may be
// gone, and the record must not complete in it.
const lockSQL = `SELECT pg_current_xact_id()::text FROM {{t}}
WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea AND state = 1
FOR UPDATE`

// inLockingTx is the condition completeSQL adds inside an exactly-once
// transaction: that it is still the one whose ID lockSQL returned (the
// parameter param).
func inLockingTx(param string) string {
	return "\n    AND pg_current_xact_id()::text = " + param + "::text"
}

// clockSQL reads the server's clock: clock_timestamp() is the time of the
// call, where now() would be the start of the statement's transaction.
const clockSQL = `SELECT clock_timestamp()`

const noSyncFrom = `
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS nosync (x)`

func newQueries(table string) queries {
	t := pgx.Identifier{table}.Sanitize()
	f := func(s string) string { return strings.ReplaceAll(s, "{{t}}", t) }
	return queries{
		claim:             f(strings.Replace(claimSQL, "{{one}}", claimValues, 1)),
		claimNoSync:       f(strings.Replace(claimSQL, "{{one}}", claimNoSyncValues, 1)),
		complete:          f(completeSQL),
		completeNotify:    f(notifying(completeSQL, "$8::text, $9::text")),
		completeTx:        f(completeSQL + inLockingTx("$8")),
		completeTxNotify:  f(notifying(completeSQL+inLockingTx("$10"), "$8::text, $9::text")),
		release:           f(releaseSQL),
		releaseNotify:     f(notifying(releaseSQL, "$4::text, $5::text")),
		mark:              f(markSQL),
		markSync:          f(strings.Replace(markSQL, noSyncFrom, "", 1)),
		get:               f(getSQL),
		delete:            f(deleteSQL),
		deleteNotify:      f(notifying(deleteSQL, "$3::text, $4::text")),
		deleteExpired:     f(deleteExpiredSQL),
		extend:            f(strings.Replace(extendSQL, "{{nosync}}", "", 1)),
		extendNoSync:      f(strings.Replace(extendSQL, "{{nosync}}", noSyncFrom, 1)),
		extendBatch:       f(strings.Replace(extendBatchSQL, "{{nosync}}", "", 1)),
		extendBatchNoSync: f(strings.Replace(extendBatchSQL, "{{nosync}}", ",\n    (SELECT set_config('synchronous_commit', 'off', true)) AS nosync (x)", 1)),
		evict:             f(evictSQL),
		evictNotify:       f(notifying(evictSQL, "$4::text, $5::text")),
		lock:              f(lockSQL),
		clock:             clockSQL,
	}
}
