package pgxstore

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// queries holds the store's SQL for one table. Every statement is built
// once, in New, from templates where {{t}} is the quoted table name; nothing
// else is ever interpolated.
type queries struct {
	claim          string
	claimNoSync    string // claim, committed without waiting for its WAL flush
	complete       string
	completeNotify string
	release        string
	releaseNotify  string
	get            string
	delete         string
	deleteNotify   string
	deleteExpired  string
	extend         string
}

// recordCols are the columns every read returns, in scan order.
const recordCols = `fingerprint, state, status, headers, body, body_omitted, created_at, lease_end, expires_at`

// claimSQL takes (scope, key) or returns the record that blocks it, in one
// statement that commits on its own. Parameters: $1 scope, $2 key,
// $3 fingerprint, $4 token, $5 now, $6 lease end.
//
// All CTEs run on one snapshot:
//
//   - cur reads the row as the snapshot sees it. It is the only thing a
//     replay, a 409 or a 422 executes: ins is skipped by its WHERE, and upd
//     filters the live row out before the update node sees it, so no row
//     lock, no transaction id and no WAL.
//   - ins inserts when the snapshot has no row. ON CONFLICT DO NOTHING
//     covers a concurrent inserter that committed after the snapshot; this
//     statement then acquires nothing and sees no row, and the caller runs
//     it again on a fresh snapshot.
//   - upd takes over a row the snapshot shows expired or abandoned. Its own
//     WHERE repeats the condition on the table's columns, so under READ
//     COMMITTED PostgreSQL re-checks it against the newest row version after
//     waiting for a concurrent writer's lock: of two takers only one
//     updates. The loser acquires nothing while cur still shows the old,
//     takeable row, and the caller runs the statement again.
//
// The final SELECT always returns one row: acquired, then found and the
// record from cur. {{one}} is the one-row VALUES it selects from; for
// exactly-once mode it also switches synchronous_commit off for this
// statement's own transaction (see claimNoSyncValues).
const claimSQL = `WITH cur AS (
    SELECT ` + recordCols + `
    FROM {{t}} WHERE scope = $1::bytea AND key = $2::text
), ins AS (
    INSERT INTO {{t}} (scope, key, fingerprint, token, state, created_at, lease_end, expires_at)
    SELECT $1::bytea, $2::text, $3::bytea, $4::bytea, 1, $5::timestamptz, $6::timestamptz, $6::timestamptz
    WHERE NOT EXISTS (SELECT 1 FROM cur)
    ON CONFLICT (scope, key) DO NOTHING
    RETURNING 1
), upd AS (
    UPDATE {{t}} SET fingerprint = $3::bytea, token = $4::bytea, state = 1, status = NULL,
        headers = NULL, body = NULL, body_omitted = false, created_at = $5::timestamptz,
        lease_end = $6::timestamptz, expires_at = $6::timestamptz
    WHERE scope = $1::bytea AND key = $2::text
      AND (expires_at <= $5::timestamptz OR (state = 1 AND lease_end <= $5::timestamptz))
      AND EXISTS (SELECT 1 FROM cur
                  WHERE cur.expires_at <= $5::timestamptz OR (cur.state = 1 AND cur.lease_end <= $5::timestamptz))
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM upd),
       cur.state IS NOT NULL, cur.fingerprint, cur.state, cur.status, cur.headers, cur.body,
       cur.body_omitted, cur.created_at, cur.lease_end, cur.expires_at
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

// completeSQL: $1 scope, $2 key, $3 token, $4 status, $5 headers, $6 body,
// $7 body omitted, $8 now, $9 expires at. The statements that change a row
// end in RETURNING 1 so notifyWrap can build on them; run alone they are
// sent with Exec and the command tag tells how many rows changed.
const completeSQL = `UPDATE {{t}} SET state = 2, status = $4::integer, headers = $5::bytea, body = $6::bytea,
    body_omitted = $7::boolean, lease_end = NULL, expires_at = $9::timestamptz
WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea AND state = 1
  AND lease_end > $8::timestamptz
RETURNING 1`

// releaseSQL: $1 scope, $2 key, $3 token.
const releaseSQL = `DELETE FROM {{t}}
WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea AND state = 1
RETURNING 1`

// deleteSQL: $1 scope, $2 key.
const deleteSQL = `DELETE FROM {{t}} WHERE scope = $1::bytea AND key = $2::text RETURNING 1`

// notifyWrap turns a "... RETURNING 1" statement into one that also calls
// pg_notify($n, $n+1) for the row it changed, in the same statement, and
// returns how many rows it changed. The notification is delivered when the
// statement's transaction commits, and not at all when it changes nothing.
func notifyWrap(stmt string, chanParam string) string {
	return `WITH changed AS (` + stmt + `)
SELECT count(*) FROM (SELECT pg_notify(` + chanParam + `) FROM changed) AS notified`
}

// getSQL: $1 scope, $2 key, $3 now.
const getSQL = `SELECT ` + recordCols + ` FROM {{t}}
WHERE scope = $1::bytea AND key = $2::text AND expires_at > $3::timestamptz`

// deleteExpiredSQL deletes at most $2 rows that have expired at $1. The
// outer WHERE repeats the expiry test so a row a claim took over meanwhile
// (re-checked after its lock) is left alone; SKIP LOCKED keeps the sweeper
// from queueing behind a claim.
const deleteExpiredSQL = `DELETE FROM {{t}}
WHERE (scope, key) IN (
    SELECT scope, key FROM {{t}} WHERE expires_at <= $1::timestamptz
    LIMIT $2::integer FOR UPDATE SKIP LOCKED)
  AND expires_at <= $1::timestamptz`

// extendSQL: $1 scope, $2 key, $3 token, $4 now, $5 new lease end.
const extendSQL = `UPDATE {{t}} SET lease_end = $5::timestamptz, expires_at = $5::timestamptz
WHERE scope = $1::bytea AND key = $2::text AND token = $3::bytea AND state = 1
  AND lease_end > $4::timestamptz`

func newQueries(table string) queries {
	t := pgx.Identifier{table}.Sanitize()
	f := func(s string) string { return strings.ReplaceAll(s, "{{t}}", t) }
	return queries{
		claim:          f(strings.Replace(claimSQL, "{{one}}", claimValues, 1)),
		claimNoSync:    f(strings.Replace(claimSQL, "{{one}}", claimNoSyncValues, 1)),
		complete:       f(completeSQL),
		completeNotify: f(notifyWrap(completeSQL, "$10::text, $11::text")),
		release:        f(releaseSQL),
		releaseNotify:  f(notifyWrap(releaseSQL, "$4::text, $5::text")),
		get:            f(getSQL),
		delete:         f(deleteSQL),
		deleteNotify:   f(notifyWrap(deleteSQL, "$3::text, $4::text")),
		deleteExpired:  f(deleteExpiredSQL),
		extend:         f(extendSQL),
	}
}
